"""The Ray Train worker's pieces without Ray: the hybrid loss, its projection's start, the
learning-rate schedule, the checkpoint round trip, and the sparse optimiser against the dense one
(one worker, and two workers over gloo); the whole loop on real Ray Train, killed and resumed
with these options on: tests/test_refine.py."""

import contextlib
import socket
import time

import pytest
import torch
import torch.nn.functional as F

from swe.build.stages.refine import RefineConfig
from swe.build.training.losses import contrastive_loss, distillation_loss, kd_loss
from swe.build.training.trainer import (
    RowAdam,
    TrainJob,
    batch_loss,
    fit_projection,
    lr_factor,
    restore_state,
    save_state,
    train_step,
)


def _batch(rows: list[list[int]], teacher: torch.Tensor) -> dict:
    ids = torch.tensor([i for r in rows for i in r])
    offsets = torch.tensor([0, *torch.tensor([len(r) for r in rows]).cumsum(0)[:-1].tolist()])
    return {"src": (ids, offsets), "teacher": teacher, "rows": len(rows)}


ROWS = [[0, 1], [2], [1, 3, 4], [4, 0], [3]]


def test_hybrid_loss_adds_the_weighted_cosine_distance_and_trains_the_projection():
    g = torch.Generator().manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(5, 4, generator=g))
    proj = torch.nn.Parameter(torch.randn(4, 6, generator=g))
    teacher = torch.randn(5, 6, generator=g)
    batch = _batch(ROWS, teacher)
    src = torch.stack([weight[r].mean(0) for r in ROWS])
    relational = distillation_loss(src, teacher, 0.05)
    cos = (1 - F.cosine_similarity(src @ proj, teacher, dim=-1)).mean()
    assert torch.allclose(batch_loss("distill", weight, batch, 0.05), relational)
    hybrid = batch_loss("distill", weight, batch, 0.05, proj=proj, teacher_weight=0.7)
    assert torch.allclose(hybrid, relational + 0.7 * cos)
    hybrid.backward()
    assert proj.grad.abs().sum() > 0 and weight.grad.abs().sum() > 0


def test_contrastive_with_kd_weight_adds_the_weighted_kd_loss():
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(5, 4, generator=g)
    teacher = torch.randn(4, 6, generator=g)
    tgt_rows = [[4], [3, 2], [0], [1, 2], [0, 4]]
    batch = _batch(ROWS[:4], teacher)
    batch["tgt"] = _batch(tgt_rows[:4], teacher)["src"]
    src = torch.stack([weight[r].mean(0) for r in ROWS[:4]])
    tgt = torch.stack([weight[r].mean(0) for r in tgt_rows[:4]])
    plain = contrastive_loss(src, tgt, 0.05)
    assert torch.allclose(batch_loss("contrastive", weight, batch, 0.05), plain)
    assert torch.allclose(batch_loss("contrastive", weight, batch, 0.05, kd_weight=0.5),
                          plain + 0.5 * kd_loss(src, tgt, teacher, 0.05))


def test_projection_starts_at_the_least_squares_fit():
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(5, 4, generator=g)
    true = torch.randn(4, 6, generator=g)
    rows = ROWS * 2 + [[0], [1], [2, 3]]
    src = torch.stack([weight[r].mean(0) for r in rows])
    dev = [_batch(rows[:6], src[:6] @ true), _batch(rows[6:], src[6:] @ true)]
    torch.testing.assert_close(fit_projection(weight, dev), true, atol=1e-4, rtol=1e-4)


def test_linear_schedule_decays_to_zero_at_max_steps():
    def job(**refine) -> TrainJob:
        return TrainJob(RefineConfig(max_steps=100, **refine), "", 0, 0)

    linear = job(lr_schedule="linear")
    assert [lr_factor(linear, s) for s in (0, 50, 99, 100)] == pytest.approx([1, .5, .01, 0])
    assert lr_factor(job(lr_schedule="constant"), 99) == 1.0
    assert lr_factor(job(), 99) == 1.0  # the default (and configs from before the option)


class _Checkpoint:
    def __init__(self, path):
        self.path = path

    @contextlib.contextmanager
    def as_directory(self):
        yield self.path


