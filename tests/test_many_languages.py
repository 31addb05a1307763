"""Many languages in one config: NTREX-128's codes, languages read from its table, template
tables, pair keys with hyphenated codes, the dev split by document, and bad input refused before
any work starts."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from swe.build import load_config
from swe.build.config import ConfigError
from swe.build.pairs.readers import dev_sources, held_out_documents
from swe.build.pairs.sources import PairsConfig, PairSource, languages

ROOT = Path(__file__).resolve().parent.parent
NTREX = "parallel/ntrex128"


def test_ntrex_config_expands_to_english_and_every_language_with_a_tatoeba_set(data_dir):
    cfg = load_config("ntrex", ["teacher='minilm'"], output="out/ntrex-test")  # no e5 needed
    assert cfg.languages[0] == "en" and len(cfg.languages) == 73
    assert {"deu", "zho-CN", "srp-Latn", "tha", "jpn"} <= set(cfg.languages)
    assert "bem" not in cfg.languages  # no Tatoeba test set
    assert cfg.corpus["deu"].paths == [f"{{data}}/{NTREX}/en-deu.tsv.gz"]
    assert len(cfg.pairs) == 72 and cfg.pairs["en-zho-CN"].paths == [
        f"{{data}}/{NTREX}/en-zho-CN.tsv.gz"]
    assert cfg.corpus["en"].paths[0].endswith("en-deu.tsv.gz")  # its own table wins


def test_pair_keys_split_at_known_codes():
    assert languages("en-zho-CN") == ("en", "zho-CN")
    assert languages("srp-Latn-en") == ("srp-Latn", "en")
    assert languages("en-de") == ("en", "de")
    with pytest.raises(ValueError, match="name a pair as SRC-TGT"):
        languages("en")


def _tsv(path: Path, header: str, rows: list[str]) -> None:
    path.write_bytes(gzip.compress(("\n".join([header, *rows]) + "\n").encode()))


def test_held_out_documents_are_a_tenth_and_the_same_for_every_language(tmp_path):
    ids = [f"doc{i // 7}" for i in range(140)]  # 20 documents of 7 rows
    held = held_out_documents(ids, seed=0)
    assert len(held) == 2 and held == held_out_documents(list(reversed(ids)), seed=0)
    assert held != held_out_documents(ids, seed=1)
    (tmp_path / "docs.txt").write_text("\n".join(ids) + "\n")
    english = [f"English sentence {i}." for i in range(140)]
    sides = {}
    for code in ("deu", "fra"):
        _tsv(tmp_path / f"en-{code}.tsv.gz", f"en\t{code}",
             [f"{e}\t{code} {i}" for i, e in enumerate(english)])
        source = PairSource(f"en-{code}", "tsv", (str(tmp_path / f"en-{code}.tsv.gz"),))
        sides[code] = dev_sources(source, PairsConfig(dev_documents=str(tmp_path / "docs.txt")),
                                  seed=0)
    expected = {english[i] for i, d in enumerate(ids) if d in held}
    assert sides["deu"] == sides["fra"] == expected and len(expected) == 14


def test_a_document_list_of_another_length_is_refused(tmp_path):
    (tmp_path / "docs.txt").write_text("a\nb\n")
    _tsv(tmp_path / "en-deu.tsv.gz", "en\tdeu", ["x\ty", "x2\ty2", "x3\ty3"])
    source = PairSource("en-deu", "tsv", (str(tmp_path / "en-deu.tsv.gz"),))
    with pytest.raises(ValueError, match=r"en-deu\.tsv\.gz has 3 data rows but .*docs\.txt "
                                         r"lists 2 document ids"):
        dev_sources(source, PairsConfig(dev_documents=str(tmp_path / "docs.txt")), seed=0)


def _config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "many.toml"
    path.write_text(f'teacher = "minilm"\noutput = "{tmp_path / "out"}"\n{body}')
    return path


def test_bad_language_data_is_refused_before_any_work(tmp_path):
    _tsv(tmp_path / "en-deu.tsv.gz", "en\tdeu", ["Hello\tHallo"])
    _tsv(tmp_path / "en-fra.tsv.gz", "en\tspa", ["Hello\tHola"])  # columns of another language
    _tsv(tmp_path / "en-ita.tsv.gz", "en\tita", [])  # a header, no text
    cfg = _config(tmp_path, f'''languages = ["en", "deu", "fra", "ita", "xx"]
[corpus."*"]
paths = ["{tmp_path}/en-{{lang}}.tsv.gz"]
[corpus.en]
paths = ["{tmp_path}/en-deu.tsv.gz"]
[corpus.xx]
paths = ["{tmp_path}/nothing-here.tsv.gz"]
[pairs."en-*"]
paths = ["{tmp_path}/en-{{lang}}.tsv.gz"]
[refine]
objective = "contrastive"
''')
    with pytest.raises(ConfigError) as e:
        load_config(str(cfg))
    text = str(e.value)
    assert "unknown language(s) ['xx']" in text
    assert f"{tmp_path}/en-fra.tsv.gz: the TSV header ['en', 'spa'] has no column 'fra'" in text
    assert f"corpus.ita: its files hold no text ({tmp_path}/en-ita.tsv.gz)" in text
    assert f"pairs.en-fra: {tmp_path}/en-fra.tsv.gz has the columns ['en', 'spa'], not 'en' " \
           "and 'fra'" in text
    assert "corpus.xx: cannot read" in text and "nothing-here" in text


def test_a_languages_file_without_the_column_is_refused(tmp_path):
    (tmp_path / "langs.tsv").write_text("code\tname\ndeu\tGerman\n")
    cfg = _config(tmp_path, f'languages_file = "{tmp_path}/langs.tsv"\n'
                            'languages_with = "tatoeba"\n')
    with pytest.raises(ConfigError, match=r"languages_with = 'tatoeba' is not a column of "):
        load_config(str(cfg), check_paths=False)


# -- all the text there is: multilingual/ pairs, monolingual files and word lists ------------

ML = "multilingual"


def test_many_config_reads_every_kind_of_text_of_a_language(data_dir):
    cfg = load_config("many", ["teacher='minilm'"], output="out/many-test")
    assert cfg.languages[0] == "en" and len(cfg.languages) == 73
    deu = [Path(p).relative_to(data_dir).as_posix() for p in cfg.corpus["deu"].files()]
    assert deu == [f"{NTREX}/en-deu.tsv.gz", f"{ML}/en-deu.tsv.xz", f"{ML}/deu.txt.xz"]
    amh = [Path(p).name for p in cfg.corpus["amh"].files()]
    assert amh == ["en-amh.tsv.gz", "en-amh.tsv.xz"]  # no amh.txt.xz: none read, no error
    assert cfg.vocab.word_list("deu").endswith(f"{ML}/vocab/deu.tsv.xz")
    assert cfg.vocab.word_list("amh") == ""  # no word list for Amharic
    assert cfg.pairs["en-deu"].dev_share == 0.1 and cfg.pairs["en-deu"].dev_documents


def test_the_dev_tenth_is_chosen_by_the_english_sentence(data_dir):
    """One English sentence is dev in every language or in none (FLORES gives 72 languages the
    same English side), about a tenth of the sentences, and a different tenth for another seed."""
    import pyarrow as pa

    from swe.build.pairs.text import sentence_share

    english = {}
    for code in ("deu", "fra", "tha"):
        src, = (pa.array([line.split("\t")[0] for line in _xz_lines(
            data_dir / ML / f"en-{code}.tsv.xz")[1:]]),)
        english[code] = dict(zip(src.to_pylist(), sentence_share(src, seed=0) < 0.1,
                                 strict=False))
    common = set(english["deu"]) & set(english["fra"]) & set(english["tha"])
    assert len(common) > 1000
    assert all(english["deu"][s] == english["fra"][s] == english["tha"][s] for s in common)
    share = sum(english["deu"].values()) / len(english["deu"])
    assert 0.08 < share < 0.12
    other = sentence_share(pa.array(sorted(common)), seed=1) < 0.1
    assert sum(other) and list(other) != [english["deu"][s] for s in sorted(common)]
    again = sentence_share(pa.array(["  A  Sentence. "]), 0), sentence_share(
        pa.array(["a sentence."]), 0)
    assert again[0] == again[1]  # normalised as pairs are


def _xz_lines(path: Path) -> list[str]:
    import lzma

    return lzma.decompress(path.read_bytes()).decode().splitlines()


def test_dev_documents_describe_the_first_file_and_dev_share_the_others(tmp_path, data_dir):
    """The NTREX file is split by its documents; the multilingual/ file, whose rows the
    document list does not describe, by English sentence."""
    import pyarrow as pa

    from swe.build.pairs.dataset import read_pair_source

    cfg = PairsConfig(paths=[f"{{data}}/{NTREX}/en-deu.tsv.gz", f"{{data}}/{ML}/en-deu.tsv.xz"],
                      dev_documents=f"{{data}}/{NTREX}/document_ids.txt", dev_share=0.1)
    out = {}
    for name in ("ntrex", "ml"):
        path = data_dir / (f"{NTREX}/en-deu.tsv.gz" if name == "ntrex" else f"{ML}/en-deu.tsv.xz")
        source = PairSource("en-deu", "tsv", (str(path),))
        batch = pa.table({"i": [0], "source": [json.dumps(asdict(source))]})
        tables = list(read_pair_source(batch, {"en-deu": asdict(cfg)}, str(tmp_path / name), 0))
        out[name] = pa.concat_tables(tables)
        held = out[name].filter(out[name].column("dev"))
        if name == "ntrex":
            assert set(held.column("src").to_pylist()) == dev_sources(source, cfg, 0)
    share = {k: t.column("dev").to_numpy().mean() for k, t in out.items()}
    assert 0.05 < share["ntrex"] < 0.2 and 0.08 < share["ml"] < 0.12


def _files(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _many(tmp_path: Path, data_dir: Path, extra: str, languages: str = '["en", "deu"]') -> Path:
    ntrex = data_dir / NTREX
    return _config(tmp_path, f'''languages = {languages}
[corpus."*"]
paths = ["{ntrex}/en-{{lang}}.tsv.gz"]
[corpus.en]
paths = ["{ntrex}/en-deu.tsv.gz"]
{extra}''')


def test_bad_word_lists_and_unknown_codes_are_refused_before_any_work(tmp_path, data_dir):
    lists = _files(tmp_path / "lists", {"deu.tsv": "word\tcount\nich\t12\ndu\tmany\n",
                                        "fra.tsv": "wort\tzahl\nje\t3\n",
                                        "xyz.tsv": "word\tcount\n"})
    texts = _files(tmp_path / "texts", {"deu.txt": "Hallo.\n", "qqq.txt": "?\n"})
    cfg = _many(tmp_path, data_dir, f'''[vocab]
word_lists = "{lists}/{{lang}}.tsv"
''', '["en", "deu", "fra"]').read_text().replace(
        '[corpus.en]', f'paths_if_present = ["{texts}/{{lang}}.txt"]\n[corpus.en]')
    path = tmp_path / "bad.toml"
    path.write_text(cfg)
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    text = str(e.value)
    assert f"vocab.word_lists: {lists}/deu.tsv line 3: 'du\\tmany' is not word<TAB>count" in text
    assert f"vocab.word_lists: {lists}/fra.tsv: the header is 'wort\\tzahl'" in text
    assert "vocab.word_lists = " in text and "'xyz' (in " in text and "is not a language" in text
    assert 'corpus."*".paths_if_present' in text and "'qqq'" in text
    assert "'deu'" not in text.split("is not a language")[0][-200:]


def test_a_contrastive_build_refuses_a_language_without_pairs(tmp_path, data_dir):
    ntrex = data_dir / NTREX
    cfg = _many(tmp_path, data_dir, f'''[pairs.en-deu]
paths = ["{ntrex}/en-deu.tsv.gz"]
[refine]
objective = "contrastive"
''', '["en", "deu", "fra"]')
    with pytest.raises(ConfigError, match=r"'fra' is in no \[pairs\.\*\] section: its words "
                                          r"would never be aligned; add pairs \(e\.g\. "
                                          r"\[pairs\.en-fra\]\)"):
        load_config(str(cfg))


def test_listed_words_seen_once_join_the_vocabulary_after_the_frequent_ones(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from swe.build.stages.vocab import merge_partition, select_words

    counts = tmp_path / "counts"
    words = {"der": 9, "die": 7, "hund": 1, "katze": 1, "xylophon": 1, "baum": 2}
    (counts / "p0000").mkdir(parents=True)
    pq.write_table(pa.table({"word": list(words), "count": pa.array(list(words.values()),
                                                                       pa.int64())}),
                   counts / "p0000" / "s000000.parquet")
    lst = tmp_path / "deu.tsv"
    lst.write_text("word\tcount\nHund\t100\nkatze\t50\nfehlt\t10\n")
    result = merge_partition(str(counts), 0, 3, 2, (str(lst), 1, "deu", ""))
    assert result["listed"] == 2  # hund (listed as Hund: keys are lowercased) and katze
    top = select_words(str(counts), 1, 3, 2, str(tmp_path / "deu.parquet"))

    got = pq.read_table(tmp_path / "deu.parquet").to_pylist()
    assert [(r["word"], r["count"]) for r in got] == [
        ("der", 9), ("die", 7), ("baum", 2), ("hund", 1), ("katze", 1)]
    assert top["listed"] == 2 and "xylophon" not in {r["word"] for r in got}


def test_cyrillic_serbian_and_uzbek_find_their_latin_vocabulary():
    import numpy as np

    from swe.model import StaticModel

    words = ["vaš", "pasoš", "o'zbekiston", "ваш"]
    both = StaticModel(words, np.eye(4), languages=["en", "srp-Latn", "uzb"])
    assert both.tokenize("Пасош Ўзбекистон ВАШ морате") == [
        ("Пасош", "pasoš"), ("Ўзбекистон", "o'zbekiston"),
        ("ВАШ", "ваш"),  # a Cyrillic entry of its own wins over the Latin reading
        ("морате", None)]
    english = StaticModel(words, np.eye(4), languages=["en"])
    assert english.tokenize("Пасош") == [("Пасош", None)]  # no two-script language: no reading


def test_the_card_lists_each_language_with_the_size_of_its_text_and_its_scores(tmp_path):
    from swe.build.card import add_scores, language_facts, render_card

    def done(stage: str, stats: dict) -> None:
        (tmp_path / "work" / stage).mkdir(parents=True)
        (tmp_path / "work" / stage / "_DONE.json").write_text(json.dumps({"stats": stats}))

    done("corpus", {"shards": {"en": [{"lines": 5}], "deu": [{"lines": 3}, {"lines": 4}]}})
    done("sentences", {"shards": {"en": [{"sentences": 5}], "deu": [{"sentences": 6}]}})
    done("vocab", {"sizes": {"en": 40, "deu": 1200}, "listed": {"deu": 200}})
    done("train_data", {"pairs": {"en-deu": 1500}})
    facts = language_facts(str(tmp_path))
    assert facts == {"en": {"lines": 5, "sentences": 5, "words": 40},
                     "deu": {"lines": 7, "sentences": 6, "words": 1200, "listed": 200,
                             "pairs": 1500}}
    card = render_card("model", {"languages": ["en", "deu"], "vocab_size": 1240}, {
        "corpus": {}}, [], facts)
    assert "| German | deu | 7 | 6 | 1,200 (200) | 1,500 |" in card
    assert "| English | en | 5 | 5 | 40 | – |" in card
    (tmp_path / "README.md").write_text(card)
    add_scores(str(tmp_path), ["| deu | 91.0 |"])
    text = (tmp_path / "README.md").read_text()
    assert "## Speed and quality\n\n| deu | 91.0 |\n\n## Licence notes" in text
    assert "Not measured by the build" not in text


@pytest.mark.parametrize("setting, needle", [
    ('vocab.word_lists="a\\u0000b/{lang}.tsv"',
     "vocab.word_lists: 'a\\x00b/{lang}.tsv' is not a path"),
    ("vocab.word_lists=' '", "vocab.word_lists: ' ' is not a path"),
    ("corpus.en.paths_if_present=['']", "corpus.en.paths_if_present: '' is not a path"),
])
def test_an_empty_or_nul_optional_path_is_refused_before_any_work(setting, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_config("quickstart", [setting], output="out/q", check_paths=False)
