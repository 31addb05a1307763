import numpy as np
import pytest

from swe import StaticModel
from swe.eval.gem import EPS, GEMEncoder, coarse_embedding, window_residuals

WORDS = [f"w{i}" for i in range(100)] + ["."]


def _model(dim=16, seed=0, rotate=None, scale=1.0):
    vecs = scale * np.random.default_rng(seed).standard_normal((len(WORDS), dim))
    if rotate is not None:
        vecs = vecs @ rotate
    return StaticModel.from_vectors(WORDS, vecs)


def _texts(n=24, seed=1, vocab=12):
    rng = np.random.default_rng(seed)
    # lengths 1..20 exercise clipped windows; 12 words so windows repeat words (rank deficiency)
    return [" ".join(f"w{j}" for j in rng.integers(0, vocab, rng.integers(1, 21)))
            for _ in range(n)]


# -- a loop-by-loop port of the authors' code/encoder.py (columns are words) ----------------------


def _gs(a):
    r = np.zeros((a.shape[1], a.shape[1]))
    q = np.zeros(a.shape)
    a = a.copy()
    for k in range(a.shape[1]):
        r[k, k] = np.linalg.norm(a[:, k])
        if r[k, k] < EPS:
            r[k, k] = 0
            continue
        q[:, k] = a[:, k] / r[k, k]
        for j in range(k + 1, a.shape[1]):
            r[k, j] = q[:, k] @ a[:, j]
            a[:, j] -= r[k, j] * q[:, k]
    return q, r


def _ngram(m, c0, sgv_c, win):
    n = m.shape[1]
    wgt = np.zeros(n)
    for i in range(n):
        ctx = list(range(max(i - win, 0), i)) + list(range(i + 1, min(i + win, n - 1) + 1))
        msvd = np.concatenate([m[:, ctx], m[:, i:i + 1]], axis=1)
        u, sgv, _ = np.linalg.svd(msvd, full_matrices=False)
        q, r = _gs(msvd)
        w_sum = np.linalg.norm((q[:, -1] @ u) * sgv) / u.shape[1]
        kk = sgv_c * (q[:, -1] @ c0)
        wgt[i] = (np.exp(r[-1, -1] / np.linalg.norm(m[:, i])) + w_sum
                  + np.exp(-np.linalg.norm(kk) / c0.shape[1]))
    return wgt


def _reference(model, texts, corpus, window, components, top):
    mats = [model.vectors[ids].T.astype(np.float64) for ids in model.word_ids(corpus)]
    s_univ = np.stack([coarse_embedding(m.T) for m in mats], axis=1)
    u, s, _ = np.linalg.svd(s_univ, full_matrices=False)
    c_all, soc = u[:, :components], s[:components]
    out = []
    for ids in model.word_ids(texts):
        m = model.vectors[ids].T.astype(np.float64)
        sel = np.linalg.norm((m.T @ c_all) * soc, axis=0).argsort()[-top:]
        c1 = c_all[:, sel]
        v = (m - c1 @ (c1.T @ m)) @ _ngram(m, c1, soc[sel], window)
        out.append(v / np.linalg.norm(v))
    return np.array(out)


@pytest.mark.parametrize(("window", "components", "top", "n", "dim", "scale"),
                         [(7, 6, 3, 24, 16, 1.0), (2, 45, 5, 8, 16, 1.0), (0, 4, 4, 24, 16, 1.0),
                          (7, 45, 17, 40, 64, 1.0), (7, 6, 3, 24, 16, 0.1)])
def test_matches_the_reference_code(window, components, top, n, dim, scale):
    # 8 texts give only 8 corpus directions; 40 texts in dim 64 give 40 of the 45 asked for
    # (from a vocabulary that spans all 64 dimensions, so removing 17 leaves something)
    # scale 0.1: small vectors, so uniqueness is not ~exp(-large) = 0 and matters too
    model, texts = _model(dim, scale=scale), _texts(n, vocab=12 if dim == 16 else 100)
    got = GEMEncoder(model, window=window, components=components, top=top).encode(texts)
    want = _reference(model, texts, texts, window, components, top)
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_fit_reuses_the_corpus_directions():
    model, corpus = _model(), _texts()
    enc = GEMEncoder(model, components=6, top=3).fit(corpus)
    got = enc.encode(corpus[:5])
    np.testing.assert_allclose(got, _reference(model, corpus[:5], corpus, 7, 6, 3), atol=2e-5)
    assert not np.allclose(got, GEMEncoder(model, components=6, top=3).encode(corpus[:5]),
                           atol=1e-3)  # unfitted: directions from the 5 texts themselves
    np.testing.assert_allclose(GEMEncoder(model).fit(corpus).encode(corpus),
                               GEMEncoder(model).encode(corpus), atol=1e-6)


