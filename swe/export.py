"""Export a swe model as a model2vec or a sentence-transformers (``StaticEmbedding``) folder.

Both libraries run a Hugging Face ``tokenizers`` pipeline, then average the token rows and
L2-normalise. Our rule (``swe.model``: BlingFire words, exact then lowercased lookup, the
teacher-subword OOV rule, then with ``oov="prefix"`` the longest vocabulary prefix of at least
``PREFIX_MIN`` characters, punctuation skipped) becomes the closest ``tokenizer.json``:

* normaliser: drops our end marker ``MARK`` (U+E000) from the text; ``Lowercase`` when the model
  lowercases and every vocabulary word is lowercase (English builds); then ``MARK`` after every
  place where a word unit may end (after a run of word characters, after every other character,
  before ``n't``, inside ``cannot``), so that a token can tell a whole unit from a prefix;
* pre-tokeniser: a regex over the marked text that groups the marked pieces into BlingFire's
  word units (``do|n't``, ``it|'s``, ``I|'|m``, ``3.5``, ``1,000``, ``U.S.``, ``O'|Neil``,
  ``AT&T``, ``.com``, other punctuation one character at a time), then whitespace;
* model: ``WordPiece`` whose first pieces are each word's marked form (a whole unit, ``play``
  + ``MARK``) and, with ``oov="prefix"``, its marked form without the end marker (a proper
  prefix, words of at least ``PREFIX_MIN`` characters only); for a cased vocabulary of a model
  that lowercases, the capitalised and upper-case forms of its lowercase words too (our
  lowercased second lookup); ``##c`` continuation tokens for the characters after a prefix. A
  unit with no such first piece is ``[UNK]`` as a whole (WordPiece's rule), as swe skips it;
* a table: units of the shipped English sample (``swe/data/sample``) on which that greedy
  WordPiece still disagrees with swe (the teacher-subword rule, a short first piece, mixed case)
  get a whole-unit token of their own;
* rows: a token → row ``mapping`` into ``[zero row, our V vectors]`` (model2vec's vocabulary
  quantisation format, which sentence-transformers 6.2 folds in when loading); ``[UNK]``,
  punctuation words and continuation tokens use the zero row, which does not change the
  direction of a mean that is L2-normalised afterwards, as our skipped units do not.

Not everything can be expressed (the teacher's tokenisation of an unseen unit, every BlingFire
special case), so the export measures its agreement with swe on held-out lines of the sample,
returns it, prints it and records it in the folder's ``README.md``. Details and measured numbers:
docs/export.md. Torch-free: only numpy, safetensors, tokenizers.
"""

from __future__ import annotations

import json
import lzma
import os
import string
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from safetensors.numpy import save as st_save

from swe import storage
from swe.model import PREFIX_MIN, StaticModel
from swe.text import has_cjk, is_punctuation, words

__all__ = ["MARK", "SAMPLE", "TARGETS", "Agreement", "ExportArrays", "ExportError", "Exported",
           "agreement", "export", "export_arrays", "export_tokenizer"]

TARGETS = ("model2vec", "sentence-transformers")
UNK = "[UNK]"
PREFIX = "##"
#: Ends every word unit in the normalised text (a private-use character; removed from input).
MARK = "\ue000"
#: The shipped English sample: the table is built on its first lines, agreement measured on
#: its last ``CHECK_LINES`` lines.
SAMPLE = Path(__file__).resolve().parent / "data" / "sample" / "en_wikipedia_60k.txt.xz"
TABLE_LINES = 40_000
CHECK_LINES = 3_000
TABLE_MIN_COUNT = 2  # a unit seen fewer times in the table lines gets no token of its own
MAX_UNIT_CHARS = 1_000  # a longer marked unit is [UNK] (WordPiece's max_input_chars_per_word)

