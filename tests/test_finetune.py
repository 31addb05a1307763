"""``swe finetune`` on real Ray Train with a real model (GloVe 6B 50-d, 20k words, with the MiniLM
OOV rule) and real labelled data (SST-2 and TREC from the shared data): the head in numpy
agrees with training, a killed Train worker resumes to the same bytes, ``swe encode --predict``
writes one row per input row, and bad input is one line before any work."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from procs import own_ray_pids
from test_bulk import small_glove

from swe import StaticClassifier, StaticModel
from swe.eval.classification import load_task
from swe.finetune import finetune

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]
OPTIONS = {"epochs": 3, "eval_every": 20, "patience": 2}


@pytest.fixture(scope="module")
def files(glove, data_dir, tmp_path_factory):
    """The model; SST-2 train (first 2,000) and dev as Parquet; TREC (multi-label: coarse and
    fine class) as JSONL."""
    root = tmp_path_factory.mktemp("finetune")
    small_glove(glove).save(root / "glove")
    sst = load_task("sst2", data_dir)
    for split, n in (("train", 2000), ("dev", None)):
        texts, y = sst[split]
        pq.write_table(pa.table({"sentence": texts[:n], "y": [int(v) for v in y[:n]]}),
                       root / f"sst2-{split}.parquet")
    raw = (data_dir / "eval/senteval_transfer/TREC/train_5500.label").read_bytes()
    with open(root / "trec.jsonl", "w") as f:
        for line in raw.decode("latin-1").splitlines()[:1500]:
            label, _, text = line.partition(" ")
            f.write(json.dumps({"text": text, "label": [label.split(":")[0], label]}) + "\n")
    return root


@pytest.fixture(scope="module")
def sst2(files, tmp_path_factory):
    out = tmp_path_factory.mktemp("ft-out") / "sst2"
    report = finetune(str(files / "glove"), str(files / "sst2-train.parquet"), str(out),
                      dev=str(files / "sst2-dev.parquet"), text_column="sentence",
                      label_column="y", **OPTIONS)
    return report, out


def test_the_numpy_head_agrees_with_training_and_the_table_moved(files, sst2):
    report, out = sst2
    clf = StaticClassifier.load(out)
    assert clf.labels == ["0", "1"] and not clf.multi_label and report.resumed_at == []
    dev = pq.read_table(files / "sst2-dev.parquet").to_pylist()
    texts, truth = [r["sentence"] for r in dev], [str(r["y"]) for r in dev]
    proba = clf.predict_proba(texts)
    np.testing.assert_allclose(proba.sum(axis=1), 1, atol=1e-5)
    assert clf.predict(texts) == [clf.labels[j] for j in proba.argmax(axis=1)]
    acc = 100 * np.mean([p == t for p, t in zip(clf.predict(texts), truth, strict=True)])
    assert abs(acc - report.best_dev_acc) < 0.2  # numpy's head is the trained one
    # The table moved (only rows SST-2 touches) and the folder is a plain model too.
    before, after = StaticModel.load(files / "glove"), StaticModel.load(out)
    moved = np.flatnonzero(np.abs(after.vectors - before.vectors).max(axis=1) > 0)
    assert 0 < len(moved) < len(before)
    assert not (out / "work").exists()
    # (Accuracy against a frozen table and a logistic regression: benchmarks/bench_finetune.py.)


def test_a_killed_train_worker_resumes_to_the_same_bytes(files, sst2, tmp_path):
    out, killed = tmp_path / "killed", []

    def kill_after_first_checkpoint():
        deadline = time.time() + 300
        while time.time() < deadline:
            workers = own_ray_pids(b"ray::RayTrainWorker")
            # the controller's snapshot is written once a checkpoint is registered
            if list((out / "work/runs").glob("*/checkpoint_manager_snapshot.json")) and workers:
                for pid in workers:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_after_first_checkpoint)
    killer.start()
    report = finetune(str(files / "glove"), str(files / "sst2-train.parquet"), str(out),
                      dev=str(files / "sst2-dev.parquet"), text_column="sentence",
                      label_column="y", **OPTIONS)
    killer.join()
    assert killed and len(report.resumed_at) == 1 and report.resumed_at[0] > 0
    for name in ("head.safetensors", "model.safetensors"):
        assert (out / name).read_bytes() == (sst2[1] / name).read_bytes(), name


def test_multi_label_jsonl_and_encode_predict(files, sst2, tmp_path, caplog, monkeypatch):
    """Also (hostile round 18): a file someone writes into ``work/`` while the run trains is
    kept at the end, with a warning; the run's own ``work/`` is removed otherwise (above).
    And (round 20): a rerun over the finished classifier and its run's leftover ``work/`` (what
    a kill between the classifier's last write and ``work/``'s removal leaves) trains nothing,
    reports the finished run and removes ``work/``; it said "name a new folder"."""
    from swe.bulk import EncodeOptions, encode_files, read_output

    notes = tmp_path / "trec" / "work" / "notes.txt"

    def write_notes_once_training():
        deadline = time.time() + 300
        while not (tmp_path / "trec" / "work" / "runs").is_dir() and time.time() < deadline:
            time.sleep(0.05)
        notes.write_text("mine")

    writer = threading.Thread(target=write_notes_once_training)
    writer.start()
    def run():
        return finetune(str(files / "glove"), str(files / "trec.jsonl"), str(tmp_path / "trec"),
                        head="mlp", hidden=32, epochs=2)

    with caplog.at_level(logging.WARNING, logger="swe.finetune.job"):
        report = run()
    writer.join()
    assert notes.read_text() == "mine" and "the run did not write (work/notes.txt)" in caplog.text
    classifier = (tmp_path / "trec" / "classifier.json").read_bytes()
    with monkeypatch.context() as m:
        m.setattr("swe.finetune.job._train", None)  # a rerun that trained would fail
        for _ in range(2):  # work/ kept for notes.txt, then removed once notes.txt is gone
            again = run()
            assert again == dataclasses.replace(report, seconds=again.seconds)
            assert notes.parent.exists() == notes.exists()
            notes.unlink(missing_ok=True)
    assert (tmp_path / "trec" / "classifier.json").read_bytes() == classifier
    assert not notes.parent.exists()
    clf = StaticClassifier.load(tmp_path / "trec")
    assert clf.multi_label and report.multi_label and len(clf.layers) == 2
    got = clf.predict(["How far is it from Denver to Aspen ?", "Who wrote Hamlet ?"])
    assert all(isinstance(labels, list) for labels in got)
    # Bulk: one row per input row (empty and null texts included), label and scores.
    texts = [*pq.read_table(files / "sst2-dev.parquet").column("sentence").to_pylist(), "", None]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": texts}), src)
    opts = EncodeOptions(predict=True, part_rows=300)
    summary = encode_files(str(sst2[1]), [str(src)], str(tmp_path / "scored"), options=opts)
    rows = read_output(str(tmp_path / "scored")).to_table().to_pylist()
    assert summary.rows == len(rows) == len(texts)
    rows.sort(key=lambda r: r["row"])
    want = StaticClassifier.load(sst2[1])
    assert [r["label"] for r in rows] == want.predict(texts)
    np.testing.assert_allclose([r["scores"] for r in rows], want.predict_proba(texts), atol=1e-6)
    with pytest.raises(FileNotFoundError, match="is not a classifier"):
        encode_files(str(files / "glove"), [str(src)], str(tmp_path / "no"), options=opts)


@pytest.mark.parametrize("args, words", [
    (["--label-column", "nope"], "has no column 'nope' (--label-column)"),
    (["--data", "ONECLASS"], "needs at least two classes"),
    (["--data", "EMPTY"], "rows have an empty or missing text"),
    (["--data", "FLOATS"], "a label must be a string or an integer"),
    (["--epochs", "0"], "--epochs must be a positive integer"),
    (["--lr", "nan"], "--lr must be a finite number"),
    (["--head", "cnn"], "--head must be one of"),
    (["--output", "/"], "filesystem root"),
    (["--output", "."], "current directory"),
    (["--output", ".."], "above the current directory"),
    (["--output", "HOME"], "home directory"),
    (["--output", "DATA"], "overlaps the input"),
    (["--output", "MODEL"], "overlaps the input"),
])
def test_bad_input_is_one_line_before_any_work(files, tmp_path, monkeypatch, capsys, args,
                                                words):
    from swe.cli import main

    monkeypatch.chdir(tmp_path)
    bad = {"ONECLASS": {"text": ["a good film", "a bad film"], "label": ["x", "x"]},
           "EMPTY": {"text": ["a good film", "  "], "label": ["x", "y"]},
           "FLOATS": {"text": ["a good film", "a bad film"], "label": [0.5, 1.5]}}
    names = {"HOME": os.path.expanduser("~"), "DATA": str(files / "trec.jsonl"),
             "MODEL": str(files / "glove")}
    for name, table in bad.items():
        pq.write_table(pa.table(table), tmp_path / f"{name}.parquet")
        names[name] = str(tmp_path / f"{name}.parquet")
    args = [names.get(a, a) for a in args]
    base = {"--model": str(files / "glove"), "--data": str(files / "trec.jsonl"),
            "--output": str(tmp_path / "new")}
    for flag in list(base):
        if flag in args:
            base.pop(flag)
    argv = ["finetune", *[x for kv in base.items() for x in kv], *args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and words in err[0], err
    assert not (tmp_path / "new").exists() and Path(files / "glove/config.json").exists()
