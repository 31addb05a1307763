"""Step 3 on real Ray Train with the real MiniLM teacher: distillation lowers the validation
loss, a killed Train worker or driver resumes from its checkpoint (bilingual builds from
translation pairs: tests/test_pairs_build.py)."""

import json
import logging
import lzma
import os
import shutil
import signal
import threading
import time

import numpy as np
import pytest
from procs import own_ray_pids

from swe import StaticModel, storage
from swe.build import build, load_config

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]

SMALL = ["vocab.size=150", "vocab.min_count=3", "vocab.partitions=3", "selection.n=6",
         "selection.candidates=40", "pca.sample=200", "pca.dim=64", "corpus.en.max_lines=2400",
         "corpus.en.shard_lines=1200", "extraction.batch_size=128",
         "extraction.job_sentences=1000", "refine.batch_size=32", "refine.eval_every=5",
         "refine.checkpoint_every=5", "refine.cpus_per_worker=0.5", "extraction.actors=1"]
# The prepared build (kill tests) distils on every selected sentence with the prefix OOV rule;
# test_distillation_lowers_validation_loss covers the drawn sentences and the paper's rule.
SELECTED = ["refine.sentences='selected'", "oov='prefix'", "refine.dev_max=50"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, data_dir):
    with lzma.open(data_dir / "corpora/en_wikipedia/enwiki_sents.02.txt.xz", "rt") as f:
        lines = [next(f) for _ in range(2400)]
    path = tmp_path_factory.mktemp("refine-corpus") / "en.txt"
    path.write_text("".join(lines))
    return path


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, corpus):
    """The small distill build up to train_data, made once; tests copy it and train."""
    out = tmp_path_factory.mktemp("refine-prepared") / "build"
    return out, build(_cfg(out, corpus, SELECTED), until="train_data")


def _cfg(output, corpus, extra=()):
    return load_config("pipelines/configs/quickstart.toml",
                       [*SMALL, f"corpus.en.paths=['{corpus}']", "refine.objective='distill'",
                        *extra], output=str(output))


def _history(output) -> dict:
    return json.loads(storage.read_text(f"{output}/refinement/history.json"))


def test_distillation_lowers_validation_loss(s3, corpus):
    out = f"{s3}/builds/refine-distill"  # checkpoints and the model on object storage
    extra = ["refine.max_steps=20", "refine.patience=100", "refine.lr=0.005"]
    report = build(_cfg(out, corpus, extra))
    data, r = report["train_data"], report["refine"]
    assert data.train_rows > 200 and 0 < data.dev_rows <= 150
    assert r.steps == 20 and r.resumed_at == []
    assert r.best_dev_loss < r.initial_dev_loss - 0.01
    h = _history(out)
    assert [e["step"] for e in h["history"]] == list(range(5, 21, 5))
    assert storage.read_bytes(f"{out}/refinement/loss.png")[:4] == b"\x89PNG"
    assert storage.find(f"{out}/work/refine/runs")  # Ray Train's checkpoints went to S3
    step2, step3 = StaticModel.load(f"{out}/step2"), StaticModel.load(f"{out}/step3")
    final = StaticModel.load(f"{out}/model")
    assert step3.words == step2.words and np.array_equal(final.vectors, step3.vectors)
    assert not np.allclose(step3.vectors, step2.vectors)
    conf = json.loads(storage.read_text(f"{out}/step3/config.json"))
    assert conf["provenance"]["step"] == "step3"
    # A rerun finds every stage done and changes nothing.
    assert build(_cfg(out, corpus, extra))["refine"] == r