# Where a unit may end: after a run of word characters, after any other non-space character,
# before "n't" (do|n't), between "can" and "not".
BOUNDARY = r"(?<=\w)(?!\w)|(?<=[^\w\s])|(?i:(?<=\w)(?=n['’]t\b)|(?<=\bcan)(?=not\b))"
_M = MARK
_START = rf"(?<![^\s{_M}])"  # at the start of a word run
# BlingFire's word units over the marked text, most specific first.
UNIT_PATTERN = "|".join([
    rf"(?i:n{_M}['’]{_M}t{_M})",  # n't
    rf"(?<=\w{_M})['’]{_M}(?i:s|re|ve|ll|d){_M}",  # it|'s  we|'re  (but I|'|m)
    rf"{_START}\d+{_M}(?:\.{_M}\d+{_M})+",  # 3.5  12.03.2019
    rf"{_START}\d+{_M}(?:,{_M}\d{{3}}{_M})+",  # 1,000 (but 3|,|5)
    rf"{_START}\w{_M}(?:\.{_M}\w{_M})+(?:\.{_M}(?![\W]*$))?",  # U.S. e.g. (U.S|. at the end)
    rf"(?<!\w{_M})\.{_M}\w+{_M}",  # .com .5
    rf"{_START}\w+{_M}&{_M}\w+{_M}",  # AT&T
    rf"{_START}(?i:[djlot]|qu){_M}['’]{_M}(?!(?i:s|re|ve|ll|d){_M})(?=\w)",  # O'|Neil l'|homme
    rf"{_START}\w{_M}(?:\+{_M}\+{_M}|#{_M})",  # C++ C#
    rf"\w+{_M}",
    rf"[^\s{_M}]{_M}",
])
# Continuation characters beyond those of the vocabulary and the teacher's tokens.
_EXTRA_CHARS = (string.printable.strip() + "".join(map(chr, range(0xA1, 0x250)))
                + "".join(map(chr, range(0x370, 0x530))) + "".join(map(chr, range(0x2010, 0x2050))))


class ExportError(ValueError):
    """An export that cannot be written (bad target, non-empty output)."""


@dataclass
class Agreement:
    """Cosine between swe's and the export's sentence vectors on ``sentences`` texts."""

    source: str
    sentences: int
    mean: float
    min: float
    identical: float  # share of sentences with cosine >= 0.9999
    zero_mismatch: int  # sentences that are a zero vector on exactly one side
    not_measured: list[str] = field(default_factory=list)  # model languages the text is not in

    def line(self) -> str:
        """One line for the console."""
        note = (f"; not measured for {', '.join(self.not_measured)} (no sample shipped)"
                if self.not_measured else "")
        return (f"agreement with swe on {self.sentences:,} {self.source}: mean cosine "
                f"{self.mean:.4f}, min {self.min:.4f}, {100 * self.identical:.1f}% identical"
                f"{note}")


class ExportArrays(NamedTuple):
    """What an export writes: ``tokens`` (the tokenizer's vocabulary in id order), ``rows``
    (``[V + 1, d]`` float32: a zero row, then our words' vectors with punctuation zeroed),
    ``lowercase`` (whether the tokenizer lowercases), ``mapping`` (token id → row) and
    ``table`` (how many tokens the sample's disagreements added)."""

    tokens: list[str]
    rows: np.ndarray
    lowercase: bool
    mapping: np.ndarray
    table: int


class Exported(str):
    """The output path, with the :class:`Agreement` measured at export time as ``.agreement``."""

    agreement: Agreement | None = None


def export_tokenizer(tokens: list[str], lowercase: bool) -> Any:
    """A ``tokenizers.Tokenizer`` over ``tokens`` (``[UNK]`` first) with our normaliser and
    pre-tokeniser (module docstring)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token=UNK,
                                     continuing_subword_prefix=PREFIX,
                                     max_input_chars_per_word=MAX_UNIT_CHARS))
    steps = [normalizers.Replace(MARK, "")]
    if lowercase:
        steps.append(normalizers.Lowercase())
    steps.append(normalizers.Replace(Regex(BOUNDARY), MARK))
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(UNIT_PATTERN), "isolated"), pre_tokenizers.WhitespaceSplit()])
    return tok


def _case_variants(word: str) -> list[str]:
    """Forms of a lowercase word that swe's lowercased second lookup maps to it."""
    forms = {word[:1].upper() + word[1:], word.upper()}
    return [f for f in forms if f != word and f.lower() == word and not any(c.isspace() for c in f)]


