"""One prepared GPU build, in two uploads of at most 64 MiB each (docs/teacher.md, "GPU").

    python tools/gpu_check.py assets ASSETS        # here, on CPU: the second upload (~46 MiB)
    python tools/gpu_check.py install BUNDLE       # on the GPU node, first upload: .gpu/venv
    python tools/gpu_check.py run ASSETS REPORT    # on the GPU node, second upload: REPORT.json

``assets`` writes the MiniLM teacher as float16 safetensors (45 MB instead of 91), STS-B dev, and
``reference.json``: the CPU int8 build of the same config (``CONFIG`` below, on this machine's
CPUs), its stage times and STS-B dev. ``install`` makes ``.gpu/venv`` (git-ignored, so it stays
between two uploads) over the image's own packages and installs an offline bundle into it
(tools/offline_bundle.sh). ``run`` builds the same config with extraction on four Ray GPU
actors (``gpus_per_actor = 0.25``, the torch runtime) and refinement on one GPU Ray Train worker,
encodes the shipped sample with ``swe encode``, and writes per stage the time, sentences/s and the
GPU utilisation sampled every second by ``nvidia-smi``, and STS-B dev against the reference.
``tools/gpu_check.sh`` runs install and run in turn, as the two uploads do.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".gpu/venv"
TEACHER_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
                 "config_sentence_transformers.json", "1_Pooling/config.json"]
# The quickstart, refined (distillation on the selected sentences) so that Ray Train runs too.
CONFIG = ["--config", "quickstart", "--set", 'refine.objective="distill"',
          "--set", 'refine.sentences="selected"', "--set", "refine.max_steps=600",
          "--set", "refine.eval_every=100"]
GPU = ["--set", 'extraction.runtime="torch"', "--set", "extraction.gpus_per_actor=0.25",
       "--set", "extraction.actors=4", "--set", "refine.gpus_per_worker=1"]
STAGES = ["corpus", "sentences", "vocab", "selection", "extraction", "pca", "train_data", "refine"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tools/gpu_check.py", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("assets", help="write the second upload").add_argument("assets")
    sub.add_parser("install", help="install a bundle into .gpu/venv").add_argument("bundle")
    run = sub.add_parser("run", help="the GPU build, the encode, the report")
    run.add_argument("assets")
    run.add_argument("report")
    run.add_argument("--rehearse", action="store_true",
                     help="on a machine without a GPU: the same steps, the teacher on the CPU")
    return p


def _sh(cmd: list[str], **kw) -> float:
    t = time.perf_counter()
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)
    return round(time.perf_counter() - t, 1)


def _copy_teacher_files(src: Path, out: Path) -> None:
    for name in TEACHER_FILES:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / name, out / name)


def teacher_fp32(fp16_dir: Path, out: Path) -> Path:
    """The float16 teacher back in float32 (every runtime loads it as usual)."""
    from safetensors.numpy import load_file, save_file

    _copy_teacher_files(fp16_dir, out)
    tensors = load_file(fp16_dir / "model.safetensors")
    save_file({k: v.astype("float32") if v.dtype == "float16" else v
               for k, v in tensors.items()}, out / "model.safetensors")
    return out


def stage_times(output: Path) -> dict[str, dict]:
    """Per stage: its seconds, end time (the marker's mtime) and sentence count if it has one."""
    out = {}
    for stage in STAGES:
        marker = output / "work" / stage / "_DONE.json"
        if marker.is_file():
            stats = json.loads(marker.read_text())["stats"]
            out[stage] = {"seconds": stats["seconds"], "end": marker.stat().st_mtime,
                          **{k: stats[k] for k in ("sentences",) if k in stats}}
    return out


def stsb_dev(swe: str, model: Path, data: Path, tmp: Path) -> float:
    _sh([swe, "evaluate", "--model", str(model), "--tasks", "stsb-dev", "--data", str(data),
         "--json", str(tmp / "stsb.json")])
    results = json.loads((tmp / "stsb.json").read_text())["results"]
    return float(next(iter(results.values()))["stsb-dev"]["spearman"])


def assets(out: Path) -> None:
    """The second upload: the float16 teacher, STS-B dev, and the CPU int8 reference."""
    from safetensors.numpy import load_file, save_file

    from swe.build.teacher import minilm_dir

    src, teacher = minilm_dir(), out / "teacher"
    _copy_teacher_files(src, teacher)
    save_file({k: v.astype("float16") for k, v in load_file(src / "model.safetensors").items()},
              teacher / "model.safetensors")
    stsb = out / "data/eval/sts/stsb"
    stsb.mkdir(parents=True, exist_ok=True)
    from swe.eval.data import data_root

    shutil.copy(Path(data_root()) / "eval/sts/stsb/dev.tsv", stsb / "dev.tsv")
    work = out.parent / f"{out.name}-cpu"
    t32 = teacher_fp32(teacher, work / "teacher")
    swe = str(Path(sys.executable).parent / "swe")
    secs = _sh([swe, "build", *CONFIG, "--set", f'teacher="{t32}"', "--output",
                str(work / "build")])
    ref = {"machine": "CPU, extraction.runtime onnx-int8", "build_seconds": secs,
           "stages": stage_times(work / "build"),
           "stsb_dev": stsb_dev(swe, work / "build/model", out / "data", work)}
    (out / "reference.json").write_text(json.dumps(ref, indent=1))
    print(json.dumps(ref, indent=1))


def install(bundle: Path) -> None:
    """``.gpu/venv`` over the image's packages, with the bundle installed into it."""
    if not (VENV / "bin/python").exists():
        _sh([sys.executable, "-m", "venv", "--system-site-packages", str(VENV)])
    _sh([str(bundle / "install.sh"), str(VENV / "bin/python")])


def _gpu_sampler(path: Path) -> subprocess.Popen | None:
    if not shutil.which("nvidia-smi"):
        return None
    return subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,utilization.gpu,memory.used",
                             "--format=csv,noheader,nounits", "-lms", "1000"],
                            stdout=path.open("w"), stderr=subprocess.DEVNULL)


