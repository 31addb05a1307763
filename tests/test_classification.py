"""Classification on frozen embeddings: the real SentEval/SST-2/AG News files parse to their
documented sizes, malformed rows give clear errors, and a logistic regression on real embeddings
learns (and does not learn from shuffled labels)."""

import numpy as np
import pytest

from swe.eval import classification as cl

SIZES = {"mr": 10662, "cr": 3775, "subj": 10000, "mpqa": 10606, "agnews": 7600}


@pytest.mark.parametrize("name", cl.TASKS)
def test_real_files_parse(data_dir, name):
    splits = cl.load_task(name, data_dir)
    if name in SIZES:
        texts, labels = splits["all"]
        assert len(texts) == len(labels) and abs(len(texts) - SIZES[name]) <= 5
    else:
        assert set(splits) == {"train", "dev", "test"}
    n_classes = {"trec": 6, "agnews": 4}.get(name, 2)
    assert all(len(np.unique(y)) == n_classes for _, y in splits.values())
    assert all(t.strip() for texts, _ in splits.values() for t in texts)


def test_trec_split_and_sst2_sizes(data_dir):
    trec = cl.load_task("trec", data_dir)
    assert len(trec["test"][0]) == 500
    assert len(trec["train"][0]) + len(trec["dev"][0]) == 5452
    sst = cl.load_task("sst2", data_dir)
    assert [len(sst[s][0]) for s in ("train", "dev", "test")] == [6920, 872, 1821]


def test_malformed_rows(tmp_path):
    (tmp_path / "eval/classification").mkdir(parents=True)
    for s in ("train", "dev", "test"):
        (tmp_path / f"eval/classification/sst2_{s}.tsv").write_text("sentence\tlabel\ngood\t1\n")
    (tmp_path / "eval/classification/sst2_dev.tsv").write_text("sentence\tlabel\nno label\n")
    with pytest.raises(ValueError, match=r"sst2_dev\.tsv:1"):
        cl.load_task("sst2", tmp_path)
    with pytest.raises(FileNotFoundError, match="rt-polarity"):
        cl.load_task("mr", tmp_path)
    with pytest.raises(ValueError, match="unknown classification task"):
        cl.load_task("imdb", tmp_path)


class _Shuffled:
    """An encoder whose rows belong to other sentences: nothing to learn."""

    def __init__(self, inner):
        self.inner = inner

    def encode(self, texts):
        x = self.inner.encode(texts)
        return x[np.random.default_rng(0).permutation(len(x))]


def test_logistic_regression_on_real_embeddings(data_dir, glove):
    split = cl.classify(glove, "sst2", data_dir)  # train/dev/test
    assert 70 < split["acc"] < 85 and split["C"] in cl.C_GRID  # GloVe-50d mean: ~76
    cv = cl.classify(glove, "cr", data_dir, folds=3)
    assert cv["folds"] == 3 and 65 < cv["acc"] < 85  # CR: majority class 64
    noise = cl.classify(_Shuffled(glove), "cr", data_dir, folds=3)
    assert noise["acc"] < 66  # no better than the majority class
