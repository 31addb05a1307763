"""Model cards: the ``README.md`` written into every built model directory.

A card records what made the model (teacher, languages, V, d′, N, the corpus and its size, the
build config and its hash), its files and size, licence notes, and how to load it in swe,
model2vec and sentence-transformers. It is not listed in ``config.json``'s checksummed files, so
:meth:`swe.StaticModel.load` ignores it and rewriting it never invalidates the model.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from swe import inputs, storage
from swe.artifacts import modified
from swe.modelfiles import ModelFolder

if TYPE_CHECKING:
    from swe.build.config import BuildConfig

__all__ = ["CARD", "add_scores", "config_hash", "corpus_facts", "language_facts", "render_card",
           "write_card", "write_cards"]

log = logging.getLogger("swe.build")

CARD = "README.md"
STEPS = {"step1": "step 1: extraction (mean teacher token states over each word's sentences)",
         "step2": "step 2: sentence-level PCA with all-but-the-top",
         "step3": "step 3: refinement (distillation / contrastive / KD)",
         "model": "the published model (the build's last step)"}


def config_hash(config: dict[str, Any]) -> str:
    """SHA-256 (first 16 hex digits) of the build config without its output path."""
    blob = json.dumps({k: v for k, v in config.items() if k != "output"}, sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def corpus_facts(config: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Per language: (language, input files, bytes); ``-1`` where the inputs cannot be listed."""
    out = []
    for lang, section in (config.get("corpus") or {}).items():
        try:
            files = inputs.expand_inputs(list(section.get("paths") or []) + inputs.present(
                list(section.get("paths_if_present") or [])))
            size = 0
            for f in files:
                fs, path = storage.filesystem(f)
                size += int(fs.size(path) or 0)
            out.append((lang, len(files), size))
        except (OSError, ValueError):
            out.append((lang, -1, -1))
    return out


def language_facts(output: str) -> dict[str, dict[str, int]]:
    """Per language, from the build's stage markers: its text ``lines``, ``sentences`` kept,
    vocabulary ``words`` (``listed``: of them, word-list words seen too rarely otherwise) and
    translation ``pairs`` (its ``en-<lang>`` section, train and dev); what was not built is
    left out."""
    def stats(stage: str) -> dict:
        try:
            url = storage.join(output, "work", stage, "_DONE.json")
            return json.loads(storage.read_text(url)).get("stats") or {}
        except (OSError, ValueError):
            return {}

    facts: dict[str, dict[str, int]] = {}
    for stage, key, unit in (("corpus", "lines", "lines"), ("sentences", "sentences",
                                                             "sentences")):
        for lang, shards in (stats(stage).get("shards") or {}).items():
            facts.setdefault(lang, {})[key] = sum(int(s.get(unit, 0)) for s in shards)
    vocab = stats("vocab")
    for key, name in (("sizes", "words"), ("listed", "listed")):
        for lang, n in (vocab.get(key) or {}).items():
            facts.setdefault(lang, {})[name] = int(n)
    for pair, n in (stats("train_data").get("pairs") or {}).items():
        for lang in facts:
            if lang != "en" and pair.endswith(f"-{lang}"):
                facts[lang]["pairs"] = int(n)
    return facts


def _language_lines(facts: dict[str, dict[str, int]]) -> list[str]:
    """The card's per-language table (empty when the markers are gone)."""
    if not facts:
        return []
    from swe.text import LANGUAGES

    def row(code: str, r: dict[str, int]) -> str:
        n = {k: f"{v:,}" for k, v in r.items()}
        words = n.get("words", "–") + (f" ({n['listed']})" if "listed" in n else "")
        name = LANGUAGES[code].name if code in LANGUAGES else code
        return (f"| {name} | {code} | {n.get('lines', '–')} | {n.get('sentences', '–')} | "
                f"{words} | {n.get('pairs', '–')} |")

    return ["## Languages", "", "| language | code | text lines | sentences | words (listed) "
            "| pairs |", "|---|---|---:|---:|---:|---:|",
            *(row(c, r) for c, r in facts.items()), ""]


def add_scores(model_dir: str, lines: list[str]) -> str:
    """Put ``lines`` (Markdown) under the card's "Speed and quality" heading, in place of what
    was there; the card's URL."""
    url = storage.join(model_dir, CARD)
    text = storage.read_text(url)
    head, sep, rest = text.partition("## Speed and quality\n")
    if not sep:
        raise ValueError(f"{url} has no 'Speed and quality' section: rebuild or rewrite it")
    _, nxt, tail = rest.partition("\n## ")
    storage.write_bytes_atomic(url, (head + sep + "\n" + "\n".join(lines) + "\n" + nxt +
                                     tail).encode("utf-8"))
    return url


def _mb(n: int) -> str:
    return "unknown" if n < 0 else f"{n / 1e6:,.1f} MB"


