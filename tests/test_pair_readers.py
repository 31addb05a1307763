"""CCMatrix pair readers (swe/build/pairs/) on the real en-de pairs written in every release
format: OPUS Moses zip, headerless CCMatrix TSV (xz, gz), plain aligned files, headered TSV —
locally and on S3 (moto)."""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import json
import lzma
import math
import pickle
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swe import storage
from swe.build.pairs.readers import read_source
from swe.build.pairs.sources import STATS, PairsConfig, PairSource, config_problems, plan_sources
from swe.build.pairs.text import normalize, pair_hash
from swe.build.shuffle import shuffle_key

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ccmatrix_fixture",
                                               ROOT / "tools" / "ccmatrix_fixture.py")
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)

KEY = "en-de"


# -- helpers ----------------------------------------------------------------------------------


def norm(s: str) -> str:
    return " ".join(s.casefold().split())


def reference(rows, cfg: PairsConfig):
    """The filters in plain Python: kept ``(src, tgt, score)`` and drop counts by reason."""
    kept, drops = [], Counter()
    for x, y, s in rows:
        x, y = x.strip(), y.strip()
        if not x or not y:
            reason = "empty"
        elif s < cfg.min_score:
            reason = "below_min_score"
        elif min(len(x), len(y)) < cfg.min_chars:
            reason = "too_short"
        elif max(len(x), len(y)) > cfg.max_chars:
            reason = "too_long"
        elif cfg.drop_identical and norm(x) == norm(y):
            reason = "identical"
        else:
            kept.append((x, y, s))
            continue
        drops[reason] += 1
    return kept, drops


def read_all(key: str, cfg: PairsConfig, chunk_rows: int = 65536):
    """Every kept row of a section as ``(src, tgt, score)``, the stats, the sources."""
    stats: dict[str, int] = {}
    sources = plan_sources(key, cfg)
    rows = []
    for s in sources:
        for t in read_source(s, cfg, stats, chunk_rows):
            assert t.column_names == ["src", "tgt", "score", "pair"]
            assert t.schema.field("score").type == pa.float64()
            assert set(t.column("pair").to_pylist()) == {key}
            rows += zip(t["src"].to_pylist(), t["tgt"].to_pylist(), t["score"].to_pylist(),
                        strict=True)
    assert stats["read"] == stats["kept"] + sum(stats[k] for k in STATS[2:])
    return rows, stats, sources


def same_rows(got, want, scored: bool) -> None:
    assert [(x, y) for x, y, _ in got] == [(x, y) for x, y, _ in want]
    if scored:
        assert [s for *_, s in got] == [s for *_, s in want]
    else:
        assert all(math.isnan(s) for *_, s in got)


def drops(stats: dict[str, int]) -> Counter:
    return Counter({k: v for k, v in stats.items() if k not in ("read", "kept") and v})


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ende(data_dir):
    """The shared en-de pairs (as pair_dataset.read_pairs parses them) and random scores."""
    en, de = fx.load_pairs(KEY, data_dir)
    assert len(en) > 40_000
    return en, de, fx.random_scores(len(en), 7)


@pytest.fixture(scope="module")
def files(ende, tmp_path_factory):
    """Every release format of the shared pairs."""
    en, de, scores = ende
    d = tmp_path_factory.mktemp("ccmatrix")
    fx.write_moses_zip(d / "de-en.txt.zip", KEY, en, de, scores)
    fx.write_ccmatrix_tsv(d / "de-en.tsv.xz", KEY, en, de, scores)
    fx.write_ccmatrix_tsv(d / "CCMatrix.de-en.tsv.gz", KEY, en, de, scores)
    (d / "plain").mkdir()
    fx.write_aligned(d / "plain" / "corpus", KEY, en, de, scores)
    (d / "plaingz").mkdir()
    fx.write_aligned(d / "plaingz" / "corpus", KEY, en, de, compression=".gz")
    return d


@pytest.fixture(scope="module")
def expected(ende):
    en, de, scores = ende
    return reference(zip(en, de, scores, strict=True), PairsConfig())


CASES = {  # name: (paths under the files dir, kinds planned, scored)
    "moses-zip": (["de-en.txt.zip"], ["moses"], True),
    "ccmatrix-xz": (["de-en.tsv.xz"], ["ccmatrix-tsv"], True),
    "ccmatrix-gz": (["CCMatrix.de-en.tsv.gz"], ["ccmatrix-tsv"], True),
    "aligned": (["plain/*"], ["aligned"], True),
    "aligned-gz": (["plaingz/corpus.de.gz", "plaingz/corpus.en.gz"], ["aligned"], False),
}


