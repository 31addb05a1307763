"""The house's rules, checked on the source: no import circle anywhere in ``swe/`` (imports inside
functions counted, ``TYPE_CHECKING`` blocks not), no module over 450 lines, no function over 60,
the runner names no stage, and nothing outside a package imports its private names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWE = ROOT / "swe"


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _imported(name: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the file imports, at any depth (a ``from pkg import
    sub`` names the submodule ``pkg.sub``, not the package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                         for a in node.names)
    out = set()
    for m in found:
        while m and m not in modules:
            m = m.rpartition(".")[0]
        if m and m != name:
            out.add(m)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the package's modules it imports."""
    paths = {_module_name(p, root): p for p in root.rglob("*.py")}
    return {name: _imported(name, path, set(paths)) for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_in_swe():
    assert cycles(import_graph(SWE)) == []


def test_the_circle_check_finds_deferred_and_relative_circles(tmp_path):
    """Not vacuous: a circle closed by a function-local import, or through a relative import,
    is found; one closed only under ``TYPE_CHECKING`` is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "c.py").write_text("from pkg.d import x\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from pkg.c import y\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b"]]


def test_modules_and_functions_stay_short():
    long_modules, long_functions = [], []
    for path in sorted(SWE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > 450:
            long_modules.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} "
                                          f"{node.name}: {lines} lines")
    assert not long_modules and not long_functions, long_modules + long_functions


def test_the_runner_names_no_stage():
    from swe.build.stages import STAGES

    source = (SWE / "build" / "runner.py").read_text(encoding="utf-8")
    named = [s.NAME for s in STAGES if re.search(rf"[\"']{s.NAME}[\"']", source)]
    fields = {f for s in STAGES for f in s.Result.__dataclass_fields__} - {
        "seconds", "warnings", "driver_peak_mib"}
    assert not named and not [f for f in fields if f'"{f}"' in source], named


def test_nothing_outside_a_package_imports_its_private_names():
    offenders = []
    for folder in ("tests", "benchmarks", "pipelines", "tools", "swe"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                        "swe"):
                    continue
                home = node.module.rpartition(".")[0] if "." in node.module else node.module
                inside = path.is_relative_to(ROOT / home.replace(".", "/"))
                private = [a.name for a in node.names if a.name.startswith("_")
                           and not a.name.startswith("__")]
                if private and not inside:
                    offenders.append(f"{path.relative_to(ROOT)}: {node.module} {private}")
    assert not offenders, offenders


def test_a_stage_reads_other_stages_settings_only_through_its_declared_reads():
    """A stage's source names the config sections of other stages only where its ``READS``
    declares them (``cfg.<section>`` and ``ctx.cfg.<section>``, its own section aside)."""
    import inspect

    from swe.build.stages import STAGES

    sections = {s.SECTION.name for s in STAGES if s.SECTION is not None}
    undeclared = {}
    for stage in STAGES:
        own = stage.SECTION.name if stage.SECTION is not None else None
        named = set(re.findall(r"\bcfg\.(\w+)", inspect.getsource(stage))) & sections
        extra = named - {own} - set(getattr(stage, "READS", ()))
        if extra:
            undeclared[stage.NAME] = sorted(extra)
    assert not undeclared, f"declare them in the stage's READS: {undeclared}"
    declared = {s.NAME: set(getattr(s, "READS", ())) for s in STAGES}
    assert declared["refine"] == {"extraction", "pairs", "pca", "selection"}  # real reads
