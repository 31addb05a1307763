"""The README.md of a folder written by ``swe export``: what it is, and the agreement with swe
measured at export time (:mod:`swe.export`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swe.export import Agreement, ExportArrays
    from swe.model import StaticModel

__all__ = ["export_card"]


def export_card(model: StaticModel, to: str, arrays: ExportArrays,
                agree: Agreement | None) -> bytes:
    """The exported folder's README.md: what it is and the agreement measured."""
    library = "model2vec" if to == "model2vec" else "sentence-transformers"
    lines = ["---", f"library_name: {library}", "tags:", "- swe", "- static-embeddings", "---",
             "", f"# swe model exported for {to}", "",
             f"A swe static word embedding model (V = {len(model):,} words, d = {model.dim}, "
             f"languages {', '.join(model.languages)}, teacher "
             f"`{model.provenance.get('teacher')}`, out-of-vocabulary rule `{model.oov}`), "
             f"written by `swe export --to {to}`. Its `tokenizer.json` imitates swe's word "
             "rule (swe's docs/export.md).", "",
             "| | |", "|---|---|",
             f"| tokens | {len(arrays.tokens):,} ({arrays.table:,} of them from the sample "
             "table) |",
             f"| rows | {arrays.rows.shape[0]:,}: a zero row, then the V word vectors |",
             f"| normaliser | lowercase: {arrays.lowercase}, accents stripped: "
             f"{arrays.strip_accents} |", "", "## Agreement with swe", ""]
    if agree is None:
        lines.append("Not measured at export time.")
    else:
        lines += [f"Measured at export time on {agree.sentences:,} {agree.source} (cosine "
                  "between each text's swe vector and this export's):", "",
                  "| mean cosine | min cosine | identical (cosine ≥ 0.9999) | zero vector on "
                  "one side only |", "|---|---|---|---|",
                  f"| {agree.mean:.4f} | {agree.min:.4f} | {100 * agree.identical:.1f}% | "
                  f"{agree.zero_mismatch} |", ""]
        if agree.not_measured:
            lines += [f"Not measured for language {', '.join(agree.not_measured)}: swe ships "
                      "no sample text in it.", ""]
    lines += ["What the tokenizer cannot express exactly: the teacher's own split of a word that "
              "the sample did not show (imitated exactly for a WordPiece teacher's first "
              "subword, approximately for a sentencepiece one), mixed-case forms other than "
              "Capitalised and UPPER, rare BlingFire word-splitting cases, and "
              "Chinese/Japanese runs (swe splits them into teacher tokens).", ""]
    return "\n".join(lines).encode("utf-8")