# -- every format gives the same pairs ----------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_every_format_gives_the_headered_tsv_pairs(case, files, ende, expected):
    paths, kinds, scored = CASES[case]
    rows, stats, sources = read_all(KEY, PairsConfig(paths=[str(files / p) for p in paths]))
    assert [s.kind for s in sources] == kinds
    kept, want_drops = expected
    same_rows(rows, kept, scored)
    assert rows[0][:2] == (ende[0][0], ende[1][0])  # English is src: the direction is right
    assert stats["read"] == len(ende[0])
    assert drops(stats) == want_drops
    assert want_drops["identical"] > 0


def test_headered_tsv_reader(data_dir, expected):
    rows, stats, sources = read_all(KEY, PairsConfig(
        paths=[str(data_dir / "parallel" / KEY / "*.tsv.gz")]))
    assert {s.kind for s in sources} == {"tsv"}
    same_rows(rows, expected[0], scored=False)
    assert drops(stats) == expected[1]


def test_headered_tsv_reader_unfiltered_equals_read_pairs_parse(data_dir, ende):
    """With the filters off, exactly what ``pair_dataset.read_pairs`` (before this module) gave:
    the benchmark's ``load_pairs`` parses the files the same way."""
    cfg = PairsConfig(paths=[str(data_dir / "parallel" / KEY / "*.tsv.gz")], format="tsv",
                      max_chars=10**9, drop_identical=False)
    rows, stats, _ = read_all(KEY, cfg)
    assert [(x, y) for x, y, _ in rows] == list(zip(ende[0], ende[1], strict=True))
    assert stats["read"] == stats["kept"] == len(ende[0])


# -- format detection and column order ----------------------------------------------------------


def test_order_from_name_option_or_section(files, ende, tmp_path):
    en, de, scores = ende
    n = 2000
    # columns en, de in a file whose name says so
    body = "".join(f"{s}\t{x}\t{y}\n" for x, y, s in zip(en[:n], de[:n], scores, strict=False))
    (tmp_path / "en-de.tsv.gz").write_bytes(gzip.compress(body.encode()))
    # the same columns, a name without languages: the section's order (en-de)
    (tmp_path / "plain.tsv.gz").write_bytes((tmp_path / "en-de.tsv.gz").read_bytes())
    for name in ("en-de.tsv.gz", "plain.tsv.gz"):
        (src,) = plan_sources(KEY, PairsConfig(paths=[str(tmp_path / name)]))
        assert (src.kind, src.swapped) == ("ccmatrix-tsv", False)
        rows, _, _ = read_all(KEY, PairsConfig(paths=[str(tmp_path / name)], drop_identical=False))
        assert rows[0][:2] == (en[0], de[0])
    # order overrides the name; a de-en file read under [pairs.de-en] is not swapped
    (src,) = plan_sources(KEY, PairsConfig(paths=[str(tmp_path / "plain.tsv.gz")],
                                           order="de-en"))
    assert src.swapped
    (src,) = plan_sources("de-en", PairsConfig(paths=[str(files / "de-en.tsv.xz")]))
    assert not src.swapped
    rows, _, _ = read_all("de-en", PairsConfig(paths=[str(files / "de-en.txt.zip")]))
    assert rows[0][:2] == (de[0], en[0])


def test_explicit_formats(files, data_dir, tmp_path):
    shared = str(data_dir / "parallel" / KEY / "wmt23_test.tsv.gz")
    assert [s.kind for s in plan_sources(KEY, PairsConfig(paths=[shared], format="tsv"))] == \
        ["tsv"]
    (tmp_path / "scored.txt.gz").write_bytes((files / "CCMatrix.de-en.tsv.gz").read_bytes())
    cfg = PairsConfig(paths=[str(tmp_path / "scored.txt.gz")], format="ccmatrix-tsv",
                      order="de-en")
    (src,) = plan_sources(KEY, cfg)
    assert (src.kind, src.swapped) == ("ccmatrix-tsv", True)
    cfg = PairsConfig(paths=[str(files / "de-en.txt.zip"), str(files / "plain" / "*")],
                      format="moses")
    assert [s.kind for s in plan_sources(KEY, cfg)] == ["moses", "aligned"]