def _utilisation(csv: Path, start: float, end: float) -> float | None:
    from datetime import datetime

    vals = []
    for line in (csv.read_text() if csv.exists() else "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        except (ValueError, IndexError):
            continue
        if start <= t <= end:
            vals.append(float(parts[1]))
    return round(sum(vals) / len(vals), 1) if vals else None


def run(assets_dir: Path, report: Path, rehearse: bool = False) -> None:
    """The GPU build of ``CONFIG``, the sample encoded, and the report beside the reference
    (``rehearse``: without the GPU settings, to try every other step on a CPU machine)."""
    swe, work = str(VENV / "bin/swe"), ROOT / ".gpu/work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t32 = teacher_fp32(assets_dir / "teacher", work / "teacher")
    sampler = _gpu_sampler(work / "gpu.csv")
    try:
        build = _sh([swe, "build", *CONFIG, *([] if rehearse else GPU), "--set",
                     f'teacher="{t32}"', "--output", str(work / "build")])
        t0 = time.time()
        sample = ROOT / "swe/data/sample/en_wikipedia_60k.txt.xz"
        enc = _sh([swe, "encode", "--model", str(work / "build/model"), "--input", str(sample),
                   "--output", str(work / "encoded")])
        t1 = time.time()
    finally:
        if sampler:
            sampler.terminate()
    stages = stage_times(work / "build")
    for s in stages.values():
        s["gpu_util_pct"] = _utilisation(work / "gpu.csv", s["end"] - s["seconds"], s["end"])
        if "sentences" in s:
            s["sentences_per_s"] = round(s["sentences"] / max(s["seconds"], 1e-9), 1)
    ref = json.loads((assets_dir / "reference.json").read_text())
    out = {"machine": "rehearsal: no GPU settings" if rehearse else "GPU",
           "build_seconds": build, "stages": stages,
           "encode": {"seconds": enc, "gpu_util_pct": _utilisation(work / "gpu.csv", t0, t1)},
           "stsb_dev": stsb_dev(swe, work / "build/model", assets_dir / "data", work),
           "reference": ref}
    out["stsb_dev_gap"] = round(out["stsb_dev"] - ref["stsb_dev"], 3)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "reference"}, indent=1))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    given = args.assets if args.command == "assets" else getattr(args, "report", None)
    if given is not None and (not given.strip() or "\0" in given):
        parser().error(f"{given!r} is not a path (empty, or holding a NUL byte)")
    if args.command == "assets" and Path(given).exists():  # never written over
        parser().error(f"{given} exists: name a new folder")
    if args.command == "run" and Path(given).is_dir():
        parser().error(f"{given} is a folder: name the report's file")
    if args.command == "assets":
        assets(Path(args.assets).resolve())
    elif args.command == "install":
        install(Path(args.bundle).resolve())
    else:
        run(Path(args.assets).resolve(), Path(args.report).resolve(), args.rehearse)
    return 0


if __name__ == "__main__":
    sys.exit(main())
