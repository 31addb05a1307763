"""Stage logic without Ray: alignment, length batching, exact selection, mergeable PCA."""

import lzma

import numpy as np
import pyarrow as pa
import pyarrow.parquet
import pytest

from swe.build.stages import pca, selection
from swe.build.stages.extraction import align
from swe.build.teacher import Teacher, length_groups
from swe.storage import write_parquet
from swe.text import language, units


@pytest.fixture(scope="module")
def hf_tok(minilm):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(minilm))


def _align(hf_tok, text, targets, prefix=""):
    enc = hf_tok(prefix + text, return_offsets_mapping=True)
    offsets = np.asarray(enc["offset_mapping"])
    mask = np.asarray(enc["attention_mask"])
    spans = units(text, language("en"))
    idx = align(spans, targets, offsets, mask, len(prefix))
    toks = enc.tokens()
    return {k: [toks[i] for i in v] for k, v in idx.items()}


def test_align_subwords_punctuation_and_case(hf_tok):
    got = _align(hf_tok, "Tokenization, of course!", ["tokenization", "course", ","])
    assert got == {"tokenization": ["token", "##ization"], "course": ["course"]}


def test_align_first_occurrence_only(hf_tok):
    enc = hf_tok("the cat saw the dog", return_offsets_mapping=True)
    spans = units("the cat saw the dog", language("en"))
    idx = align(spans, ["the"], np.asarray(enc["offset_mapping"]),
                np.asarray(enc["attention_mask"]))
    assert idx["the"].tolist() == [1]  # [CLS] the cat saw the dog [SEP]


def test_align_contractions_by_span_overlap(hf_tok):
    # BlingFire gives do|n't, the teacher don|'|t: overlap, not nesting, decides.
    assert _align(hf_tok, "I don't know", ["n't", "do"]) == {"do": ["don"], "n't": ["don", "'",
                                                                                      "t"]}


def test_align_with_prefix(hf_tok):
    got = _align(hf_tok, "Cats sleep", ["cats"], prefix="query: ")
    assert got == {"cats": ["cats"]}