def test_plan_is_picklable_and_json(files):
    cfg = PairsConfig(paths=[str(files / p) for c in CASES.values() for p in c[0]])
    for s in plan_sources(KEY, cfg):
        assert pickle.loads(pickle.dumps(s)) == s
        assert PairSource(**json.loads(json.dumps(dataclasses.asdict(s)))) == s
    (z,) = plan_sources(KEY, PairsConfig(paths=[str(files / "de-en.txt.zip")]))
    assert z.members == ("CCMatrix.de-en.en", "CCMatrix.de-en.de")
    assert z.scores == "CCMatrix.de-en.scores"


# -- filters and bad input, counted by reason -------------------------------------------------


@pytest.mark.parametrize("cfg", [
    PairsConfig(min_score=1.15, min_chars=20, max_chars=80),
    PairsConfig(min_score=1.25, min_chars=3, max_chars=40, drop_identical=False),
    PairsConfig(min_chars=60),
])
def test_filters(cfg, files, ende):
    en, de, scores = ende
    cfg = dataclasses.replace(cfg, paths=[str(files / "de-en.tsv.xz")])
    rows, stats, _ = read_all(KEY, cfg)
    kept, want = reference(zip(en, de, scores, strict=True), cfg)
    same_rows(rows, kept, scored=True)
    assert drops(stats) == want
    assert all(s >= cfg.min_score for *_, s in rows)


def test_min_score_on_unscored_sources_is_no_filter(files, ende, caplog):
    cfg = PairsConfig(paths=[str(files / "plaingz" / "*")], min_score=1.2)
    rows, stats, _ = read_all(KEY, cfg)
    assert stats["below_min_score"] == 0 and len(rows) == stats["kept"] > 40_000
    assert "has no scores: min_score" in caplog.text


def _gz(path: Path, lines: list[bytes]) -> str:
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    return str(path)


BAD_CCMATRIX = [  # (line, reason)
    ("\ufeff1.2\tEin Haus.\tA house.".encode(), "kept"),  # BOM before the first line
    (b"abc\tEin Haus.\tA house.", "malformed"),
    (b"1.1\tnur zwei Felder", "malformed"),
    (b"1.1\tvier\tFelder\thier", "malformed"),
    (b"nan\tEin Baum.\tA tree.", "malformed"),
    (b"inf\tEin Baum.\tA tree.", "malformed"),
    (b"1.1\tEin \xff\xfe Baum.\tA tree.", "invalid_utf8"),
    (b"1.1\tEin Baum.\tA \xed\xa0\x80 tree.", "invalid_utf8"),  # a UTF-8 surrogate
    (b"", "empty"),
    (b"  \r", "empty"),
    (b"1.1\t  \tHello", "empty"),
    (b"1.1\tHallo da\t Hello there \r", "kept"),  # CRLF
    (b" 1.05 \tEin Hund.\tA dog.", "below_min_score"),
    (b"1.1\tJa\tYes", "too_short"),
    ("1.1\tOkay\u3000\tokay".encode(), "identical"),
    ("1.1\tStra\u00dfe\tSTRASSE".encode(), "identical"),  # casefold, not lower
    (b"1.1e0\tEin Vogel.\tA bird.", "kept"),
]


def test_bad_ccmatrix_lines_counted(tmp_path, ende):
    en, de, _ = ende
    good = [f"1.2\t{y}\t{x}".encode() for x, y in zip(en[:500], de[:500], strict=True)]
    lines = [b for b, _ in BAD_CCMATRIX] + good
    cfg = PairsConfig(paths=[_gz(tmp_path / "de-en.tsv.gz", lines)], min_score=1.1,
                      min_chars=3)
    rows, stats, _ = read_all(KEY, cfg, chunk_rows=7)
    want = Counter(r for _, r in BAD_CCMATRIX)
    good_kept, good_drops = reference([(x, y, 1.2) for x, y in zip(en[:500], de[:500],
                                                                     strict=True)], cfg)
    assert stats["read"] == len(lines)
    assert stats["kept"] == want.pop("kept") + len(good_kept)
    assert drops(stats) == want + good_drops
    assert rows[-len(good_kept):] == good_kept
    assert rows[0] == ("A house.", "Ein Haus.", 1.2)
    assert ("Hello there", "Hallo da", 1.1) in rows


