"""Evaluation metrics against hand-computed cases, blocked top-k against brute force, tasks on
the real data."""

import numpy as np
import pytest

import swe.eval as ev

pytestmark = pytest.mark.slow


def test_spearman_with_ties_by_hand():
    # x ranks: 1, 2.5, 2.5, 4; y ranks: 1, 2, 3, 4 -> Pearson of ranks
    x, y = [1.0, 2.0, 2.0, 3.0], [10.0, 20.0, 30.0, 40.0]
    rx, ry = np.array([1, 2.5, 2.5, 4]), np.array([1, 2, 3, 4.0])
    rx, ry = rx - rx.mean(), ry - ry.mean()
    expected = (rx * ry).sum() / np.sqrt((rx**2).sum() * (ry**2).sum())
    assert ev.spearman(x, y) == pytest.approx(expected)
    assert expected == pytest.approx(4.5 / np.sqrt(4.5 * 5))
    assert ev.spearman([3, 2, 1], [1, 2, 3]) == pytest.approx(-1)
    with pytest.raises(ValueError, match="undefined: the first sequence is constant"):
        ev.spearman([1, 1, 1], [1, 2, 3])  # no number: a correlation with a constant is undefined
    with pytest.raises(ValueError, match="NaN"):
        ev.spearman([1, float("nan"), 3], [1, 2, 3])


def test_macro_f1_by_hand():
    gold = [0, 1, 2, 3]
    pred = [0, 1, 1, 3]
    # class 0: f1 1; class 1: tp1 fp1 -> 2/3; class 2: tp0 fn1 -> 0; class 3: 1
    assert ev.macro_f1(gold, pred) == pytest.approx((1 + 2 / 3 + 0 + 1) / 4)


@pytest.mark.parametrize("k,block", [(1, 7), (5, 16), (3, 1000)])
def test_blocked_top_k_equals_brute_force(k, block):
    rng = np.random.default_rng(0)
    q, keys = rng.normal(size=(53, 8)), rng.normal(size=(71, 8))
    s, i = ev.top_k(q, keys, k, block=block)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    kn = keys / np.linalg.norm(keys, axis=1, keepdims=True)
    sims = qn @ kn.T
    brute = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    assert (i == brute).all()
    assert np.allclose(s, np.take_along_axis(sims, brute, 1), atol=1e-5)


def test_read_sts_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        ev.read_sts(tmp_path / "missing.tsv")
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence1\tsentence2\nA\tB\n")
    with pytest.raises(ValueError, match="score"):
        ev.read_sts(bad)
    bad.write_text("sentence1\tsentence2\tscore\nA\tB\tfive\nC\tD\t1\n")
    with pytest.raises(ValueError, match=r"bad\.tsv:2"):
        ev.read_sts(bad)
    ok = tmp_path / "ok.csv"
    ok.write_text('sentence1,sentence2,score\n"A, b",B,1\nC,D,2.5\n')
    a, b, s = ev.read_sts(ok)
    assert b == ["B", "D"]
    assert a == ["A, b", "C"] and list(s) == [1.0, 2.5]


def test_stsb_and_tatoeba_on_real_data(data_dir, glove):
    dev = ev.sts(glove, data_dir / "eval/sts/stsb/dev.tsv")
    assert 45 < dev < 65  # GloVe-50d mean: ~54 on STS-B dev
    r = ev.tatoeba(glove, "deu", data_dir / "eval/tatoeba_v1")
    assert set(r) == {"acc", "acc_deu_eng", "acc_eng_deu", "f1"}
    assert 0 <= r["f1"] <= 100 and r["acc"] < 60  # an English-only model is poor at German