def test_length_groups_hold_one_padded_length_within_budget():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 120, 500)
    for multiple in (1, 8):
        batches = length_groups(lengths, budget=1024, multiple=multiple)
        assert sorted(np.concatenate(batches).tolist()) == list(range(500))
        for b in batches:
            padded = -(-lengths[b] // multiple) * multiple
            assert len(set(padded.tolist())) == 1
            assert len(b) == 1 or padded[0] * len(b) <= 1024


def test_teacher_states_do_not_depend_on_the_batch(minilm, data_dir):
    """The real teacher on CPU: a sentence's states are bitwise the same in any batch its
    texts' lengths put it in (what makes extraction reproducible across retries and nodes)."""
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.00.txt.xz", "rt") as fh:
        texts = [next(fh).strip() for _ in range(400)]
    teacher = Teacher(str(minilm), threads=1)

    def states(subset: list[int], budget: int) -> dict[int, np.ndarray]:
        got = {}
        for idx in teacher.batches([texts[i] for i in subset], budget):
            hidden, _, mask = teacher.hidden_states([texts[subset[j]] for j in idx])
            got.update({subset[j]: hidden[k, mask[k] > 0] for k, j in enumerate(idx)})
        return got

    whole = states(list(range(len(texts))), 8192)
    order = np.random.default_rng(1).permutation(len(texts)).tolist()
    for start in range(0, len(texts), 150):
        for i, h in states(order[start:start + 150], 2048).items():
            assert np.array_equal(h, whole[i]), texts[i]


def _brute_force(texts, ntok, sids, words, n, c):
    index = {w: i for i, w in enumerate(words)}
    cands = {i: [] for i in range(len(words))}
    for t, k, s in zip(texts, ntok, sids, strict=True):
        for w in {index[x] for x, _, _ in units(t, language("en")) if x in index}:
            if len(cands[w]) < c:
                cands[w].append((k, s))
    return {w: sorted(v)[:n] for w, v in cands.items()}


@pytest.mark.parametrize("parts", [1, 3, 11])
def test_partitioned_selection_equals_brute_force(tmp_path, data_dir, parts):
    """Passes A, Q, B, M, C over 9 shards and ``parts`` word partitions (more partitions than
    words included) give exactly the N shortest of each word's first C candidates."""
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.02.txt.xz", "rt") as f:
        texts = [next(f).strip() for _ in range(900)]
    rng = np.random.default_rng(1)
    ntok = rng.integers(5, 40, len(texts)).astype(np.int32)  # many ties on purpose
    shards, sids = [], []
    for k in range(9):
        sl = slice(k * 100, (k + 1) * 100)
        sid = (np.int64(k) << 32) + np.arange(100, dtype=np.int64)
        path = str(tmp_path / f"s{k}.parquet")
        write_parquet(path, pa.table({"sid": sid, "text": texts[sl], "ntok": ntok[sl]}))
        shards.append(path)
        sids.extend(sid.tolist())
    words = ["the", "of", "and", "in", "was", "a", "is", "for", "on", "city", "zzzz"]
    vocab = str(tmp_path / "vocab.parquet")
    write_parquet(vocab, pa.table({"word": words, "count": [1] * len(words)}))
    n, c, v, out = 5, 60, len(words), str(tmp_path / "work")
    for k, path in enumerate(shards):
        selection.pass_a(path, "en", None, vocab, k, v, parts, out)
    for p in range(parts):
        selection.pass_q(out, p, v, parts, c, list(range(9)))
    for k, path in enumerate(shards):
        selection.pass_b(path, out, k, v, parts, n)
    missing = sum(selection.pass_m(out, p, v, parts, n)["missing"] for p in range(parts))
    for k, path in enumerate(shards):
        selection.pass_c(path, out, k, str(tmp_path / f"part{k}.parquet"), "en")
    z = {name: np.concatenate([np.load(tmp_path / "work" / "pairs" / f"p{p:04d}.npz")[name]
                               for p in range(parts)]) for name in ("word_id", "sid")}
    expected = _brute_force(texts, ntok.tolist(), sids, words, n, c)
    got = {w: [] for w in range(v)}
    for w, s in zip(z["word_id"].tolist(), z["sid"].tolist(), strict=True):
        got[w].append((int(ntok[sids.index(s)]), s))
    assert got == expected and missing == 1 and got[words.index("zzzz")] == []
    # Each selected sentence is emitted once, by its own shard, with every word it serves.
    served: dict[int, list[int]] = {}
    for k in range(9):
        if (tmp_path / f"part{k}.parquet").exists():
            t = pa.parquet.read_table(tmp_path / f"part{k}.parquet").to_pylist()
            served.update({r["sid"]: r["word_ids"] for r in t})
    want: dict[int, list[int]] = {}
    for w, pairs_ in expected.items():
        for _, s in pairs_:
            want.setdefault(s, []).append(w)
    assert served == want


def test_distributed_pca_equals_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 40)) @ rng.standard_normal((40, 40)) + 3.0
    stats = pca.PCAStats.of(x[:1000]) + pca.PCAStats.of(x[1000:2500]) + pca.PCAStats.of(x[2500:])
    fitted = pca.fit(stats, dim=10, abtt=False)
    vals, vecs = np.linalg.eigh(np.cov(x, rowvar=False))
    ref = vecs[:, ::-1][:, :10]
    np.testing.assert_allclose(np.abs(fitted.components.T @ ref), np.eye(10), atol=1e-6)
    np.testing.assert_allclose(fitted.explained, vals[::-1], rtol=1e-8)
    proj = fitted.transform(x)
    np.testing.assert_allclose(np.abs(proj), np.abs((x - x.mean(0)) @ ref), rtol=1e-4,
                               atol=1e-4)


