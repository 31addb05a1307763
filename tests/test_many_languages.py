"""Many languages in one config: NTREX-128's codes, languages read from its table, template
tables, pair keys with hyphenated codes, the dev split by document, and bad input refused before
any work starts."""

from __future__ import annotations

import gzip
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
