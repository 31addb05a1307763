"""Hostile input, second round: `swe store prune` never matches everything by accident (an empty
teacher prefix, a non-finite or non-positive age, an unknown runtime), `--dry-run` removes
nothing, and a damaged namespace file is one line, not a traceback."""

from __future__ import annotations

import pytest

from swe.build.teacher.store import descriptor, list_store, open_namespace
from swe.cli import main


@pytest.fixture
def store(tmp_path) -> str:
    url = str(tmp_path / "store")
    open_namespace(url, descriptor("c" * 64, "onnx", 512, 384))
    open_namespace(url, descriptor("d" * 64, "torch", 512, 384))
    return url


@pytest.mark.parametrize("args, needle", [
    (["--teacher", ""], "an empty value would match every namespace"),
    (["--teacher", "ab"], "at least 4 hex digits"),
    (["--teacher", "not-hex!"], "at least 4 hex digits"),
    (["--older-than-days", "nan"], "must be a finite number of days above 0"),
    (["--older-than-days", "-1"], "must be a finite number of days above 0"),
    (["--older-than-days", "0"], "must be a finite number of days above 0"),
    (["--older-than-days", "inf"], "must be a finite number of days above 0"),
    (["--runtime", ""], "is not a runtime"),
    (["--runtime", "tensorrt"], "is not a runtime"),
    ([], "prune needs --teacher, --runtime or --older-than-days"),
])
def test_a_prune_filter_that_could_match_everything_is_refused(store, args, needle, capsys):
    assert main(["store", "prune", store, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1, err
    assert len(list_store(store)) == 2  # nothing removed


def test_dry_run_lists_what_prune_would_remove_and_removes_nothing(store, capsys):
    assert main(["store", "prune", store, "--runtime", "onnx", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("would remove ns-") and "onnx" in out and "torch" not in out
    assert len(list_store(store)) == 2
    assert main(["store", "prune", store, "--teacher", "cccc"]) == 0
    assert capsys.readouterr().out.startswith("removed ns-")
    assert [ns["runtime"] for ns in list_store(store)] == ["torch"]


@pytest.mark.parametrize("damage", [b"{not json", b"[]", b'{"teacher_sha256": "x"}', b"\xff\xfe"])
def test_a_damaged_namespace_file_is_one_line_naming_it(store, damage, capsys):
    from pathlib import Path

    files = sorted(Path(store).glob("ns-*/_NAMESPACE.json"))
    files[0].write_bytes(damage)
    assert main(["store", "list", store]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(files[0]) in err and err.count("\n") == 1, err
    assert "Traceback" not in err
