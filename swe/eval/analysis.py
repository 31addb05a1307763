"""Analyses of a built model (Wada et al. 2025, §5): what the word vectors' norms and principal
components encode, and where the model sits on the quality / speed plane.

* :func:`norm_frequency_spearman`: Spearman's ρ between each word vector's L2 norm and the
  word's corpus frequency rank (1 = most frequent). A positive ρ means rare words have longer
  vectors, i.e. frequent (function) words weigh less in the mean-pooled sentence vector.
* :func:`top_component_words`: the words at both ends of the top principal components of the
  word matrix.
* :func:`quality_speed_plot`: quality vs sentences/s scatter, marker area ∝ model size.
* :func:`analyze`: all of it for a list of models, as a report and Markdown tables (the job
  ``pipelines/analyze.py``).

Frequency rank: ``vocab.txt`` of a single-language build is in corpus frequency order, so row
``i`` has rank ``i + 1``. A multi-language build concatenates its languages' frequency-ordered
lists (``config.json`` ``"languages"`` order) and keeps a word shared by two languages only at its
first row, so the rows of one language cannot be told apart from the model dir alone. For such
a model pass ``language=``: the ranks then come from that language's list in the build's work
dir (``<build>/work/vocab/<lang>.parquet``, the sibling of ``<build>/stepK``, or ``vocab_dir=``),
restricted to the words the model has; without that list it is an error rather than a number
that mixes languages.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from swe import storage
from swe.eval.metrics import spearman
from swe.model import StaticModel

__all__ = ["analyze", "frequency_ranks", "norm_by_frequency_bins", "norm_frequency_spearman",
           "norm_frequency_table", "plot_points", "quality_speed_plot", "top_component_words"]


def _languages(model_dir: str | os.PathLike) -> list[str]:
    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    return list(config.get("languages") or ["en"])


def _vocab_file(model_dir: str | os.PathLike | None, language: str,
                vocab_dir: str | os.PathLike | None) -> Path:
    root = Path(vocab_dir) if vocab_dir else Path(model_dir).resolve().parent / "work" / "vocab"
    path = root / f"{language}.parquet"
    if not path.is_file():
        raise FileNotFoundError(
            f"{model_dir} is a multi-language model and {path} (the build's {language} "
            "vocabulary in frequency order) is missing: pass vocab_dir= (the build's work/vocab)")
    return path


def frequency_ranks(model: StaticModel, model_dir: str | os.PathLike | None = None,
                    language: str | None = None, vocab_dir: str | os.PathLike | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, ranks)``: the model rows that have a frequency rank and their ranks (1 = most
    frequent). Single-language model: every row, rank = row + 1. Multi-language model: the rows
    of ``language``'s words, ranked by that language's vocabulary list (see the module
    docstring)."""
    if len(model.languages) == 1 and language in (None, model.languages[0]):
        rows = np.arange(len(model))
        return rows, rows + 1
    if language is None:
        raise ValueError(
            f"model has languages {model.languages}: its vocab.txt concatenates one frequency "
            "list per language, so pass language= to rank one language's words")
    if language not in model.languages:
        raise ValueError(f"language {language!r} is not one of the model's {model.languages}")
    if model_dir is None and vocab_dir is None:
        raise ValueError("a multi-language model needs model_dir= or vocab_dir= to find its "
                         "per-language vocabulary lists")
    import pyarrow.parquet as pq

    words = pq.read_table(_vocab_file(model_dir, language, vocab_dir),
                          columns=["word"]).column("word").to_pylist()
    index = {w: i for i, w in enumerate(model.words)}
    pairs = [(index[w], r) for r, w in enumerate(words, start=1) if w in index]
    if len(pairs) < 2:
        raise ValueError(f"fewer than 2 of the {language} vocabulary words are in the model")
    rows, ranks = (np.asarray(x, dtype=np.int64) for x in zip(*pairs, strict=True))
    return rows, ranks


