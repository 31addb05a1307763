"""Bitext mining: margin scoring and the threshold sweep by hand, the one-to-one mining against a
brute-force full-matrix version, and a BUCC-style run on real Tatoeba data."""

import numpy as np
import pytest

from swe.eval import mining

pytestmark = pytest.mark.slow


def test_margin_candidates_by_hand():
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    y = np.array([[1.0, 0.0], [0.6, 0.8]])
    # cos: x0·y = [1, .6], x1·y = [0, .8]; k=2 neighbourhood means: x [.8, .4], y [.5, .7]
    # margin(x0, y0) = 1 / ((.8 + .5) / 2); margin(x1, y1) = .8 / ((.4 + .7) / 2)
    got = mining.margin_candidates(x, y, k=2)
    assert [(i, j) for i, j, _ in got] == [(0, 0), (1, 1)]
    assert got[0][2] == pytest.approx(1 / 0.65, rel=1e-5)
    assert got[1][2] == pytest.approx(0.8 / 0.55, rel=1e-5)


def _brute(x, y, k):
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    yn = y / np.linalg.norm(y, axis=1, keepdims=True)
    sim = xn @ yn.T
    mx = np.sort(sim, 1)[:, -k:].mean(1)
    my = np.sort(sim, 0)[-k:, :].mean(0)
    margin = sim / ((mx[:, None] + my[None, :]) / 2)
    # candidates among each side's k nearest neighbours by cosine, best margin first
    nx = np.argsort(-sim, 1)[:, :k]
    ny = np.argsort(-sim, 0)[:k, :]
    cands = [(i, int(nx[i][np.argmax(margin[i, nx[i]])])) for i in range(len(x))]
    cands += [(int(ny[:, j][np.argmax(margin[ny[:, j], j])]), j) for j in range(len(y))]
    cands = sorted({(i, j, float(margin[i, j])) for i, j in cands}, key=lambda c: (-c[2], c[0]))
    used_x, used_y, out = set(), set(), []
    for i, j, _ in cands:
        if i not in used_x and j not in used_y:
            used_x.add(i), used_y.add(j), out.append((i, j))
    return out


@pytest.mark.parametrize("k,block", [(1, 5), (4, 16), (4, 4096)])
def test_margin_candidates_equal_brute_force(k, block):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(40, 6)), rng.normal(size=(55, 6))
    got = mining.margin_candidates(x, y, k=k, block=block)
    assert [(i, j) for i, j, _ in got] == _brute(x, y, k)


def test_threshold_and_f1_by_hand():
    cands = [(0, 0, 0.9), (1, 2, 0.8), (2, 2, 0.7), (3, 3, 0.6)]
    gold = {(0, 0), (2, 2), (3, 3)}
    # keeping the top n: F1 = 2·tp / (n + |gold|) = 2/4, 2/5, 4/6, 6/7 -> best at 0.6
    t, f = mining.best_threshold(cands, gold)
    assert t == 0.6 and f == pytest.approx(100 * 6 / 7)
    r = mining.f1_at(cands, gold, 0.7)  # predicts 3, 2 right: P = R = 2/3
    assert r["precision"] == pytest.approx(200 / 3) and r["f1"] == pytest.approx(200 / 3)
    assert mining.f1_at(cands, gold, 2.0)["f1"] == 0.0
    # ties: one threshold keeps every candidate with that score
    t, f = mining.best_threshold([(0, 0, 0.5), (1, 9, 0.5)], {(0, 0)})
    assert t == 0.5 and f == pytest.approx(100 * 2 / 3)


class _Memo:
    """An encoder's vector of each text, computed once: the second task below reuses the first's
    sentences (the teacher's vectors do not depend on the batch: tests/test_stages.py)."""

    def __init__(self, encoder) -> None:
        self.encoder, self.rows = encoder, {}

    def encode(self, texts: list[str]) -> np.ndarray:
        new = list(dict.fromkeys(t for t in texts if t not in self.rows))
        if new:
            self.rows.update(zip(new, self.encoder.encode(new), strict=True))
        return np.stack([self.rows[t] for t in texts])


def test_bucc_recovers_hidden_pairs_on_real_data(data_dir, minilm):
    """English Tatoeba sentences paired with themselves lowercased, hidden among Wikipedia
    distractors: the (uncased) teacher must find them; pairs with a wrong English sentence must
    not be found. (GloVe means score only ~69 F1 here: random Wikipedia distractor pairs such as
    two "There are at least 20 described species in …" outscore the gold margins.)"""
    from swe.eval.encoders import TeacherEncoder
    from swe.eval.retrieval import read_tatoeba

    # One torch thread: beside the other xdist worker, a second one spin-waited for a core
    # (66 CPU-s and 176 s against 21 CPU-s and 44 s with one, docs/limits.md).
    teacher = _Memo(TeacherEncoder(str(minilm), threads=1))

    _, en = read_tatoeba("deu", data_dir / "eval/tatoeba_v1")
    en = en[:300]
    dist = mining.read_distractors(data_dir / mining.DISTRACTOR_CORPORA["eng"], 2000, set(en),
                                   (10, 80), scan=50_000)
    assert len(dist) == 2000 and not set(dist) & set(en)
    assert all(10 <= len(s) <= 80 for s in dist)
    same = mining.bucc(teacher, [(s, s.lower()) for s in en], dist[:1000], dist[1000:])
    assert same["f1"] > 85 and same["gold"] == 150 and same["sentences_x"] == 650
    shuffled = mining.bucc(teacher, list(zip(en, en[1:] + en[:1], strict=True)), dist[:1000],
                           dist[1000:])
    assert shuffled["f1"] < 10


def test_bucc_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="distractor corpus"):
        mining.read_distractors(tmp_path / "nope.txt", 10, set(), (1, 10))
    with pytest.raises(ValueError, match="at least 4"):
        mining.bucc(None, [("a", "b")], [], [])
    with pytest.raises(ValueError, match="no distractor corpus"):
        mining.bucc_tatoeba(None, "xxx", tmp_path)