def test_abtt_drops_floor_d_over_100():
    x = np.random.default_rng(0).standard_normal((500, 250))
    fitted = pca.fit(pca.PCAStats.of(x), dim=100, abtt=True)
    assert fitted.skipped == 2 and fitted.components.shape == (250, 100)
    with pytest.raises(ValueError, match="cannot keep"):
        pca.fit(pca.PCAStats.of(x), dim=249, abtt=True)


def test_extraction_sums_are_exact_whatever_the_batching(tmp_path):
    """Batches reach the reduce in any grouping and order; the per-word sums are exact
    fixed-point integers, so the step-1 vectors are bit-identical whatever the batching (a
    rerun, a resumed build or another cluster shape gives the same model)."""
    from swe.build.shuffle import by_partition, id_partition, write_groups
    from swe.build.stages.extraction import FIXED_POINT, reduce_sums, to_fixed

    rng = np.random.default_rng(0)
    ids, vectors = rng.integers(0, 50, 1200), rng.normal(0, 3, (1200, 8))

    def reduce(order, batch, parts, name):
        stage = tmp_path / name
        for b, start in enumerate(range(0, len(order), batch)):
            rows = order[start:start + batch]
            gids, inverse = np.unique(ids[rows], return_inverse=True)
            sums = np.zeros((len(gids), 8), np.int64)
            np.add.at(sums, inverse, np.stack([to_fixed(v) for v in vectors[rows]]))
            counts = np.bincount(inverse).astype(np.int64)
            write_groups(by_partition(id_partition(gids, 50, parts), word_id=gids, sum=sums,
                                      count=counts),
                         lambda k, b=b: str(stage / "sums" / "wave00000" / f"p{k:04d}" /
                                            f"b{b:05d}.npz"))
        for k in range(parts):
            reduce_sums(str(stage), k, parts, 50, ["wave00000"])
        return {k: dict(np.load(stage / "vectors" / f"p{k:04d}.npz")) for k in range(parts)}

    a = reduce(np.arange(1200), 100, 1, "a")[0]
    b = reduce(rng.permutation(1200), 37, 1, "b")[0]
    c = reduce(rng.permutation(1200), 500, 4, "c")
    assert np.array_equal(a["word_id"], b["word_id"]) and np.array_equal(a["vector"], b["vector"])
    assert np.array_equal(np.concatenate([c[k]["vector"] for k in range(4)]), a["vector"])
    plain = np.stack([vectors[ids == w].mean(0) for w in a["word_id"]])
    np.testing.assert_allclose(a["vector"], plain, atol=1e-9)
    assert 1 / FIXED_POINT < 1e-9


def test_extraction_reads_only_the_folders_its_wave_markers_name(tmp_path):
    """A killed build's teacher actors outlive its driver for a moment and finish their batch:
    what they write lands in their own run's folder, which the resumed run neither reduces nor
    keeps (a late write into a folder both runs used is the likely cause of a different model
    that tests/test_store.py's killed-build test once got)."""
    from swe.build.markers import StageDir
    from swe.build.stages.extraction import drop_stale, wave_dir

    st = StageDir(str(tmp_path), "extraction", "h")
    for name in ("wave00000-old", "wave00000-new", "wave00001", "store-old", "store-new"):
        (tmp_path / "work/extraction/sums" / name / "p0000").mkdir(parents=True)
        (tmp_path / "work/extraction/targets" / name).mkdir(parents=True)
    st.mark_shard("wave-00000", {"sentences": 3, "dir": "wave00000-new"})
    st.mark_shard("wave-00001", {"sentences": 2})  # a marker from before runs named folders
    keep = [wave_dir(st, 0), wave_dir(st, 1), "store-new"]
    assert keep == ["wave00000-new", "wave00001", "store-new"]
    drop_stale(st, keep)
    for sub in ("sums", "targets"):
        assert sorted(p.name for p in (tmp_path / "work/extraction" / sub).iterdir()) == \
            sorted(keep)