def render_card(step: str, model: dict[str, Any], config: dict[str, Any],
                corpus: list[tuple[str, int, int]],
                facts: dict[str, dict[str, int]] | None = None) -> str:
    """The card's Markdown from the model's ``config.json``, the build config and corpus facts."""
    prov = model.get("provenance") or {}
    files = model.get("files") or {}
    total = sum(int(f.get("bytes", 0)) for f in files.values())
    sel, pca = config.get("selection", {}), config.get("pca", {})
    corpus_lines = [f"- `{lang}`: {', '.join(f'`{p}`' for p in config['corpus'][lang]['paths'])}"
                    f" — {n if n >= 0 else '?'} file(s), {_mb(size)}; "
                    f"max_lines = {config['corpus'][lang].get('max_lines') or 'all'}"
                    for lang, n, size in corpus] or ["- (none recorded)"]
    file_lines = [f"| `{name}` | {int(f.get('bytes', 0)):,} |" for name, f in sorted(files.items())]
    name = config.get("name", "swe")
    v_cfg = config.get("vocab", {}).get("size")
    return "\n".join([
        f"# {name} — {step}", "",
        f"A static word embedding model built by swe — {STEPS.get(step, step)}. "
        "A sentence vector is the L2-normalised mean of its words' vectors; encoding needs "
        "numpy, no torch.", "",
        "| | |", "|---|---|",
        f"| teacher | `{config.get('teacher', prov.get('teacher'))}` |",
        f"| languages | {', '.join(model.get('languages') or [])} |",
        f"| V (words) | {model.get('vocab_size'):,} (configured: {v_cfg}) |",
        f"| d′ (dim) | {model.get('dim')} (PCA level {pca.get('level')}, ABTT {pca.get('abtt')}) |",
        f"| N (sentences per word) | {sel.get('n')} of ≤ {sel.get('candidates')} candidates |",
        f"| extraction mode | {config.get('extraction', {}).get('mode')} |",
        f"| lowercase lookup | {model.get('lowercase')} |",
        f"| build config hash | `{config_hash(config)}` |",
        f"| size on disk | {_mb(total)} ({model.get('dtype', 'float32')}) |", "",
        *_language_lines(facts or {}), "## Corpus", "", *corpus_lines, "",
        "## Files", "", "| file | bytes |", "|---|---|", *file_lines, "",
        "## Speed and quality", "",
        "Not measured by the build. Measure with `swe evaluate --model DIR --tasks stsb-dev "
        "stsb-test --speed 10000 --threads 1` (docs/evaluation.md).", "",
        "## Licence notes", "",
        f"The vectors are derived from the teacher `{config.get('teacher')}` and the corpus "
        "above: their licences and terms apply (e.g. all-MiniLM-L6-v2: Apache-2.0; Wikipedia "
        "text: CC BY-SA). swe itself is Apache-2.0.", "",
        "## Loading", "",
        "```python", "import swe", "model = swe.StaticModel.load(\"DIR\")",
        "vectors = model.encode([\"A man is playing a guitar.\"])", "```", "",
        "model2vec and sentence-transformers (export first; docs/export.md lists what differs):",
        "", "```bash", "swe export DIR --to model2vec DIR-m2v",
        "swe export DIR --to sentence-transformers DIR-st", "```", "",
        "```python", "from model2vec import StaticModel",
        "m2v = StaticModel.from_pretrained(\"DIR-m2v\")",
        "from sentence_transformers import SentenceTransformer",
        "st = SentenceTransformer(\"DIR-st\")", "```", "",
        "## Build config", "", "```json", json.dumps(config, indent=2, default=str), "```", ""])


def write_card(model_dir: str, step: str, cfg: BuildConfig,
               corpus: list[tuple[str, int, int]] | None = None) -> str:
    """Write ``<model_dir>/README.md`` for a saved model of ``cfg``'s build; its URL.
    ``corpus``: :func:`corpus_facts` when already computed."""
    folder = ModelFolder(model_dir)
    config = cfg.to_dict()
    text = render_card(step, folder.config, config,
                       corpus_facts(config) if corpus is None else corpus,
                       language_facts(cfg.output))
    url = storage.join(model_dir, CARD)
    head, sep, tail = text.partition("## Build config")
    storage.write_bytes_atomic(url, (head.replace("DIR", model_dir) + sep + tail).encode("utf-8"))
    return url


def write_cards(output: str, cfg: BuildConfig, check: Callable[[], None] = lambda: None,
                steps: tuple[str, ...] = tuple(STEPS)) -> list[str]:
    """Cards for every saved model directory ``<output>/<step>``; a failure only logs.
    ``check`` runs before each write (the build's lease check)."""
    try:
        corpus = corpus_facts(cfg.to_dict())
    except Exception as e:  # a card must never fail a build (this runs in its `finally`)
        log.warning("model cards: corpus not listed: %s", e)
        corpus = [(lang, -1, -1) for lang in cfg.corpus]
    written = []
    for step in steps:
        try:
            check()
        except OSError as e:  # the output is no longer ours: write nothing more
            log.warning("model cards not written: %s", e)
            break
        try:
            if not _card_is_current(storage.join(output, step)):
                written.append(write_card(storage.join(output, step), step, cfg, corpus))
        except FileNotFoundError:  # this step was not built (yet)
            continue
        except (OSError, ValueError) as e:
            log.warning("model card for %s not written: %s", storage.join(output, step), e)
    return written


def _card_is_current(model_dir: str) -> bool:
    """Whether ``model_dir``'s card was written after its ``config.json`` (the last file a save
    writes): a card is written again only for a model saved since, so a build that fails (or
    stops) before it saves a step never re-describes, with its own config, a model an earlier
    build made."""
    fs, path = storage.filesystem(model_dir)
    fs.invalidate_cache(path)
    try:
        card, config = fs.info(f"{path}/{CARD}"), fs.info(f"{path}/config.json")
    except FileNotFoundError:
        return False
    return modified(card) >= modified(config)
