"""Stage logic without Ray: alignment, length batching, exact selection, mergeable PCA."""

import lzma

import numpy as np
import pyarrow as pa
import pytest

from swe.build.stages import pca, selection
from swe.build.stages.extraction import align, length_batches
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


def test_length_batches_respect_budget():
    rng = np.random.default_rng(0)
    ntok = rng.integers(3, 120, 500)
    batches = length_batches(ntok, budget=1024)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    for b in batches:
        assert len(b) == 1 or (ntok[b].max() + 2) * len(b) <= 1024


def _brute_force(texts, ntok, sids, words, n, c):
    index = {w: i for i, w in enumerate(words)}
    cands = {i: [] for i in range(len(words))}
    for t, k, s in zip(texts, ntok, sids, strict=True):
        for w in {index[x] for x, _, _ in units(t, language("en")) if x in index}:
            if len(cands[w]) < c:
                cands[w].append((k, s))
    return {w: sorted(v)[:n] for w, v in cands.items()}


def test_selection_heap_merge_equals_brute_force(tmp_path, data_dir):
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.02.txt.xz", "rt") as f:
        texts = [next(f).strip() for _ in range(900)]
    rng = np.random.default_rng(1)
    ntok = rng.integers(5, 40, len(texts)).astype(np.int32)  # many ties on purpose
    shards, sids = [], []
    for k in range(3):
        sl = slice(k * 300, (k + 1) * 300)
        sid = (np.int64(k) << 32) + np.arange(300, dtype=np.int64)
        path = str(tmp_path / f"s{k}.parquet")
        write_parquet(path, pa.table({"sid": sid, "text": texts[sl], "ntok": ntok[sl]}))
        shards.append(path)
        sids.extend(sid.tolist())
    words = ["the", "of", "and", "in", "was", "a", "is", "for", "on", "city", "zzzz"]
    n, c = 5, 60
    pairs = [p + ".pairs.npz" for p in shards]
    dfs = [selection.shard_df(p, "en", None, words, pp) for p, pp in zip(shards, pairs,
                                                                         strict=True)]
    quotas = selection.quotas(dfs, c)
    parts = [selection.shard_heaps(p, "en", None, words, q, n, pp)
             for p, q, pp in zip(shards, quotas, pairs, strict=True)]
    # Recomputing the pairs from the text gives the same heaps.
    again = selection.shard_heaps(shards[1], "en", None, words, quotas[1], n)
    assert all((a == b).all() for a, b in zip(again, parts[1], strict=True))
    wid, nt, sid = selection.merge_heaps(parts, n)
    got = {w: [] for w in range(len(words))}
    for w, k, s in zip(wid.tolist(), nt.tolist(), sid.tolist(), strict=True):
        got[w].append((k, s))
    assert got == _brute_force(texts, ntok.tolist(), sids, words, n, c)
    assert got[words.index("zzzz")] == []


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


def test_part_sums_are_the_same_in_any_order():
    """Batches reach the driver in any order; the per-part sums are exact integers, so the
    step-1 vectors are bit-identical whatever the order (a rerun gives the same model)."""
    from swe.build.stages.extraction import FIXED_POINT, PartSums, to_fixed

    rng = np.random.default_rng(0)
    vectors = rng.normal(0, 3, (30, 40, 8))
    batches = [(rng.integers(0, 50, 40), to_fixed(v), rng.integers(1, 4, 40), 7)
               for v in vectors]
    results = []
    for order in (range(30), reversed(range(30)), rng.permutation(30)):
        acc = PartSums()
        for i in order:
            acc.add(*batches[i])
        results.append(acc.result())
    for ids, sums, counts in results[1:]:
        assert np.array_equal(ids, results[0][0]) and np.array_equal(counts, results[0][2])
        assert np.array_equal(sums, results[0][1])  # bit for bit, not approximately
    ids, sums, _ = results[0]
    plain = np.zeros((50, 8))
    for (w, _, _, _), v in zip(batches, vectors, strict=True):
        np.add.at(plain, w, v)
    np.testing.assert_allclose(sums, plain[ids], atol=40 / FIXED_POINT)