def norm_frequency_spearman(model_dir: str | os.PathLike, language: str | None = None,
                            vocab_dir: str | os.PathLike | None = None,
                            top: int | None = None) -> float:
    """Spearman's ρ between word-vector L2 norm and frequency rank (1 = most frequent).

    ``language`` is needed (only) for a multi-language model; see the module docstring.
    ``top`` restricts it to the ``top`` most frequent words (ranks ``1..top``)."""
    model = StaticModel.load(model_dir)
    rows, ranks = frequency_ranks(model, model_dir, language, vocab_dir)
    if top is not None:
        keep = ranks <= top
        rows, ranks = rows[keep], ranks[keep]
    norms = np.linalg.norm(model.vectors[rows].astype(np.float64), axis=1)
    return spearman(norms, ranks)


def norm_by_frequency_bins(model_dir: str | os.PathLike, bins: int = 10,
                           language: str | None = None,
                           vocab_dir: str | os.PathLike | None = None) -> list[dict]:
    """Mean L2 norm of the words in ``bins`` equal-sized frequency-rank bins, most frequent
    first: ``[{"ranks": [first, last], "mean_norm": ...}, ...]`` (shows a non-monotone
    relation that one ρ hides)."""
    model = StaticModel.load(model_dir)
    rows, ranks = frequency_ranks(model, model_dir, language, vocab_dir)
    order = np.argsort(ranks, kind="stable")
    rows, ranks = rows[order], ranks[order]
    norms = np.linalg.norm(model.vectors[rows].astype(np.float64), axis=1)
    return [{"ranks": [int(r[0]), int(r[-1])], "mean_norm": float(v.mean())}
            for r, v in zip(np.array_split(ranks, bins), np.array_split(norms, bins),
                            strict=True) if len(r)]


def norm_frequency_table(model_dir: str | os.PathLike, vocab_dir: str | os.PathLike | None = None
                         ) -> dict[str, float | None]:
    """:func:`norm_frequency_spearman` per language of the model; ``None`` for a language whose
    frequency list cannot be found (multi-language models outside their build dir)."""
    langs = _languages(model_dir)
    if len(langs) == 1:
        return {langs[0]: norm_frequency_spearman(model_dir)}
    model = StaticModel.load(model_dir)
    out: dict[str, float | None] = {}
    for lang in langs:
        try:
            rows, ranks = frequency_ranks(model, model_dir, lang, vocab_dir)
        except FileNotFoundError:
            out[lang] = None
            continue
        out[lang] = spearman(np.linalg.norm(model.vectors[rows].astype(np.float64), axis=1),
                             ranks)
    return out


def top_component_words(model_dir: str | os.PathLike | StaticModel, components: int = 3,
                        n: int = 10) -> list[dict]:
    """The words at both ends of the top principal components of the word matrix.

    PCA is an SVD of the centred word vectors (float64). A component's sign is arbitrary, so it
    is fixed as in scikit-learn's ``svd_flip``: the word with the largest absolute projection
    projects positively. One dict per component, in order: ``component`` (1-based),
    ``explained_variance_ratio``, ``positive`` / ``negative`` (the ``n`` words with the largest /
    smallest projection, most extreme first) and ``positive_scores`` / ``negative_scores``.
    """
    model = model_dir if isinstance(model_dir, StaticModel) else StaticModel.load(model_dir)
    if components < 1 or n < 1:
        raise ValueError("components and n must be >= 1")
    x = model.vectors.astype(np.float64)
    x -= x.mean(axis=0)
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    var = s**2
    total = var.sum()
    n = min(n, len(model))
    out = []
    for k in range(min(components, len(s))):
        proj = u[:, k] * s[k]
        if proj[np.argmax(np.abs(proj))] < 0:
            proj = -proj
        order = np.argsort(-proj, kind="stable")
        top, bottom = order[:n], order[::-1][:n]
        out.append({
            "component": k + 1,
            "explained_variance_ratio": float(var[k] / total) if total else 0.0,
            "positive": [model.words[i] for i in top],
            "positive_scores": [float(proj[i]) for i in top],
            "negative": [model.words[i] for i in bottom],
            "negative_scores": [float(proj[i]) for i in bottom],
        })
    return out