def test_selected_sentences_are_labelled_by_the_extraction_pass(prepared, minilm):
    """``refine.sentences = 'selected'``: every selected sentence, with the embedding the
    extraction pass pooled, equal to the teacher's own; the OOV rule reaches the models."""
    import pyarrow.dataset as pds

    from swe.build.teacher import Teacher
    from swe.build.teacher.runtime import load_model_bytes, prepare

    out, report = prepared
    n = report["selection"].unique_sentences
    data = report["train_data"]
    assert data.dev_rows == 50 and data.train_rows + data.dev_rows == n
    rows = pds.dataset(out / "work/train_data/train", format="parquet").to_table().to_pylist()
    assert len({r["src"] for r in rows}) == len(rows) == n - 50
    sample = rows[:: max(1, len(rows) // 40)]
    int8 = load_model_bytes(prepare(str(minilm), "onnx-int8"))  # the quickstart's runtime
    want = Teacher(str(minilm), threads=1, onnx=int8).embed([r["src"] for r in sample])
    np.testing.assert_allclose([r["teacher"] for r in sample], want, atol=2e-5)
    for step in ("step1", "step2", "model"):
        assert StaticModel.load(out / step).oov == "prefix"


def _snapshot_names_a_checkpoint(runs, skip=frozenset()) -> bool:
    """Whether a run's Ray Train snapshot names a checkpoint (runs named in ``skip`` aside): it
    is written in place, not renamed into place, so its file exists before its contents do."""
    for snapshot in runs.glob("*/checkpoint_manager_snapshot.json"):
        if snapshot.parent.name in skip:
            continue
        try:
            if json.loads(snapshot.read_text()).get("checkpoint_results"):
                return True
        except (OSError, ValueError):
            continue
    return False


def _kill_train_worker_after_checkpoint(runs, skip, killed: list[int]) -> None:
    """SIGKILL this session's Ray Train worker once a run not in ``skip`` has a checkpoint."""
    deadline = time.time() + 300
    while time.time() < deadline:
        workers = own_ray_pids(b"ray::RayTrainWorker")
        if _snapshot_names_a_checkpoint(runs, skip) and workers:
            for pid in workers:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            return
        time.sleep(0.1)


def test_a_killed_driver_and_a_killed_train_worker_resume_and_a_changed_config_clears_old_runs(
        tmp_path, corpus, caplog, prepared):
    """Issue 14, one refine folder throughout (each Ray Train run costs tens of seconds):

    1. SIGKILL the driver (joined to the session's Ray, as under ``ray job submit``: Ray ends its
       job, Train controller and workers) once refine has a checkpoint; the rerun (in this
       process) resumes from it, no step repeated.
    2. That run's marker gone, a rerun with another refine config (the hybrid loss and the
       linear schedule on): the earlier run's checkpoints are removed and the log says so.
       Its Train worker is killed after its first checkpoint: the run resumes from it, and the
       projection and its Adam moments are checkpointed and restored with the words."""
    import subprocess
    import sys
    from pathlib import Path

    from procs import joined_env, kill_session
    from safetensors import safe_open

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "refine-kill"
    runs = out / "work/refine/runs"
    shutil.copytree(prepared[0], out)  # the driver is killed inside refine
    base = [*SMALL, *SELECTED, f"corpus.en.paths=['{corpus}']", "refine.objective='distill'",
            "refine.max_steps=25", "refine.patience=1000"]
    env = joined_env()

    def driver(extra, log_name):
        args = [sys.executable, "pipelines/build.py", "--config",
                "pipelines/configs/quickstart.toml", "--output", str(out)]
        for item in [*base, *extra]:
            args += ["--set", item]
        log = tmp_path / log_name
        return subprocess.Popen(args, cwd=root, env=env, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True), log

    def kill_after_checkpoint(extra, log_name):
        """Run, and kill driver and Ray once the run has a checkpoint."""
        proc, log = driver(extra, log_name)
        try:
            deadline = time.time() + 400
            # the controller's snapshot is written once a checkpoint is registered
            while not _snapshot_names_a_checkpoint(runs):
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.time() < deadline, "no refine checkpoint appeared"
                time.sleep(0.1)
        finally:
            kill_session(proc.pid)
        assert not (out / "work/refine/_DONE.json").exists()
        return {p.name for p in runs.glob("refine-*")}

    first_runs = kill_after_checkpoint([], "run1.log")
    # The rerun, in this process on the session's Ray (no second local Ray to start): the same
    # config as the killed driver's.
    build(_cfg(out, corpus, [*SELECTED, "refine.max_steps=25", "refine.patience=1000"]))
    h = _history(out)
    assert len(h["resumed_at"]) == 1 and h["resumed_at"][0] > 0
    steps = [e["step"] for e in h["history"]]
    assert steps == list(range(5, 26, 5))  # continued from the checkpoint: no step repeated

    (out / "work/refine/_DONE.json").unlink()
    killed: list[int] = []
    killer = threading.Thread(target=_kill_train_worker_after_checkpoint,
                              args=(runs, first_runs, killed))
    killer.start()
    with caplog.at_level(logging.WARNING, logger="swe.build"):
        report = build(_cfg(out, corpus, [
            *SELECTED, "refine.max_steps=25", "refine.patience=1000", "refine.max_failures=2",
            "refine.teacher_weight=1.0", "refine.lr_schedule='linear'"]))
    killer.join()
    left = {p.name for p in runs.glob("refine-*")}
    assert len(left) == 1 and not left & first_runs
    assert any("removing the checkpoints of an earlier refine run" in r.getMessage()
               for r in caplog.records)
    assert len(killed) == 1, "the Train worker was not found and killed mid-run"
    r = report["refine"]
    assert r.steps == 25 and len(r.resumed_at) == 1 and 0 < r.resumed_at[0] < 25
    steps = [e["step"] for e in _history(out)["history"]]
    assert steps == list(range(5, 26, 5))  # continued from the checkpoint: no step repeated
    last = sorted(runs.glob("*/checkpoint_*/state.safetensors"))[-1]
    with safe_open(str(last), "pt") as f:
        assert {"proj", "proj.exp_avg", "proj.exp_avg_sq"} <= set(f.keys())
        assert tuple(f.get_tensor("proj").shape) == (64, 384)  # pca.dim -> MiniLM's dimension


def test_refine_hash_names_the_optimizer_and_keeps_the_dense_runs_hash(tmp_path):
    """Builds refined before ``refine.optimizer`` keep their hash under 'dense' (the default);
    'sparse' trains differently and so hashes differently."""
    from swe.build.stages import refine

    def cfg(*extra):
        return load_config("pipelines/configs/quickstart.toml",
                           ["refine.objective='distill'", *extra], output=str(tmp_path),
                           check_paths=False)

    dense, sparse = cfg(), cfg("refine.optimizer='sparse'")
    assert dense.refine.optimizer == "dense"
    r = dense.refine
    before = (r.batch_size, r.lr, r.clip, r.tau, r.max_steps, r.eval_every, r.patience,
              r.workers, r.shuffle_buffer)  # the fields hashed before the option existed
    assert refine.hash_fields(dense, "minilm") == before
    assert refine.hash_fields(sparse, "minilm") == (*before, ("optimizer", "sparse"))


def test_reruns_never_remove_a_users_file_from_work_and_check_a_reused_split(tmp_path, corpus,
                                                                             prepared):
    """Hostile round 17: a rerun after a kill removed, judged by name only, a user's files in an
    earlier refine run's folder (and a user folder named ``refine-*``), in extraction's
    ``sums/`` and in train_data's splits. Each is now judged by content and refused, named,
    and kept. And a ``refine.batch_size`` above the rows of a reused train_data is one line,
    not a traceback from Ray Train."""
    out = tmp_path / "b"
    shutil.copytree(prepared[0], out)
    rows = prepared[1]["train_data"].train_rows
    with pytest.raises(ValueError, match=rf"only {rows} training rows \(work/train_data, done\) "
                                         "for refine.batch_size = 5000"):
        build(_cfg(out, corpus, [*SELECTED, "refine.batch_size=5000"]))

    mine = out / "work/refine/runs/refine-abc/mine.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine")
    with pytest.raises(FileExistsError, match=r"refine-abc holds 1 file.*mine\.txt"):
        build(_cfg(out, corpus, SELECTED))
    assert mine.read_text() == "mine"
    shutil.rmtree(mine.parent)

    work = out / "work"
    for marker in ("extraction/_DONE.json", "extraction/_shards/assemble.json",
                   "train_data/_DONE.json"):  # the state a kill leaves
        (work / marker).unlink()
    for reduce in (work / "extraction/_shards").glob("reduce-*.json"):
        reduce.unlink()
    users = [work / "extraction/sums/mine.txt", work / "train_data/train/mine.txt"]
    for path in users:
        path.write_text("mine")
    with pytest.raises(FileExistsError, match=r"sums holds 1 file\(s\) swe did not write "
                                              r"\(mine\.txt\)"):
        build(_cfg(out, corpus, SELECTED), until="extraction")
    assert users[0].read_text() == "mine"
    users[0].unlink()
    with pytest.raises(FileExistsError, match=r"train holds 1 file.*mine\.txt"):
        build(_cfg(out, corpus, SELECTED), until="train_data")
    assert users[1].read_text() == "mine"
    users[1].unlink()
    assert build(_cfg(out, corpus, SELECTED), until="train_data")["train_data"].train_rows == rows