def test_bad_tsv_and_aligned_lines_counted(tmp_path):
    tsv = _gz(tmp_path / "x.tsv.gz", [b"\xef\xbb\xbfde\ten", b"Hallo Welt\tHello world",
                                      b"drei\tFelder\thier", b"", b"nur eins",
                                      b"Hallo \xff\tHello", b"Guten Tag\tGood day"])
    rows, stats, _ = read_all(KEY, PairsConfig(paths=[tsv]))
    assert [r[:2] for r in rows] == [("Hello world", "Hallo Welt"), ("Good day", "Guten Tag")]
    assert drops(stats) == Counter(malformed=2, empty=1, invalid_utf8=1)
    stem = tmp_path / "al"
    Path(f"{stem}.en").write_bytes(b"one\ntwo \xff\nthree\nfour\n\nsix\n")
    Path(f"{stem}.de").write_bytes(b"eins\nzwei\ndrei\nvier\nfunf\nsechs\n")
    Path(f"{stem}.scores").write_bytes(b"1.1\n1.1\nx\n1.1\n1.1\n1.2")  # no final newline
    rows, stats, _ = read_all(KEY, PairsConfig(paths=[f"{stem}.*"]))
    assert rows == [("one", "eins", 1.1), ("four", "vier", 1.1), ("six", "sechs", 1.2)]
    assert drops(stats) == Counter(invalid_utf8=1, malformed=1, empty=1)


# -- aligned lengths ----------------------------------------------------------------------------


def test_aligned_files_of_different_lengths(tmp_path, ende):
    en, de, scores = ende
    stem = tmp_path / "short"
    fx.write_aligned(stem, KEY, en, de[:5000], scores)
    with pytest.raises(ValueError, match=rf"short\.en has {len(en):,} lines.*short\.de has "
                                         "5,000"):
        read_all(KEY, PairsConfig(paths=[f"{stem}.*"]), chunk_rows=1000)
    fx.write_aligned(stem, KEY, en, de, np.concatenate([scores, [1.0, 1.1, 1.2]]))
    with pytest.raises(ValueError, match=rf"short\.en has {len(en):,} lines.*short\.scores "
                                         f"has {len(en) + 3:,}"):
        read_all(KEY, PairsConfig(paths=[f"{stem}.*"]), chunk_rows=1000)


def test_zip_members_of_different_lengths(tmp_path, ende):
    en, de, scores = ende
    path = tmp_path / "de-en.txt.zip"
    fx.write_moses_zip(path, KEY, en[:3000], de[:2999], scores[:3000])
    with pytest.raises(ValueError, match=r"de-en\.txt\.zip:CCMatrix\.de-en\.en has 3,000 lines"
                                         r".*CCMatrix\.de-en\.de has 2,999"):
        read_all(KEY, PairsConfig(paths=[str(path)]), chunk_rows=500)
    fx.write_moses_zip(path, KEY, en[:3000], de[:3000], scores[:2000])
    with pytest.raises(ValueError, match=r"CCMatrix\.de-en\.scores has 2,000"):
        read_all(KEY, PairsConfig(paths=[str(path)]), chunk_rows=500)


# -- plan errors --------------------------------------------------------------------------------