def quality_speed_plot(points: list[dict], path: str | os.PathLike, *,
                       xlabel: str = "sentences / second (log scale)",
                       ylabel: str = "quality", title: str | None = None) -> None:
    """Write a PNG scatter of quality vs speed, like Model2Vec's README plot.

    Each point is a dict with ``name``, ``quality`` and ``sentences_per_s``, and optionally
    ``size_bytes`` (marker area ∝ size; a fixed size where absent) and ``color``.
    """
    if not points:
        raise ValueError("quality_speed_plot needs at least one point")
    for p in points:
        missing = {"name", "quality", "sentences_per_s"} - set(p)
        if missing:
            raise ValueError(f"point {p!r} lacks {sorted(missing)}")
        if not p["sentences_per_s"] > 0:
            raise ValueError(f"point {p['name']!r}: sentences_per_s must be > 0 (log axis)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [p.get("size_bytes") for p in points]
    biggest = max((s for s in sizes if s), default=0)
    area = [60.0 if not s or not biggest else 40 + 1500 * s / biggest for s in sizes]
    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=150)
    try:
        colors = [p.get("color", f"C{i % 10}") for i, p in enumerate(points)]
        ax.scatter([p["sentences_per_s"] for p in points], [p["quality"] for p in points],
                   s=area, c=colors, alpha=0.55, edgecolors="black", linewidths=0.8, zorder=3)
        ax.set_xscale("log")
        xs = [p["sentences_per_s"] for p in points]
        ax.set_xlim(min(xs) / 2.5, max(xs) * 2.5)
        ys = [p["quality"] for p in points]
        span = max(ys) - min(ys) or 1.0
        ax.set_ylim(min(ys) - 0.25 * span, max(ys) + 0.3 * span)
        fig.canvas.draw()
        _label_points(fig, ax, points, area)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3, zorder=0)
        fig.tight_layout()
        png = io.BytesIO()
        fig.savefig(png, format="png")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        storage.write_bytes_atomic(os.path.abspath(path), png.getvalue())  # never through a link
    finally:
        plt.close(fig)


def _label_points(fig: Any, ax: Any, points: list[dict], area: list[float]) -> None:
    """Name each point beside its marker: above, below, right or left, the first place that
    clears the labels already placed."""
    placed: list[tuple[float, float]] = []  # label centres in display pixels
    for p, a in zip(points, area, strict=True):
        label = p["name"]
        if p.get("size_bytes"):
            label += f"\n{p['size_bytes'] / 2**20:.0f} MiB"
        x0, y0 = ax.transData.transform((p["sentences_per_s"], p["quality"]))
        r = np.sqrt(a) / 2 + 4
        # above, below, right, left of the marker: the first that clears placed labels
        options = [((0, r), "center", "bottom"), ((0, -r), "center", "top"),
                   ((r, 0), "left", "center"), ((-r, 0), "right", "center")]
        for (dx, dy), ha, va in options:
            scale = fig.dpi / 72
            cx = x0 + dx * scale + {"left": 45, "right": -45, "center": 0}[ha] * scale
            cy = y0 + dy * scale + {"bottom": 12, "top": -12, "center": 0}[va] * scale
            if all(abs(cx - px) > 100 * scale or abs(cy - py) > 26 * scale
                   for px, py in placed):
                break
        placed.append((cx, cy))
        ax.annotate(label, (p["sentences_per_s"], p["quality"]), xytext=(dx, dy),
                    textcoords="offset points", ha=ha, va=va, fontsize=8)


# -- the report of pipelines/analyze.py ------------------------------------------------------------


