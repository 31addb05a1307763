"""Check an offline bundle (tools/offline_bundle.sh).

    python tools/check_bundle.py BUNDLE            # the manifest, then a real install and use
    python tools/check_bundle.py BUNDLE --manifest-only
    python tools/check_bundle.py --smoke           # seconds: a tiny synthetic bundle

The manifest check: every wheel is there with its size and SHA-256 and nothing else is; the total
is within the limit; swe, Ray, blingfire, s3fs and fsspec are carried and no image package is; no
wheel holds a path the bundle leaves out. The full check then makes a fresh venv with the
bundle's Python, installs the image's packages from the index (torch, transformers, ...; and the
MiniLM teacher, which travels beside the bundle), runs ``install.sh`` (no index), and in that venv
uses what swe uses of the slimmed Ray (``ray.init``, Ray Data ``map_batches`` on an actor pool, Ray
Train's ``TorchTrainer``, ``ray job submit``), then builds the quickstart and encodes with it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import offline_bundle as ob

CARRIED = ["swe", "ray", "blingfire", "s3fs", "fsspec"]
RAY_USE = r'''
import sys, tempfile
import numpy as np, ray, ray.data, ray.train
from ray.train.torch import TorchTrainer
ray.init(num_cpus=2)
class Twice:
    def __call__(self, b):
        return {"y": b["id"] * 2}
ds = ray.data.range(1000).map_batches(Twice, compute=ray.data.ActorPoolStrategy(size=2),
                                      batch_size=100, num_cpus=0.5)
assert sorted(r["y"] for r in ds.take_all()) == list(range(0, 2000, 2))
mark = tempfile.mkdtemp()
def loop(cfg):
    import pathlib, torch
    pathlib.Path(cfg["mark"], "ran").write_text(str(float(torch.ones(2).sum())))
    ray.train.report({"loss": 2.0})
res = TorchTrainer(loop, train_loop_config={"mark": mark},
                   scaling_config=ray.train.ScalingConfig(num_workers=1),
                   run_config=ray.train.RunConfig(storage_path=tempfile.mkdtemp())).fit()
assert res.error is None and open(f"{mark}/ran").read() == "2.0", res
print("ray.init, map_batches on an actor pool, TorchTrainer: ok")
'''


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tools/check_bundle.py", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("bundle", nargs="?", help="the bundle's folder")
    p.add_argument("--manifest-only", action="store_true", help="only the manifest (seconds)")
    p.add_argument("--work", help="where the venv and the builds go (default: a temp folder)")
    p.add_argument("--smoke", action="store_true", help="a tiny synthetic bundle, checked")
    return p


def check_manifest(bundle: Path, carried: list[str] = CARRIED) -> list[str]:
    """What is wrong with ``bundle`` against its MANIFEST.json (empty: nothing)."""
    m = json.loads((bundle / "MANIFEST.json").read_text())
    problems = []
    on_disk = {p.name for p in (bundle / "wheels").glob("*.whl")}
    problems += [f"{n}: in the folder, not in the manifest"
                 for n in sorted(on_disk - set(m["wheels"]))]
    for name, w in m["wheels"].items():
        path = bundle / "wheels" / name
        if not path.is_file():
            problems.append(f"{name}: in the manifest, missing")
            continue
        data = path.read_bytes()
        if len(data) != w["bytes"] or hashlib.sha256(data).hexdigest() != w["sha256"]:
            problems.append(f"{name}: its size or SHA-256 differs from the manifest")
            continue
        with zipfile.ZipFile(path) as z:
            problems += [f"{name}: holds {n}, which the bundle leaves out" for n in z.namelist()
                         if ob.dropped(n)][:3]
    total = sum(w["bytes"] for w in m["wheels"].values())
    if total > m["limit_mib"] * 2**20:
        problems.append(f"{total / 2**20:.1f} MiB of wheels: over the {m['limit_mib']} MiB limit")
    names = {ob.norm(n.split("-")[0]) for n in m["wheels"]}
    problems += [f"{n}: not carried" for n in carried if n not in names]
    image = {ob.norm(n) for n in ob.IMAGE} - ob.CARRIED_ANYWAY
    problems += [f"{n}: an image package, carried" for n in sorted(names & image)]
    if not (bundle / "install.sh").is_file():
        problems.append("install.sh: missing")
    return problems


def _run(cmd: list[str], log: Path, **kw) -> float:
    t = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT, **kw)
    return round(time.perf_counter() - t, 1)


def full_check(bundle: Path, work: Path) -> dict[str, float]:
    """Install the image's packages and the bundle into a fresh venv, then use it; seconds per
    step (raises CalledProcessError, the log in ``work/check.log``)."""
    m = json.loads((bundle / "MANIFEST.json").read_text())
    log, venv = work / "check.log", work / "venv"
    py, swe = venv / "bin/python", str(venv / "bin/swe")
    image = [*ob.image_requirements(), *ob.NOT_CARRIED]
    secs = {"venv": _run([f"python{m['python']}", "-m", "venv", str(venv)], log)}
    secs["image packages (index)"] = _run([str(py), "-m", "pip", "install", "-q", *image], log)
    secs["install.sh (no index)"] = _run([str(bundle / "install.sh"), str(py)], log)
    secs["ray checks"] = _run([str(py), "-c", RAY_USE], log, cwd=work)
    secs["ray job submit"] = _job_submit(venv, log, work)
    secs["quickstart build"] = _run([swe, "build", "--config", "quickstart", "--output",
                                     str(work / "qs")], log, cwd=work)
    sample = ob.ROOT / "swe/data/sample/en_wikipedia_60k.txt.xz"
    secs["encode"] = _run([swe, "encode", "--model", str(work / "qs/model"), "--input",
                           str(sample), "--output", str(work / "enc")], log, cwd=work)
    return secs


def _job_submit(venv: Path, log: Path, work: Path) -> float:
    """A head of its own (``ray start --block``, stopped by its process group: ``ray stop``
    would stop every Ray on the machine), and one job submitted to it."""
    ray, port = str(venv / "bin/ray"), _free_port()
    # the job's `python` is the venv's; no token to pass around; SIGTERM stops the head at once
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "RAY_AUTH_MODE": "disabled", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    t = time.perf_counter()
    with log.open("a") as f:
        # every port its own, so that no other Ray on the machine collides with it
        ports = [f"--{name}={_free_port()}" for name in (
            "port", "node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
            "dashboard-agent-grpc-port", "metrics-export-port", "runtime-env-agent-port",
            "ray-client-server-port")]
        head = subprocess.Popen([ray, "start", "--head", "--block", "--num-cpus=2", *ports,
                                 f"--dashboard-port={port}", "--dashboard-host=127.0.0.1",
                                 f"--temp-dir={tempfile.mkdtemp(prefix='rh', dir='/tmp')}"],
                                cwd=work, stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        for attempt in range(12):  # the dashboard takes a few seconds to answer
            try:
                _run([ray, "job", "submit", "--address", f"http://127.0.0.1:{port}", "--",
                      "python", "-c", "import ray; ray.init(); print(ray.cluster_resources())"],
                     log, cwd=work, env=env)
                break
            except subprocess.CalledProcessError:
                if attempt == 11:
                    raise
                time.sleep(5)
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(60)
    return round(time.perf_counter() - t, 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smoke(tmp: Path) -> list[str]:
    """A synthetic Ray wheel slimmed by ``repack`` and a manifest written for it, checked."""
    src = tmp / "src/ray-9.0.0-cp3-none-any.whl"
    src.parent.mkdir()
    with zipfile.ZipFile(src, "w") as z:
        for name in ("ray/__init__.py", "ray/jars/ray.jar", "ray/rllib/a.py",
                     "ray-9.0.0.dist-info/METADATA", "ray-9.0.0.dist-info/RECORD"):
            z.writestr(name, "x" * 100)
    bundle = tmp / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    left = ob.repack(src, bundle / "wheels" / src.name, tmp)
    data = (bundle / "wheels" / src.name).read_bytes()
    (bundle / "MANIFEST.json").write_text(json.dumps({"python": "3.11", "limit_mib": 1, "wheels": {
        src.name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}}))
    (bundle / "install.sh").write_text("")
    problems = check_manifest(bundle, carried=["ray"])
    if set(left) != {ob.DROP_PATHS["ray/jars/*"], ob.DROP_PATHS["ray/rllib/*"]}:
        problems.append(f"repack left out {left}")
    if not any(r.startswith("ray[") for r in ob.swe_requirements()):
        problems.append("swe's requirements name no ray")
    if any(ob.requirement_name(r) == "torch" for r in ob.swe_requirements()):
        problems.append("swe's requirements for the bundle name torch, an image package")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            problems = smoke(Path(tmp))
    elif not args.bundle:
        parser().error("name a bundle folder, or --smoke")
    else:
        problems = check_manifest(Path(args.bundle))
    for p in problems:
        print(f"bundle: {p}", file=sys.stderr)
    if problems or args.smoke or args.manifest_only:
        print("manifest: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
        return 1 if problems else 0
    work = Path(args.work or tempfile.mkdtemp(prefix="swe-bundle-check-"))
    work.mkdir(parents=True, exist_ok=True)
    secs = full_check(Path(args.bundle).resolve(), work)
    print(json.dumps(secs, indent=1))
    (work / "check.json").write_text(json.dumps(secs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