def _zip(path: Path, members: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(path)


def test_plan_errors(tmp_path, files):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    with pytest.raises(ValueError, match=r"notes\.txt: cannot read it as en-de pairs"):
        plan_sources(KEY, PairsConfig(paths=[str(notes)]))
    lone = _zip(tmp_path / "de-en.txt.zip", {"README": b"x", "CCMatrix.de-en.de": b"Hallo\n",
                                             "CCMatrix.de-en.scores": b"1.1\n"})
    with pytest.raises(ValueError, match=r"de-en\.txt\.zip: no en member CCMatrix\.de-en\.en"):
        plan_sources(KEY, PairsConfig(paths=[lone]))
    empty = _zip(tmp_path / "other.zip", {"README": b"x"})
    with pytest.raises(ValueError, match=r"other\.zip: no <stem>\.en and <stem>\.de members"):
        plan_sources(KEY, PairsConfig(paths=[empty]))
    with pytest.raises(ValueError, match=r"plain/corpus\.en: aligned file.*partner "
                                         r".*corpus\.de"):
        plan_sources(KEY, PairsConfig(paths=[str(files / "plain" / "corpus.en")]))
    for order in ("en-fr", "de", "en-de-x"):
        with pytest.raises(ValueError, match=f"order = '{order}'"):
            plan_sources(KEY, PairsConfig(paths=[str(files / "de-en.tsv.xz")], order=order))
    text = _gz(tmp_path / "words.tsv.gz", [b"Hallo\tHello"])
    with pytest.raises(ValueError, match=r"words\.tsv\.gz: the first line neither names"):
        plan_sources(KEY, PairsConfig(paths=[text]))
    with pytest.raises(ValueError, match=r"words\.tsv\.gz: the header"):
        read_all(KEY, PairsConfig(paths=[text], format="tsv"))
    with pytest.raises(FileNotFoundError):
        plan_sources(KEY, PairsConfig(paths=[str(tmp_path / "missing.tsv.xz")]))


def test_corrupt_compressed_files_name_the_file(tmp_path, files):
    data = (files / "de-en.tsv.xz").read_bytes()
    cut = tmp_path / "de-en.tsv.xz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"de-en\.tsv\.xz: truncated or corrupt compressed "
                                         r"data after [\d,]+ pairs \((EOFError|LZMAError)"):
        read_all(KEY, PairsConfig(paths=[str(cut)]), chunk_rows=1000)
    data = bytearray((files / "de-en.txt.zip").read_bytes())
    with zipfile.ZipFile(files / "de-en.txt.zip") as z:
        info = z.getinfo("CCMatrix.de-en.de")
    middle = info.header_offset + 100 + info.compress_size // 2
    data[middle:middle + 64] = bytes(64)
    bad = tmp_path / "de-en.txt.zip"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"CCMatrix\.de-en\.de.*: truncated or corrupt"):
        read_all(KEY, PairsConfig(paths=[str(bad)]))


def test_config_declarations_and_problems():
    from swe.build.config import describe, field_problem

    fields = {f.name: f for f in dataclasses.fields(PairsConfig)}
    assert field_problem(fields["format"], "xml")
    assert field_problem(fields["format"], "moses") is None
    assert field_problem(fields["min_chars"], 0)
    assert field_problem(fields["max_pairs"], -1)
    assert field_problem(fields["min_score"], 1.06) is None
    keys = [row[0] for row in describe(PairsConfig, "pairs.<src-tgt>.")]
    assert "pairs.<src-tgt>.min_score" in keys and "pairs.<src-tgt>.dedup" in keys
    assert config_problems(KEY, PairsConfig(paths=["x"])) == []
    assert len(config_problems(KEY, PairsConfig(order="fr-de", min_chars=9, max_chars=5))) == 2


# -- S3 and streaming ---------------------------------------------------------------------------


def test_s3(s3, files, expected):
    prefix = f"{s3}/pair-readers"
    for p in ["de-en.txt.zip", "de-en.tsv.xz", "plain/corpus.en", "plain/corpus.de",
              "plain/corpus.scores"]:
        storage.write_bytes(f"{prefix}/{p}", (files / p).read_bytes())
    for paths, kinds in ([f"{prefix}/de-en.txt.zip"], ["moses"]), \
            ([f"{prefix}/de-en.tsv.xz"], ["ccmatrix-tsv"]), ([f"{prefix}/plain/*"], ["aligned"]):
        rows, _, sources = read_all(KEY, PairsConfig(paths=paths))
        assert [s.kind for s in sources] == kinds
        assert all(p.startswith("s3://") for s in sources for p in s.paths)
        same_rows(rows, expected[0], scored=True)


@pytest.mark.parametrize("case", ["moses-zip", "ccmatrix-xz", "aligned"])
def test_streams_in_bounded_chunks(case, files, ende):
    cfg = PairsConfig(paths=[str(files / p) for p in CASES[case][0]])
    (source,) = plan_sources(KEY, cfg)
    stats: dict[str, int] = {}
    tables = read_source(source, cfg, stats, chunk_rows=1000)
    first = next(tables)
    assert stats["read"] == 1000 and first.num_rows <= 1000  # read lazily, one chunk
    sizes = [first.num_rows] + [t.num_rows for t in tables]
    assert max(sizes) <= 1000 and len(sizes) >= len(ende[0]) // 1000
    assert stats["read"] == len(ende[0])


# -- hashing and shuffling ----------------------------------------------------------------------


def test_normalize_matches_python_on_real_text(ende):
    en, de, _ = ende
    texts = en + de + ["  Stra\u00dfe\u3000\u3000GROSS\t\n", "\u0130stanbul \ufb01le", "\u00b5m",
                       "\u1e9e \u03a3\u03c2 \u13a0", "a\u2028\u2029b\x1c\x85c"]
    assert normalize(pa.array(texts)).to_pylist() == [norm(t) for t in texts]