def test_shape_normalisation_and_empty_texts():
    enc = GEMEncoder(_model(), components=6, top=3)
    texts = ["w1 w2 w3", "", None, ". .", "unknown words", "w4"]
    got = enc.encode(texts)
    assert got.shape == (6, 16) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), [1, 0, 0, 0, 0, 1], atol=1e-6)
    assert enc.encode([]).shape == (0, 16)
    assert not np.any(GEMEncoder(_model()).encode(["", "nothing here"]))


def test_repeated_word_equals_the_single_word():
    enc = GEMEncoder(_model(), components=6, top=3).fit(_texts())
    one, many = enc.encode(["w5", "w5 w5 w5 w5 w5 w5 w5 w5 w5 w5"])
    np.testing.assert_allclose(one, many, atol=1e-6)
    # a single word is its vector minus the selected corpus directions, normalised
    v = enc.model.vectors[enc.model.words.index("w5")].astype(np.float64)
    score = np.abs(v @ enc.basis) * enc.sigma
    c = enc.basis[:, np.argsort(score)[-3:]]
    want = v - c @ (c.T @ v)
    np.testing.assert_allclose(one, want / np.linalg.norm(want), atol=1e-6)


def test_corpus_order_does_not_matter():
    model, corpus = _model(), _texts()
    a = GEMEncoder(model, components=6, top=3).fit(corpus).encode(corpus[:6])
    b = GEMEncoder(model, components=6, top=3).fit(corpus[::-1]).encode(corpus[:6])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_rotating_the_word_space_rotates_the_embeddings():
    q, _ = np.linalg.qr(np.random.default_rng(7).standard_normal((16, 16)))
    texts = _texts()
    a = GEMEncoder(_model(), components=6, top=3).encode(texts)
    b = GEMEncoder(_model(rotate=q), components=6, top=3).encode(texts)
    np.testing.assert_allclose(a @ q, b, atol=1e-5)


def test_word_order_matters_beyond_the_window():
    enc = GEMEncoder(_model(), window=1, components=6, top=3).fit(_texts())
    a, b = enc.encode(["w1 w1 w2 w3", "w1 w2 w1 w3"])
    assert not np.allclose(a, b, atol=1e-4)


def test_novelty_and_significance_against_numpy_qr_and_svd():
    rng = np.random.default_rng(3)
    ctx = rng.standard_normal((4, 10))
    word = 0.5 * ctx[1] - ctx[3] + 0.3 * rng.standard_normal(10)
    win = np.vstack([ctx, word])  # rows: context, then the word
    r = window_residuals(win[None])[0]
    _, rr = np.linalg.qr(win.T)
    assert np.linalg.norm(r) == pytest.approx(abs(rr[-1, -1]), rel=1e-10)
    np.testing.assert_allclose(ctx @ r, 0, atol=1e-12)  # orthogonal to the context
    u, s, _ = np.linalg.svd(win.T, full_matrices=False)
    q = r / np.linalg.norm(r)
    assert np.linalg.norm((q @ u) * s) / 5 == pytest.approx(np.linalg.norm(r) / 5, rel=1e-10)


def test_hand_computed_weights():
    # dim 3: a=(1,0,0), b=(1,1,0); one direction (0,0,1) that neither word touches
    model = StaticModel.from_vectors(["a", "b"], np.array([[1.0, 0, 0], [1, 1, 0]]))
    enc = GEMEncoder(model, window=7, components=1, top=1)
    enc.basis, enc.sigma = np.array([[0.0], [0.0], [1.0]]), np.array([2.0])
    vecs = model.vectors.astype(np.float64)
    lengths = np.array([2])
    got = enc.word_weights(vecs, lengths, enc.basis, enc.sigma, np.ones((1, 1)),
                           np.zeros(2, np.int64))
    # a's residual against b is (1,0,0) - (1/2)(1,1,0) = (1/2,-1/2,0): ρ = 1/√2, ‖a‖ = 1
    # b's residual against a is (0,1,0): ρ = 1, ‖b‖ = √2; windows have l = 2 columns
    want = [np.exp(2**-0.5) + 2**-0.5 / 2 + 1, np.exp(2**-0.5) + 1 / 2 + 1]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # the embedding is the weighted sum (the direction (0,0,1) has nothing to remove)
    v = want[0] * vecs[0] + want[1] * vecs[1]
    np.testing.assert_allclose(enc.encode(["a b"])[0], v / np.linalg.norm(v), atol=1e-6)


def test_duplicate_context_columns_are_dropped():
    rng = np.random.default_rng(5)
    a, b, w = rng.standard_normal((3, 8))
    win = np.stack([a, a, np.zeros(8), b, 2 * a, w])[None]
    proj = np.stack([a, b]).T
    want = w - proj @ np.linalg.lstsq(proj, w, rcond=None)[0]
    np.testing.assert_allclose(window_residuals(win)[0], want, atol=1e-12)
    assert np.linalg.norm(window_residuals(np.stack([a, w, w])[None])[0]) < EPS


def test_bad_hyperparameters():
    with pytest.raises(ValueError, match="top"):
        GEMEncoder(_model(), top=0)
    with pytest.raises(ValueError, match="window"):
        GEMEncoder(_model(), window=-1)