def _charset(model: StaticModel) -> list[str]:
    chars = {c for w in model.words for c in w} | set(_EXTRA_CHARS)
    if model.tokenizer is not None:
        chars |= {c for t in model.tokenizer.get_vocab() for c in t}
    return sorted(c for c in chars if not c.isspace() and c != MARK)


def _teacher_initials(tokenizer: Any) -> set[str]:
    """The teacher's word-initial tokens without their marker (WordPiece, Metaspace)."""
    if tokenizer is None:
        return set()
    spec = json.loads(tokenizer.to_str())
    vocab = tokenizer.get_vocab()
    if spec["model"].get("type") == "WordPiece":
        cont = spec["model"].get("continuing_subword_prefix") or PREFIX
        return {t for t in vocab if not t.startswith(cont)}
    if "▁" in json.dumps(spec.get("pre_tokenizer")):
        return {t[1:] for t in vocab if t.startswith("▁") and len(t) > 1}
    return set()


OPT = {"short": True, "zero": False}


def _base_vocabulary(model: StaticModel, lowercase: bool) -> dict[str, int]:
    """Token → row (0: the zero row, 1 + i: word i) before the sample table."""
    norm = export_tokenizer([UNK], lowercase).normalizer
    vocab: dict[str, int] = {UNK: 0}
    prefixes = model.oov == "prefix"
    initials = _teacher_initials(model.tokenizer)
    forms: list[tuple[str, int]] = []
    for i, w in enumerate(model.words):
        if MARK in w:
            continue
        row = 0 if is_punctuation(w) else 1 + i
        forms.append((w, row))
    if model.lowercase and not lowercase:  # a cased vocabulary: add our lowercased lookup
        known = set(model.words)
        forms += [(f, row) for w, row in list(forms) if w == w.lower()
                  for f in _case_variants(w) if f not in known]
    for w, row in forms:  # vocabulary words first: they win over a variant of the same form
        marked = norm.normalize_str(w)
        vocab.setdefault(marked, row)
        if (prefixes and len(w) >= PREFIX_MIN or OPT["short"] and w in initials) \
                and marked.endswith(MARK):
            vocab.setdefault(marked[:-1], row)
    if OPT["zero"]:
        for t in initials:
            marked = norm.normalize_str(t)
            if marked.endswith(MARK):
                vocab.setdefault(marked[:-1], 0)
    for c in [*_charset(model), MARK]:
        vocab.setdefault(PREFIX + c, 0)
    return vocab


def _read_sample(lines: int, skip: int = 0) -> list[str]:
    with lzma.open(SAMPLE, "rt", encoding="utf-8") as f:
        out = [line.strip() for _, line in zip(range(skip + lines), f, strict=False)]
    return [s for s in out[skip:] if s]


def _check_lines() -> list[str]:
    with lzma.open(SAMPLE, "rt", encoding="utf-8") as f:
        out = [line.strip() for line in f]
    return [s for s in out[-CHECK_LINES:] if s]


def _table(model: StaticModel, vocab: dict[str, int], lowercase: bool, texts: list[str],
           min_count: int) -> dict[str, int]:
    """Whole-unit tokens for units of ``texts`` (seen ``min_count`` times or more) where the
    greedy WordPiece over ``vocab`` disagrees with swe: marked unit → swe's row."""
    counts = Counter(u for t in texts for u in words(t)
                     if not is_punctuation(u) and not has_cjk(u) and MARK not in u)
    tokens = list(vocab)  # token ids are insertion order; vocab's values are rows
    ids = {t: i for i, t in enumerate(tokens)}
    tok = export_tokenizer(tokens, lowercase)
    rows = [vocab[t] for t in tokens]
    norm, wordpiece = tok.normalizer, tok.model
    table: dict[str, int] = {}
    for unit, n in counts.items():
        if n < min_count:
            continue
        i = model._lookup(unit)
        ours = 0 if i < 0 else 1 + i
        marked = norm.normalize_str(unit)
        pieces = wordpiece.tokenize(marked)
        got = [rows[ids[p.value]] for p in pieces if p.value in ids]
        got = [r for r in got if r]
        if got != ([ours] if ours else []):
            table[marked] = ours
    return table


