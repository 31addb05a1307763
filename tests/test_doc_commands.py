"""Every command in the README, docs/ and cluster/*.md that runs project code still works as
written: its script or module exists, its flags parse, its ``--config`` exists and its ``--set``
keys are known. Nothing is run: each command is parsed by the script's own argument parser."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import itertools
import re
import shlex
import sys
from pathlib import Path

import pytest

from swe.build import ConfigError, load_config
from swe.build.config import config_path
from swe.cli import command_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "cluster").glob("*.md"))]
PYTHONS = {"python", "python3", ".venv/bin/python"}
SCRIPT_DIRS = ("benchmarks/", "pipelines/", "tools/")


def _snippets(text: str) -> list[tuple[str, bool]]:
    """``(line, whole)``: shell lines of fenced code blocks (continuations joined; ``whole``) and
    inline code spans (a mention in prose: only its flags are checked)."""
    lines: list[tuple[str, bool]] = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S):
        lines += [(line, True) for line in block.replace("\\\n", " ").splitlines()]
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    lines += [(span, False) for span in re.findall(r"`([^`\n]+)`", prose)]
    return [(re.sub(r"^\s*\$\s+", "", line).strip(), whole) for line, whole in lines]


def _synopsis(line: str) -> str:
    """A line with its synopsis parts removed: ``[--opt …]`` groups, ``a|b`` alternatives and
    shell redirections."""
    line = re.sub(r"(?<=\s)\[(?:-|\.\.\.|…)[^\]]*\]", " ", line)
    return re.sub(r"(?<=\s)\d?>&?\S*", " ", line)


def _commands(line: str) -> list[list[str]]:
    """The project commands of one shell line: ``[python, script, args…]``, ``[python, -m,
    module, args…]`` or ``[swe, args…]`` (after ``ray job submit … --``, env assignments, in
    pipelines and ``&&`` chains)."""
    try:
        tokens = shlex.split(_synopsis(line.split(" #", 1)[0]), comments=False)
    except ValueError:
        return []
    found, current = [], []
    for tok in [*tokens, "&&"]:
        if tok in ("&&", "||", ";", "|"):
            found.append(current)
            current = []
        else:
            current.append(tok)
    commands = []
    for words in found:
        for i, w in enumerate(words):
            rest = words[i + 1:]
            module = len(rest) > 1 and rest[0] == "-m" and rest[1].startswith("swe")
            if w in PYTHONS and rest and (rest[0].startswith(SCRIPT_DIRS) or module):
                commands.append([w, *rest])
                break
            if w == "swe" and rest and (i == 0 or "=" in words[i - 1]) and \
                    re.fullmatch(r"[a-z]+", rest[0]):
                commands.append(words[i:])
                break
    return commands


def _doc_commands() -> list[tuple[str, list[str], bool]]:
    """``(where, command, whole)``; a command with elided parts (``...``, ``$VAR``, ``<x>``) or
    from prose is checked by its flags only (``whole`` False)."""
    found = []
    for doc in DOCS:
        for line, whole in _snippets(doc.read_text()):
            for cmd in _commands(line):
                elided = any(re.search(r"\.\.\.|…|^\$|<\w", tok) for tok in cmd)
                found.append((f"{doc.relative_to(ROOT)}: {line}", cmd, whole and not elided))
    return found


def _script_parser(path: Path):
    """The parser of a script: ``pipelines/X.py`` is ``swe X``; others expose ``parser()``."""
    if path.parent.name == "pipelines":
        return command_parser(path.stem)
    if str(path.parent) not in sys.path:  # a benchmark imports its folder's _smoke helper
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"doc_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert hasattr(mod, "parser"), f"{path.name} has no parser() to check its flags with"
    return mod.parser()


def _parse(parser, args: list[str], whole: bool) -> str | None:
    """The parser's error for ``args`` (None: they parse); not ``whole``: only that each
    ``--flag`` is one of the parser's and any ``--set`` key is known."""
    if not whole:
        return _flags_problem(parser, args)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            ns = parser.parse_args(args)
    except SystemExit as e:
        return None if e.code == 0 else err.getvalue().strip().splitlines()[-1]
    return _config_problem(ns)