def test_pair_retrieval_on_held_out_pairs(data_dir, glove, tmp_path):
    """``pairs:PATH``: English pairs retrieve each other far better than English-German ones."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    from swe.eval.tasks import resolve

    with gzip.open(data_dir / "parallel/en-de/ntrex128.tsv.gz", "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:301]
    en, de = [r[0] for r in rows], [r[1] for r in rows]
    (tmp_path / "dev").mkdir()
    pq.write_table(pa.table({"src": de, "tgt": en}), tmp_path / "dev" / "part-0.parquet")
    pq.write_table(pa.table({"src": en, "tgt": en}), tmp_path / "same.parquet")
    kind, arg = resolve(f"pairs:{tmp_path / 'dev'}")
    cross = kind.run(glove, arg, data_dir, 0)
    same = ev.pair_retrieval(glove, tmp_path / "same.parquet")
    assert same["acc"] > 95 and cross["pairs"] == 300 and cross["acc"] < 60
    assert cross["acc"] == (cross["acc_src_tgt"] + cross["acc_tgt_src"]) / 2
    # A many-language dev set (train_data's 'pair' column) repeats each English sentence once
    # per language: rows are searched within their pair, and the pairs' accuracies averaged.
    pq.write_table(pa.table({"src": de + en, "tgt": en + en,
                             "pair": ["en-de"] * 300 + ["en-en"] * 300}), tmp_path / "two.parquet")
    two = ev.pair_retrieval(glove, tmp_path / "two.parquet")
    assert two["language_pairs"] == 2 and two["pairs"] == 600
    assert two["acc"] == pytest.approx((cross["acc"] + same["acc"]) / 2)
    pq.write_table(pa.table({"a": en}), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="'src' and 'tgt'"):
        ev.pair_retrieval(glove, tmp_path / "bad.parquet")


def test_evaluate_cli_end_to_end(data_dir, tmp_path):
    """The command a user runs: STS (file and dir), mining, classification, speed; JSON and
    Markdown reports; clear errors before any work."""
    import json
    import shutil

    from swe.commands import evaluate as cli

    sts = tmp_path / "sts"
    sts.mkdir()
    shutil.copy(data_dir / "eval/sts/stsb/dev.tsv", sts / "a.tsv")
    shutil.copy(data_dir / "eval/sts/stsb/test.tsv", sts / "b.tsv")
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    rc = cli.main(["--model", "glove-50d", "--tasks", "stsb-dev", f"sts:{sts}", "bucc-deu", "trec",
                   "--distractors", "400", "--speed", "300", "--threads", "1", "--data",
                   str(data_dir), "--json", str(out), "--markdown", str(md)])
    assert rc == 0
    r = json.loads(out.read_text())
    res = r["results"]["glove-50d"]
    assert res[f"sts:{sts}"]["a"] == pytest.approx(res["stsb-dev"]["spearman"])
    assert res[f"sts:{sts}"]["spearman"] == pytest.approx(
        (res[f"sts:{sts}"]["a"] + res[f"sts:{sts}"]["b"]) / 2)
    assert res["bucc-deu"]["distractors_y"] == 400 and 0 <= res["bucc-deu"]["f1"] <= 100
    assert 40 < res["trec"]["acc"] < 95
    assert r["speed"]["glove-50d"]["sentences_per_s"] > 0
    table = md.read_text().splitlines()
    assert table[0].startswith("| model | stsb-dev |") and "sent/s" in table[0]
    assert table[2].startswith("| glove-50d | ")
    assert cli.main(["--model", "glove-50d", "--tasks", "nosuchtask"]) == 2
    assert cli.main(["--model", str(tmp_path / "missing"), "--data", str(data_dir)]) == 2


def test_sts_fits_a_copy_of_a_fittable_encoder(tmp_path):
    """GEM-like encoders are fitted on both STS columns, on a copy: no state leaks into the
    next task."""

    class Fittable:
        fitted = None

        def fit(self, texts):
            self.fitted = list(texts)
            return self

        def encode(self, texts):
            assert self.fitted == ["a b", "c", "a", "e"]
            return np.array([[len(t), 1.0] for t in texts])

    f = tmp_path / "s.tsv"
    f.write_text("sentence1\tsentence2\tscore\na b\ta\t1\nc\te\t2\n")
    enc = Fittable()
    assert ev.sts(enc, f) == pytest.approx(100.0)  # cos 0.89 then 1.0, as the scores rise
    assert enc.fitted is None