def export_arrays(model: StaticModel, table_lines: int = TABLE_LINES,
                  min_count: int = TABLE_MIN_COUNT) -> ExportArrays:
    """The exported vocabulary, rows and token → row mapping (module docstring); the table
    is built on the first ``table_lines`` lines of :data:`SAMPLE` (0: no table)."""
    lowercase = model.lowercase and all(w == w.lower() for w in model.words)
    vocab = _base_vocabulary(model, lowercase)
    table = (_table(model, vocab, lowercase, _read_sample(table_lines), min_count)
             if table_lines else {})
    vocab.update(table)
    rows = np.zeros((1 + len(model), model.dim), dtype=np.float32)
    rows[1:] = model.vectors
    for i, w in enumerate(model.words):
        if is_punctuation(w):
            rows[1 + i] = 0.0
    return ExportArrays(list(vocab), rows, lowercase,
                        np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab)), len(table))


def encode_like_export(tok: Any, mapping: np.ndarray, rows: np.ndarray,
                       texts: list[str]) -> np.ndarray:
    """What model2vec and sentence-transformers compute from the exported files: the
    L2-normalised mean of the mapped rows (zero vector when no token has a non-zero row)."""
    out = np.zeros((len(texts), rows.shape[1]), dtype=np.float32)
    for j, enc in enumerate(tok.encode_batch(texts, add_special_tokens=False)):
        r = mapping[np.asarray(enc.ids, dtype=np.int64)]
        r = r[r > 0]
        if r.size:
            s = rows[r].sum(axis=0)
            n = np.linalg.norm(s)
            if n > 0:
                out[j] = s / n
    return out


def agreement(model: StaticModel, arrays: ExportArrays, texts: list[str] | None = None,
              source: str | None = None) -> Agreement:
    """Cosine between ``model.encode`` and the exported files' sentence vectors on ``texts``
    (default: the last :data:`CHECK_LINES` lines of :data:`SAMPLE`, which the table never
    sees)."""
    if texts is None:
        texts = _check_lines()
        source = source or f"held-out lines of {SAMPLE.name} (English Wikipedia)"
    tok = export_tokenizer(arrays.tokens, arrays.lowercase)
    ours = model.encode(texts)
    theirs = encode_like_export(tok, arrays.mapping, arrays.rows, texts)
    a, b = np.linalg.norm(ours, axis=1) > 0, np.linalg.norm(theirs, axis=1) > 0
    cos = np.where(a & b, (ours * theirs).sum(1), np.where(a | b, 0.0, 1.0))
    return Agreement(source=source or "texts", sentences=len(texts), mean=float(cos.mean()),
                     min=float(cos.min()) if len(cos) else 1.0,
                     identical=float((cos >= 0.9999).mean()) if len(cos) else 1.0,
                     zero_mismatch=int((a != b).sum()),
                     not_measured=[c for c in model.languages if c != "en"])


def _check_out(out: str) -> None:
    fs, path = storage.filesystem(out)
    if fs.exists(path) and (not fs.isdir(path) or fs.ls(path)):
        raise ExportError(f"{out} exists and is not an empty directory; choose a new output "
                          f"path or remove it first")


def _tensors(arrays: ExportArrays) -> bytes:
    return st_save({"embeddings": arrays.rows, "mapping": arrays.mapping})


def _model2vec_files(model: StaticModel, tok_json: bytes, arrays: ExportArrays) -> dict:
    config = {"model_type": "model2vec", "architectures": ["StaticModel"],
              "tokenizer_name": model.provenance.get("teacher"), "apply_pca": model.dim,
              "hidden_dim": model.dim, "normalize": True, "max_length": None,
              "pooling": "mean", "embedding_dtype": "float32"}
    modules = [{"idx": 0, "name": "0", "path": ".",
                "type": "sentence_transformers.models.StaticEmbedding"},
               {"idx": 1, "name": "1", "path": "1_Normalize",
                "type": "sentence_transformers.models.Normalize"}]
    return {"model.safetensors": _tensors(arrays), "tokenizer.json": tok_json,
            "config.json": _json(config), "modules.json": _json(modules),
            "1_Normalize/config.json": _json({})}