def test_normalize_every_code_point():
    """Arrow's lowercase + the few characters casefolded in Python = str.casefold, for every
    character (alone, and between letters)."""
    chars = [chr(c) for c in range(1, 0x110000) if not 0xD800 <= c < 0xE000]
    texts = [f"A{c}b{c}" for c in chars]
    assert normalize(pa.array(texts)).to_pylist() == [norm(t) for t in texts]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(st.characters(exclude_categories=("Cs",)), max_size=30), max_size=30))
def test_normalize_matches_python_property(texts):
    assert normalize(pa.array(texts, pa.string())).to_pylist() == [norm(t) for t in texts]


def test_pair_hash(ende):
    en, de, _ = ende
    h = pair_hash(pa.array(en), pa.array(de))
    assert h.dtype == np.uint64 and len(h) == len(en)
    assert np.array_equal(h, pair_hash(pa.chunked_array([en[:10], en[10:]]), pa.array(de)))
    # stable across processes and releases: a fixed value
    one = pair_hash(pa.array(["A man  is\tplaying."]), pa.array(["Ein Mann SPIELT. "]))
    assert one[0] == pair_hash(pa.array(["a man is playing."]), pa.array(["ein mann spielt."]))[0]
    assert int(one[0]) == 11915224102374473765  # blake2b(person=b"swe-pair"), little-endian
    assert pair_hash(pa.array(["x"]), pa.array(["y"]))[0] != \
        pair_hash(pa.array(["y"]), pa.array(["x"]))[0]
    distinct = {(norm(x), norm(y)) for x, y in zip(en, de, strict=True)}
    assert len(set(h.tolist())) == len(distinct)


def test_shuffle_key(ende):
    en, de, _ = ende
    h = pair_hash(pa.array(en), pa.array(de))
    k = shuffle_key(h, 0)
    assert k.dtype == np.int64
    assert np.array_equal(k, shuffle_key(h, 0))
    assert np.array_equal(k, shuffle_key(h.view(np.int64), 0))
    assert not np.array_equal(np.argsort(k), np.argsort(shuffle_key(h, 1)))
    perm = np.random.default_rng(3).permutation(len(h))
    assert np.array_equal(shuffle_key(h[perm], 0), k[perm])  # keyed by content, not position
    order = np.argsort(k, kind="stable")
    r = np.corrcoef(order, np.arange(len(order)))[0, 1]
    assert abs(r) < 0.03  # the shuffled order is unrelated to the file order
    top = (k > 0).mean()
    assert 0.48 < top < 0.52


# -- property: aligned files and CCMatrix TSV read like the Python reference ----------------------

_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\n\ufeff"),
                max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(_TEXT, _TEXT, st.floats(0.9, 1.4)), max_size=40),
       min_score=st.sampled_from([-math.inf, 1.1]), min_chars=st.integers(1, 4),
       max_chars=st.integers(4, 10), drop_identical=st.booleans(), chunk_rows=st.integers(1, 9))
def test_readers_match_reference_property(rows, min_score, min_chars, max_chars, drop_identical,
                                          chunk_rows):
    rows = [(x, y, float(f"{s:.7f}")) for x, y, s in rows]
    cfg = PairsConfig(min_score=min_score, min_chars=min_chars, max_chars=max_chars,
                      drop_identical=drop_identical)
    want, want_drops = reference(rows, cfg)
    with tempfile.TemporaryDirectory() as d:
        xs, ys, ss = [r[0] for r in rows], [r[1] for r in rows], np.array([r[2] for r in rows])
        fx.write_aligned(f"{d}/p", KEY, xs, ys, ss, compression=".xz")
        got, stats, _ = read_all(KEY, dataclasses.replace(cfg, paths=[f"{d}/p.*"]), chunk_rows)
        same_rows(got, want, scored=True)
        assert drops(stats) == want_drops
        tabbed = [r for r in rows if "\t" not in r[0] + r[1]]
        body = "".join(f"{s:.7f}\t{y}\t{x}\n" for x, y, s in tabbed).encode()
        Path(f"{d}/de-en.tsv.xz").write_bytes(lzma.compress(body))
        got, stats, _ = read_all(KEY, dataclasses.replace(cfg, paths=[f"{d}/de-en.tsv.xz"]),
                                 chunk_rows)
        want, want_drops = reference(tabbed, cfg)
        same_rows(got, want, scored=True)
        assert stats["read"] == len(tabbed)
