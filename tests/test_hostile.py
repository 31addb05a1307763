"""A hostile user's mistakes, each one a clear one-line error or a correct result: no hang, no
traceback, nothing changed outside the output. One test per case found by probing the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from swe.build import build, load_config
from swe.model import StaticModel
from swe.resources import Request, check_grantable

ROOT = Path(__file__).resolve().parent.parent
QUICK = str(ROOT / "pipelines/configs/quickstart.toml")
NODE = {"CPU": 2.0, "memory": 8 * 2**30}


def test_a_request_no_node_can_grant_is_refused_saying_what_the_nodes_have():
    check_grantable([Request("actors", "lower x", count=4, cpus=0.5)], [NODE])
    with pytest.raises(ValueError, match=r"actors: 4 CPUs asked, but the one node has 2 CPUs, "
                                         r"8\.0 GiB: lower x"):
        check_grantable([Request("actors", "lower x", cpus=4)], [NODE])
    with pytest.raises(ValueError, match="1 GPUs asked"):
        check_grantable([Request("actors", "lower y", gpus=1)], [NODE, NODE])
    # each fits a node, but not all of them together
    with pytest.raises(ValueError, match=r"3 × 1 CPUs asked, but the one node has 2 CPUs.*holds 2"):
        check_grantable([Request("workers", "lower z", count=3, cpus=1)], [NODE])
    check_grantable([Request("workers", "lower z", count=4, cpus=1)], [NODE, NODE])


def test_waiting_for_an_autoscaler_can_be_chosen(monkeypatch):
    monkeypatch.setenv("SWE_WAIT_FOR_RESOURCES", "1")
    check_grantable([Request("actors", "lower x", cpus=64)], [NODE])


@pytest.fixture
def tiny_model(tmp_path) -> Path:
    StaticModel.from_vectors(["a", "b"], np.eye(2, 4, dtype=np.float32)).save(tmp_path / "m")
    return tmp_path / "m"


def test_encoder_actors_larger_than_any_node_are_refused_not_waited_for(
        ray_session, tmp_path, tiny_model, capsys):
    from swe.commands.encode import main as encode

    (tmp_path / "in.txt").write_text("a b\n")
    status = encode(["--model", str(tiny_model), "--input", str(tmp_path / "in.txt"),
                     "--output", str(tmp_path / "out"), "--cpus-per-actor", "64"])
    err = capsys.readouterr().err
    assert status == 2 and "encoder actors: 64 CPUs asked" in err and "--cpus-per-actor" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("setting, named", [
    ("extraction.cpus_per_actor=64", "teacher actors: (2 × )?64 CPUs asked"),
    ("extraction.gpus_per_actor=1", "teacher actors: (2 × )?0.5 CPUs, 1 GPUs asked"),
    ("refine.workers=64", "refine's Ray Train workers: 64 × 1 CPUs")])
def test_build_actors_or_workers_no_node_can_grant_stop_before_the_first_stage(
        ray_session, tmp_path, setting, named):
    cfg = load_config(QUICK, [setting, "refine.objective=distill", "refine.batch_size=128"], output=str(tmp_path / "out"))
    with pytest.raises(ValueError, match=named):
        build(cfg)
    assert not (tmp_path / "out" / "work" / "corpus").exists()