def plot_points(speed: dict, quality: dict[str, float], threads: str,
                names: dict[str, str]) -> list[dict]:
    """Points for :func:`quality_speed_plot`: each ``quality`` spec joined with its speed
    result at ``threads`` (``speed``: ``{"results": [...]}`` as ``swe.eval.speed`` writes it)."""
    by_spec = {r["spec"]: r for r in speed["results"] if str(r["threads"]) == str(threads)}
    missing = sorted(set(quality) - set(by_spec))
    if missing:
        raise ValueError(f"no speed result at threads={threads} for {missing}")
    return [{"name": names.get(s, s), "quality": q, "sentences_per_s":
             by_spec[s]["sentences_per_s"], "size_bytes": by_spec[s]["size_bytes"]}
            for s, q in quality.items()]


def _norm_rows(model: str) -> tuple[dict, list[str]]:
    """One model's norm / frequency entry of the report and its Markdown rows."""
    table = norm_frequency_table(model)
    entry: dict = {"norm_frequency_spearman": table}
    rows = []
    for lang, rho in table.items():
        one = None if len(table) == 1 else lang
        top = bins = None
        if rho is not None:
            top = norm_frequency_spearman(model, one, top=1000)
            bins = norm_by_frequency_bins(model, 10, one)
            entry.setdefault("norm_frequency_spearman_top1000", {})[lang] = top
            entry.setdefault("norm_by_rank_decile", {})[lang] = bins
        rows.append(f"| {model} | {lang} | {'–' if rho is None else f'{rho:+.3f}'} | "
                    f"{'–' if top is None else f'{top:+.3f}'} | "
                    f"{' '.join(format(b['mean_norm'], '.2f') for b in bins or [])} |")
    return entry, rows


def _component_rows(model: str, comps: list[dict]) -> list[str]:
    rows = [f"\n### {model}\n", "| PC | var. | + end | − end |", "|---|---:|---|---|"]
    rows += [f"| {c['component']} | {100 * c['explained_variance_ratio']:.1f}% | "
             f"{' '.join(c['positive'])} | {' '.join(c['negative'])} |" for c in comps]
    return rows


def _speed_results(speed: dict) -> dict:
    """``{"results": [...]}`` from ``swe.eval.speed --json`` or ``pipelines/evaluate.py --speed``
    output (``{"speed": {spec: result}}``)."""
    if isinstance(speed.get("speed"), dict):
        return {"results": list(speed["speed"].values())}
    return speed


def analyze(models: list[str], components: int = 3, words: int = 10, *,
            png: str | os.PathLike | None = None, speed: dict | None = None,
            quality: dict[str, float] | None = None, threads: str = "1",
            names: dict[str, str] | None = None,
            ylabel: str = "STS-B test Spearman × 100") -> tuple[dict, str]:
    """``(report, markdown)``: per model the norm / frequency-rank ρ (per language) and the top
    ``components`` principal components' ``words`` end words; with ``png``, the quality / speed
    plot of ``quality`` (``{spec: score}``) against the ``speed`` results at ``threads``."""
    report: dict = {"models": {}}
    lines = []
    if models:
        lines += ["| model | language | ρ(norm, rank) | ρ, top 1,000 words | mean norm by rank "
                  "decile (frequent → rare) |", "|---|---|---:|---:|---|"]
    for model in models:
        report["models"][model], rows = _norm_rows(model)
        lines += rows
    for model in models:
        comps = top_component_words(model, components, words)
        report["models"][model]["top_components"] = comps
        lines += _component_rows(model, comps)
    if png:
        if not speed or not quality:
            raise ValueError("the plot needs speed results and quality scores")
        speed = _speed_results(speed)
        points = plot_points(speed, quality, threads, names or {})
        first = speed["results"][0]
        title = (f"quality vs speed: {threads} thread{'s' if threads != '1' else ''}"
                 f", {first.get('machine', '')} with {first.get('cpu_count', '?')} CPUs")
        quality_speed_plot(points, png, ylabel=ylabel, title=title)
        report["plot"] = {"png": str(png), "threads": threads, "points": points}
    return report, "\n".join(lines)