def _flags_problem(parser, args: list[str]) -> str | None:
    known = {o for a in parser._actions for o in a.option_strings}
    unknown = [a.split("=")[0] for a in args if a.startswith("--") and
               a.split("=")[0] not in known]
    if unknown:
        return f"unknown flag(s) {unknown}"
    sets = [v for k, v in itertools.pairwise(args) if k == "--set" and not re.search(r"\$|<", v)]
    if sets and "--set" in known:
        return _config_problem(argparse.Namespace(config="quickstart", set=sets))
    return None


def _config_problem(ns) -> str | None:
    """An unknown ``--set`` key or a missing ``--config`` file of a build command."""
    config = getattr(ns, "config", None)
    if not config or not isinstance(config, str) or "<" in config:
        return None
    if not Path(config_path(config)).is_file() and not (ROOT / config).is_file():
        return f"--config {config}: no such file"
    sets = [s for s in getattr(ns, "set", None) or [] if "<" not in s]
    try:
        load_config(str(ROOT / config) if (ROOT / config).is_file() else config, sets,
                    output="/tmp/doc-command-check", check_paths=False)
    except ConfigError as e:
        unknown = [line for line in str(e).splitlines() if "unknown key" in line or "--set" in line]
        return "; ".join(unknown) or None
    return None


def _problem(cmd: list[str], whole: bool = True) -> str | None:
    if cmd[0] == "swe":
        try:
            parser = command_parser(cmd[1])
        except KeyError as e:
            return str(e)
        return _parse(parser, cmd[2:], whole)
    if cmd[1] == "-m":
        module = cmd[2]
        if importlib.util.find_spec(module) is None:
            return f"no module {module}"
        if module in ("swe.cli", "swe"):
            return _problem(["swe", *cmd[3:]], whole) if len(cmd) > 3 else None
        return None
    script = ROOT / cmd[1]
    if re.search(r"…|\.\.\.|\bX\b", cmd[1]) and script.parent.is_dir():
        return None  # a folder's scripts in general (pipelines/…)
    if not script.is_file():
        return f"{cmd[1]}: no such file"
    return _parse(_script_parser(script), cmd[2:], whole)


def test_the_docs_have_commands_to_check():
    """The extraction finds the documented commands (a broken regex would pass everything)."""
    found = {" ".join(cmd[:2]) for _, cmd, _ in _doc_commands()}
    assert sum(whole for _, _, whole in _doc_commands()) > 40
    for expected in ("swe build", "python pipelines/build.py", "python pipelines/encode.py"):
        assert any(f.startswith(expected) for f in found), (expected, sorted(found)[:20])


def test_the_checker_catches_a_bad_flag_a_bad_key_and_a_missing_file():
    assert _problem(["swe", "build", "--config", "quickstart", "--set", "vocab.sise=3"])
    assert _problem(["swe", "encode", "--modle", "m", "--input", "i", "--output", "o"])
    assert _problem(["python", "benchmarks/bench_gone.py", "--smoke"])
    assert _problem(["python", "pipelines/build.py", "--config", "nope.toml"])
    assert _problem(["swe", "build", "--config", "quickstart", "--set", "vocab.size=3"]) is None
    assert _problem(["swe", "build", "--set", "vocab.sise=3"], whole=False)
    assert _problem(["swe", "build", "-v", "--untl", "pca"], whole=False)
    assert _problem(["swe", "build", "-v", "--until", "pca"], whole=False) is None


@pytest.mark.parametrize("where, cmd, whole", _doc_commands(),
                         ids=lambda x: " ".join(x)[:60] if isinstance(x, list) else None)
def test_documented_command(where, cmd, whole):
    problem = _problem(cmd, whole)
    assert problem is None, f"{where}\n  -> {problem}"


def test_the_readme_indexes_every_doc_and_no_doc_cites_an_issue():
    readme = (ROOT / "README.md").read_text()
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{doc.name})" in readme, f"README.md does not link docs/{doc.name}"
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        assert not re.search(r"\bissues? ?#?\d|\bthe issue\b", text, re.I), doc.name