def _st_files(tok_json: bytes, arrays: ExportArrays) -> dict[str, bytes]:
    modules = [{"idx": 0, "name": "0", "path": "0_StaticEmbedding",
                "type": "sentence_transformers.models.StaticEmbedding"},
               {"idx": 1, "name": "1", "path": "1_Normalize",
                "type": "sentence_transformers.models.Normalize"}]
    st_config = {"model_type": "SentenceTransformer", "prompts": {}, "default_prompt_name": None,
                 "similarity_fn_name": "cosine"}
    return {"0_StaticEmbedding/model.safetensors": _tensors(arrays),
            "0_StaticEmbedding/tokenizer.json": tok_json, "modules.json": _json(modules),
            "config_sentence_transformers.json": _json(st_config),
            "1_Normalize/config.json": _json({})}


def _card(model: StaticModel, to: str, arrays: ExportArrays, agree: Agreement | None) -> bytes:
    lines = [f"# swe model exported for {to}", "",
             f"A swe static word embedding model (V = {len(model):,} words, d = {model.dim}, "
             f"languages {', '.join(model.languages)}, teacher "
             f"`{model.provenance.get('teacher')}`) written by `swe export --to {to}`. Its "
             "`tokenizer.json` imitates swe's word rule (docs/export.md in swe).", "",
             "| | |", "|---|---|",
             f"| tokens | {len(arrays.tokens):,} ({arrays.table:,} from the sample table) |",
             f"| rows | {arrays.rows.shape[0]:,} (a zero row + the V word vectors) |",
             f"| lowercase normaliser | {arrays.lowercase} |", f"| oov rule | {model.oov} |", "",
             "## Agreement with swe", ""]
    if agree is None:
        lines.append("Not measured at export time.")
    else:
        lines += [f"Measured at export time on {agree.sentences:,} {agree.source}: the cosine "
                  "between each sentence's swe vector and this export's.", "",
                  "| mean cosine | min cosine | identical (cos ≥ 0.9999) | zero on one side only |",
                  "|---|---|---|---|",
                  f"| {agree.mean:.4f} | {agree.min:.4f} | {100 * agree.identical:.1f}% | "
                  f"{agree.zero_mismatch} |", ""]
        if agree.not_measured:
            lines.append(f"Not measured for {', '.join(agree.not_measured)}: swe ships no sample "
                         "text in that language.")
    lines += ["", "What cannot be expressed exactly: the teacher's own split of a word no sample "
              "unit showed (swe keeps the longest teacher-subword prefix that is a word; the "
              "export the longest word prefix), mixed-case forms other than Capitalised and "
              "UPPER, rare BlingFire word-splitting cases, and Chinese/Japanese runs.", ""]
    return "\n".join(lines).encode("utf-8")


def _json(obj: object) -> bytes:
    return json.dumps(obj, indent=2, ensure_ascii=False).encode("utf-8")


def export(model: str | os.PathLike | StaticModel, to: str, out: str | os.PathLike,
           report: Callable[[str], Any] | None = print, measure: bool = True,
           table_lines: int = TABLE_LINES) -> Exported:
    """Write ``model`` (a path or a loaded model) to ``out`` in the ``to`` library's format
    (``model2vec`` or ``sentence-transformers``); returns ``out`` as an :class:`Exported`
    string whose ``.agreement`` is the agreement with swe measured on the shipped sample
    (``measure=False``: none), which is also passed to ``report`` (default ``print``) and
    written to the folder's ``README.md``."""
    if to not in TARGETS:
        raise ExportError(f"unknown export target {to!r}; choose one of {', '.join(TARGETS)}")
    out = os.fspath(out)
    _check_out(out)
    if not isinstance(model, StaticModel):
        model = StaticModel.load(model)
    t0 = time.perf_counter()
    arrays = export_arrays(model, table_lines)
    agree = agreement(model, arrays) if measure else None
    tok_json = export_tokenizer(arrays.tokens, arrays.lowercase).to_str().encode("utf-8")
    files = (_model2vec_files(model, tok_json, arrays) if to == "model2vec"
             else _st_files(tok_json, arrays))
    files["README.md"] = _card(model, to, arrays, agree)
    for name, data in files.items():
        storage.write_bytes(storage.join(out, name), data)
    if report is not None and agree is not None:
        report(f"{agree.line()} ({time.perf_counter() - t0:.0f} s)")
    result = Exported(out)
    result.agreement = agree
    return result
