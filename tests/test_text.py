import pytest

from swe import text


def test_sentences_are_split_per_line():
    got = text.split_sentences("First one. Second one!\n\n  Third line without stop\nLast.")
    assert got == ["First one.", "Second one!", "Third line without stop", "Last."]


def test_sentences_of_blank_text():
    assert text.split_sentences("") == []
    assert text.split_sentences(" \n\t\n") == []


def test_words_and_spans_agree():
    s = "Don't stop—the U.S.A. costs $5.50, e.g. “quoted”."
    spans = text.word_spans(s)
    assert [w for w, _, _ in spans] == text.words(s)
    assert all(s[a:b] == w for w, a, b in spans)
    assert text.words(s)[:3] == ["Do", "n't", "stop"]


@pytest.mark.parametrize(
    ("unit", "punct"),
    [(".", True), ("—", True), ("$", True), ("“", True), ("😀", True), ("...", True),
     ("word", False), ("U.S.A.", False), ("5.50", False), ("n't", False), ("北京", False)],
)
def test_punctuation(unit, punct):
    assert text.is_punctuation(unit) is punct


def test_bad_characters_are_cleaned_not_fatal():
    assert text.words("a \ud800 b") == ["a", "\ufffd", "b"]
    assert text.words("nul\x00byte") == ["nul", "byte"]
    assert text.clean("ok") == "ok"


def test_cjk_detection_and_split(minilm):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm / "tokenizer.json"))
    tok.no_padding()
    unspaced = text.has_unspaced_script
    assert unspaced("北京") and unspaced("です") and not unspaced("Straße")
    assert text.words("我爱北京。") == ["我爱北京", "。"]  # BlingFire does not segment CJK
    assert text.split_unspaced("北京天安门", tok, "[UNK]") == ["北", "京", "天", "安"]
    assert text.split_unspaced("北京", None) == ["北", "京"]


def test_language_policy():
    assert text.language("en").lowercase and not text.language("en").teacher_tokens
    assert not text.language("de").lowercase
    assert text.language("zh").teacher_tokens and text.language("ja").teacher_tokens
    with pytest.raises(ValueError, match=r"unknown language 'xx': no case and segmentation "
                                         r"policy is declared for it in .*languages\.tsv; known: "
                                         r".*en"):
        text.language("xx")


def test_every_ntrex_language_has_a_policy_and_its_tatoeba_code(data_dir):
    import csv

    with open(data_dir / "parallel/ntrex128/languages.tsv", encoding="utf-8") as f:
        ntrex = list(csv.DictReader(f, delimiter="\t"))
    assert len(ntrex) == 124
    for row in ntrex:
        spec = text.language(row["code"])
        assert spec.tatoeba == row["tatoeba"] and spec.name == row["name"]
    unspaced = {c for c, spec in text.LANGUAGES.items() if spec.teacher_tokens}
    assert {"tha", "khm", "jpn", "zho-CN", "yue", "zh", "ja"} <= unspaced
    assert not text.language("deu").teacher_tokens and text.language("deu").lowercase
    # a Thai or Khmer word is split into teacher tokens, like Chinese
    unspaced = text.has_unspaced_script
    assert unspaced("ภาษาไทย") and unspaced("ភាសាខ្មែរ") and not unspaced("Wörter")


def test_unit_keys_match_units(minilm, data_dir):
    import lzma

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm / "tokenizer.json"))
    tok.no_padding()
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.00.txt.xz", "rt") as f:
        texts = [next(f) for _ in range(300)]
    texts += ["Don't stop — U.S.A.!", "我爱北京。東京は日本の首都です", "😀 ok"]
    for lang in ("en", "de", "zh"):
        spec = text.language(lang)
        for t in texts:
            assert text.unit_keys(t, spec, tok, "[UNK]") == [
                k for k, _, _ in text.units(t, spec, tok, "[UNK]")]
    assert text.unit_keys("The CAT", text.language("en")) == ["the", "cat"]
    assert text.unit_keys("Der Hund", text.language("de")) == ["Der", "Hund"]