def test_checkpoint_restores_the_projection_and_both_params_adam_moments(tmp_path):
    g = torch.Generator().manual_seed(2)
    params = {"weight": torch.nn.Parameter(torch.randn(5, 4, generator=g)),
              "proj": torch.nn.Parameter(torch.randn(4, 6, generator=g))}
    opt = torch.optim.Adam(list(params.values()), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        batch_loss("distill", params["weight"], _batch(ROWS, torch.randn(5, 6, generator=g)), 0.05,
              proj=params["proj"], teacher_weight=1.0).backward()
        opt.step()
    best = params["weight"].detach() * 2
    save_state(str(tmp_path), params, best, opt, {"step": 3, "resumed_at": []})

    fresh = {k: torch.nn.Parameter(torch.zeros_like(p)) for k, p in params.items()}
    fresh_opt = torch.optim.Adam(list(fresh.values()), lr=0.1)
    got_best, state = restore_state(_Checkpoint(str(tmp_path)), fresh, fresh_opt,
                                    torch.device("cpu"))
    assert state["resumed_at"] == [3] and state["adam_step"] == 3
    torch.testing.assert_close(got_best, best)
    for k, p in params.items():
        torch.testing.assert_close(fresh[k].detach(), p.detach())
        for m in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(fresh_opt.state[fresh[k]][m], opt.state[p][m])


# -- refine.optimizer: sparse (lazy Adam on the touched rows) against dense Adam ----------------

V, D, T = 7, 4, 6  # words, their dimension, the teacher's


def _every_row_batch(step: int, pairs: bool = False) -> dict:
    """4 sentences that, together, hold every one of the V words (and a tgt side that does)."""
    g = torch.Generator().manual_seed(100 + step)
    perm = torch.randperm(V, generator=g).tolist()
    batch = _batch([perm[:3], perm[3:5], perm[5:], [perm[0], perm[6]]],
                   torch.randn(4, T, generator=g))
    if pairs:
        perm = torch.randperm(V, generator=g).tolist()
        batch["tgt"] = _batch([perm[:2], perm[2:], perm[1:3], [perm[4]]], batch["teacher"])["src"]
    return batch


def _config(optimizer: str, objective: str = "distill", world: int = 1, **extra) -> TrainJob:
    refine = RefineConfig(objective=objective, tau=0.05, clip=0.5, lr=0.05, max_steps=10,
                          optimizer=optimizer, **extra)
    return TrainJob(refine, "", 0, 0, world=world)


def _trained(optimizer: str, batches: list[dict], proj: bool = False, **extra) -> tuple:
    g = torch.Generator().manual_seed(7)
    params = {"weight": torch.nn.Parameter(torch.randn(V, D, generator=g))}
    if proj:
        params["proj"] = torch.nn.Parameter(torch.randn(D, T, generator=g))
    adam = RowAdam if optimizer == "sparse" else torch.optim.Adam
    opt = adam(list(params.values()), lr=0.05)
    config = _config(optimizer, **extra)
    for step, batch in enumerate(batches):
        train_step(config, params, opt, batch, 0, step)
    return params, opt


@pytest.mark.parametrize("objective, extra", [
    ("distill", {"teacher_weight": 0.7, "lr_schedule": "linear"}),  # with the projection
    ("contrastive", {"kd_weight": 0.5}),
])
def test_sparse_and_dense_adam_agree_when_every_row_is_touched_at_every_step(objective, extra):
    batches = [_every_row_batch(s, pairs=objective == "contrastive") for s in range(6)]
    proj = "teacher_weight" in extra
    dense, dense_opt = _trained("dense", batches, proj, objective=objective, **extra)
    sparse, sparse_opt = _trained("sparse", batches, proj, objective=objective, **extra)
    assert not torch.allclose(dense["weight"], _trained("dense", [], proj)[0]["weight"])
    for name, p in dense.items():
        torch.testing.assert_close(sparse[name].detach(), p.detach())
        for m in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(sparse_opt.state[sparse[name]][m], dense_opt.state[p][m])
        assert float(sparse_opt.state[sparse[name]]["step"]) == 6


def test_sparse_leaves_untouched_rows_and_their_moments_alone():
    """Row 6 is never in a batch and row 5 only in the first: with sparse Adam neither moves
    after its last batch; dense Adam moves row 5 on by its momentum."""
    g = torch.Generator().manual_seed(4)
    first = _batch([[0, 1], [5, 2], [3]], torch.randn(3, T, generator=g))
    later = [_batch([[0, 1], [2, 3], [4]], torch.randn(3, T, generator=g)) for _ in range(3)]
    start = _trained("sparse", [])[0]["weight"].detach().clone()
    after_first = _trained("sparse", [first])[0]["weight"].detach().clone()
    sparse, opt = _trained("sparse", [first, *later])
    dense, _ = _trained("dense", [first, *later])
    w = sparse["weight"].detach()
    assert torch.equal(w[6], start[6]) and not opt.state[sparse["weight"]]["exp_avg"][6].any()
    assert torch.equal(w[5], after_first[5]) and not torch.equal(w[5], start[5])
    assert not torch.allclose(dense["weight"].detach()[5], after_first[5])
    assert torch.equal(dense["weight"].detach()[6], start[6])  # no gradient ever: both keep it
    assert not torch.allclose(w[:5], start[:5])  # the touched rows trained


def test_sparse_optimizer_checkpoint_resumes_the_same_run(tmp_path):
    """The moments of the lazy optimiser (per row, V x d) and its step count round-trip through
    the checkpoint: training on from the restored state equals training on without the stop."""
    batches = [_every_row_batch(s) for s in range(3)] + \
        [_batch([[0, 1], [2]], torch.randn(2, T)) for _ in range(2)]
    params, opt = _trained("sparse", batches[:3], proj=True, teacher_weight=1.0)
    save_state(str(tmp_path), params, params["weight"].detach().clone(), opt,
                {"step": 3, "resumed_at": []})
    fresh = {k: torch.nn.Parameter(torch.zeros_like(p)) for k, p in params.items()}
    fresh_opt = RowAdam(list(fresh.values()), lr=0.05)
    _, state = restore_state(_Checkpoint(str(tmp_path)), fresh, fresh_opt, torch.device("cpu"))
    assert state["adam_step"] == 3
    config = _config("sparse", teacher_weight=1.0)
    for step, batch in enumerate(batches[3:], start=3):
        for p, o in ((params, opt), (fresh, fresh_opt)):
            train_step(config, p, o, batch, 0, step)
    for k, p in params.items():
        torch.testing.assert_close(fresh[k].detach(), p.detach())
        for m in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(fresh_opt.state[fresh[k]][m], opt.state[p][m])


def _two_workers(rank: int, port: int, out: str) -> None:
    """One of 2 gloo workers: each takes half of every global batch (as the Train workers do)
    and trains with both optimisers; rank r saves its matrices."""
    import torch.distributed as dist

    torch.set_num_threads(1)  # 2 processes on a small machine: no thread oversubscription
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    try:
        result = {}
        for name, batches in (("all", [_every_row_batch(s, pairs=True) for s in range(4)]),
                              ("some", [_some_rows_batch(s) for s in range(4)])):
            for optimizer in ("sparse", "dense"):
                g = torch.Generator().manual_seed(7)
                params = {"weight": torch.nn.Parameter(torch.randn(V, D, generator=g))}
                opt = (RowAdam if optimizer == "sparse" else torch.optim.Adam)(
                    list(params.values()), lr=0.05)
                config = _config(optimizer, "contrastive", world=2)
                for step, batch in enumerate(batches):
                    train_step(config, params, opt, _half(batch, rank), rank, step)
                result[f"{name}-{optimizer}"] = params["weight"].detach().clone()
        torch.save(result, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _some_rows_batch(step: int) -> dict:
    """Pairs over rows 0-4 only (rows 5 and 6 are never touched)."""
    g = torch.Generator().manual_seed(200 + step)
    rows = [torch.randperm(5, generator=g)[:2].tolist() for _ in range(8)]
    batch = _batch(rows[:4], torch.zeros(4, T))
    batch["tgt"] = _batch(rows[4:], torch.zeros(4, T))["src"]
    return batch


def _half(batch: dict, rank: int) -> dict:
    """Rank ``rank``'s 2 of the batch's 4 rows."""
    out = {"rows": 2, "teacher": batch["teacher"][2 * rank:2 * rank + 2]}
    for side in ("src", "tgt"):
        ids, offsets = batch[side]
        ends = [*offsets.tolist()[1:], len(ids)]
        lo, hi = offsets[2 * rank], ends[2 * rank + 1]
        out[side] = (ids[lo:hi], offsets[2 * rank:2 * rank + 2] - lo)
    return out


def test_two_workers_exchange_the_touched_rows_and_agree_with_one_worker_and_dense(tmp_path):
    """2 gloo processes, each with half of every batch: sparse and dense give the same matrix
    when every row is touched, the same as one worker on the whole batch; with rows left
    untouched, sparse keeps them; both workers hold the same matrix (bytes per step:
    benchmarks/bench_refine_sparse.py)."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_two_workers, args=(port, str(tmp_path)), nprocs=2)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    for key in r0:
        assert torch.equal(r0[key], r1[key]), key  # the replicas stay identical
    one, _ = _trained("sparse", [_every_row_batch(s, pairs=True) for s in range(4)],
                      objective="contrastive")
    torch.testing.assert_close(r0["all-sparse"], r0["all-dense"])
    torch.testing.assert_close(r0["all-sparse"], one["weight"].detach())
    start = _trained("sparse", [])[0]["weight"].detach()
    assert torch.equal(r0["some-sparse"][5:], start[5:])
    # rows 5 and 6 have no gradient and no moments under dense Adam either: the rest agree
    torch.testing.assert_close(r0["some-sparse"], r0["some-dense"])


def test_refinement_prints_its_step_losses_and_eta_at_least_every_30_seconds(capsys):
    from swe.build.training.progress import PROGRESS_SECONDS, progress

    assert PROGRESS_SECONDS <= 30
    state = {"step": 400, "history": [{"dev_loss": 1.25}], "best_loss": 1.2, "best_step": 300}
    clock = {"at": time.monotonic() - 40, "step": 0}
    progress(1000, state, [2.0, 3.0], 1, dict(clock))  # not rank 0: silent
    progress(1000, state, [2.0, 3.0], 0, {"at": time.monotonic(), "step": 0})  # too soon
    assert capsys.readouterr().out == ""
    progress(1000, state, [2.0, 3.0], 0, clock)
    line = capsys.readouterr().out
    assert line.startswith("[refine] step 400/1,000, 10.0 steps/s, ETA 1 min at most; train "
                           "loss 2.5000, dev loss 1.2500 (best 1.2000 at step 300)"), line
    assert clock["step"] == 400


def test_a_workers_progress_line_reaches_the_drivers_log(ray_session, caplog):
    import logging

    import ray

    from swe.build.training.progress import progress, relay

    @ray.remote(num_cpus=0)
    def worker(queue) -> None:
        state = {"step": 7, "history": [], "initial_dev_loss": 2.0, "best_loss": None}
        progress(10, state, [1.5], 0, {"at": time.monotonic() - 1, "step": 0}, queue, every=0)

    with caplog.at_level(logging.INFO, logger="swe.build"), relay() as queue:
        ray.get(worker.remote(queue))
        deadline = time.monotonic() + 20
        while "[refine] step 7/10" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.2)
    assert "[refine] step 7/10" in caplog.text and "dev loss 2.0000" in caplog.text


def test_one_cpu_worker_trains_without_torch_distributed():
    """Several workers or a GPU: TorchTrainer (its process group, each worker's device); one CPU
    worker: the framework-free trainer, whose controller never imports torch."""
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    from swe.build.training import trainer_class

    assert trainer_class(ScalingConfig(num_workers=2)) is TorchTrainer
    assert trainer_class(ScalingConfig(num_workers=1, use_gpu=True)) is TorchTrainer
    one = trainer_class(ScalingConfig(num_workers=1))
    assert one is not TorchTrainer and not issubclass(one, TorchTrainer)
