"""Export a swe model as a model2vec or a sentence-transformers (``StaticEmbedding``) folder.

Both libraries run a Hugging Face ``tokenizers`` pipeline, then average the token rows and
L2-normalise. The export writes our rule (``swe.model``) as that pipeline's ``tokenizer.json``:
a normaliser that marks where a word unit may end (:data:`MARK`), a regex pre-tokeniser giving
BlingFire's units, and a ``WordPiece`` model whose pieces are our words, their prefixes and the
teacher's first subwords; ``mapping`` sends each token to its row, with a zero row for what swe
skips. Every piece and why: docs/export.md. The teacher's split is only imitated, so every
export measures its agreement with swe on held-out lines of the sample, returns it, prints it
and records it in the folder's ``README.md``. Torch-free: numpy, safetensors and tokenizers.
"""

from __future__ import annotations

import json
import lzma
import os
import re
import time
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from safetensors.numpy import save as st_save

from swe import storage
from swe.artifacts import refuse_inside
from swe.export_card import export_card
from swe.model import PREFIX_MIN, StaticModel
from swe.modelfiles import write_new_folder
from swe.new_folder import holds_others_files, lease_new_folder
from swe.text import INVISIBLE, has_unspaced_script, is_punctuation, words

__all__ = ["CHECK_LINES", "MARK", "SAMPLE", "TARGETS", "Agreement", "ExportArrays", "ExportError",
           "Exported", "agreement", "check_lines", "encode_like_export", "export",
           "export_arrays", "export_tokenizer"]

TARGETS = ("model2vec", "sentence-transformers")
UNK = "[UNK]"
PREFIX = "##"
#: Ends every word unit in the normalised text; removed from the input first.
MARK = "\ue000"
#: The shipped English sample: the table is built on its first ``TABLE_LINES`` lines, the
#: agreement measured on its last ``CHECK_LINES`` lines.
SAMPLE = Path(__file__).resolve().parent / "data" / "sample" / "en_wikipedia_60k.txt.xz"
TABLE_LINES = 40_000
CHECK_LINES = 3_000
TABLE_MIN_COUNT = 2  # a unit seen fewer times in the table lines gets no token of its own
MAX_UNIT_CHARS = 1_000  # a longer marked unit is [UNK] (WordPiece's max_input_chars_per_word)

# Where a unit may end: after a run of word characters, after any other character, before
# "n't" (do|n't), between "can" and "not" (can|not).
BOUNDARY = r"(?<=\w)(?!\w)|(?<=[^\w\s])|(?i:(?<=\w)(?=n['’‘]t\b)|(?<=\bcan)(?=not\b))"
_M = MARK
_START = rf"(?<![^\s{_M}])"  # at the start of a run
_APOS = "['’‘]"
_CLITIC = rf"{_APOS}{_M}(?i:s|re|ve|ll|d){_M}"
_THOUSANDS, _DECIMALS = rf",{_M}\d{{3}}(?!\d)\w*{_M}", rf"\.{_M}\d\w*{_M}"
#: BlingFire's word units over the marked text, most specific first.
UNIT_PATTERN = "|".join([
    rf"(?i:n{_M}{_APOS}{_M}t{_M})",  # n't
    rf"(?<=\w{_M}){_CLITIC}",  # it|'s we|'re (but I|'|m, Corp|.|'|s)
    rf"{_START}\d+{_M}(?:(?:{_THOUSANDS})+(?:{_DECIMALS})*|(?:{_DECIMALS})+)",  # 9,837.94 3.5
    rf"{_START}\w{_M}(?:\.{_M}\w{_M})+(?:\.{_M}(?!\W*$))?",  # U.S. e.g. (U.S|. at the end)
    rf"(?<!\w{_M})\.{_M}\w+{_M}",  # .com .5
    rf"{_START}\w+{_M}&{_M}\w+{_M}",  # AT&T
    rf"{_START}(?i:[djlot]|qu){_M}['’]{_M}(?!{_CLITIC})(?=\w)",  # O'|Neil l'|homme
    rf"{_START}\w{_M}(?:\+{_M}\+{_M}|#{_M})",  # C++ C#
    rf"\w+{_M}",
    rf"[^\s{_M}]{_M}",
])
# Continuation characters beyond those of our words and of the teacher's subwords.
_EXTRA_CHARS = "".join(map(chr, [*range(0x21, 0x7F), *range(0xA1, 0x250), *range(0x370, 0x530),
                                 *range(0x2010, 0x2050)]))


class ExportError(ValueError):
    """An export that cannot be written (bad target, non-empty output)."""


@dataclass
class Agreement:
    """Cosine between swe's sentence vectors and the export's on ``sentences`` texts (a text
    that is a zero vector on one side only counts as cosine 0, on both sides as 1)."""

    source: str
    sentences: int
    mean: float
    min: float
    identical: float  # share of texts with cosine >= 0.9999
    zero_mismatch: int  # texts that are a zero vector on exactly one side
    not_measured: list[str] = field(default_factory=list)  # model languages the texts miss

    def line(self) -> str:
        """One line for the console."""
        note = (f"; not measured for language {', '.join(self.not_measured)} (swe ships no "
                f"sample text in it)" if self.not_measured else "")
        return (f"agreement with swe on {self.sentences:,} {self.source}: mean cosine "
                f"{self.mean:.4f}, min {self.min:.4f}, {100 * self.identical:.1f}% identical"
                f"{note}")


class ExportArrays(NamedTuple):
    """What an export writes: ``tokens`` (the tokenizer's vocabulary in id order), ``rows``
    (``[V + 1, d]`` float32: a zero row, then our words' vectors with punctuation zeroed),
    ``lowercase`` and ``strip_accents`` (the tokenizer's normaliser), ``mapping`` (token id →
    row) and ``table`` (how many tokens the sample table added)."""

    tokens: list[str]
    rows: np.ndarray
    lowercase: bool
    mapping: np.ndarray
    table: int = 0
    strip_accents: bool = False

    def tokenizer(self) -> Any:
        """The exported ``tokenizers.Tokenizer``."""
        return export_tokenizer(self.tokens, self.lowercase, self.strip_accents)


class Exported(str):
    """The output path; ``.agreement`` is the :class:`Agreement` measured at export time."""

    agreement: Agreement | None = None


def export_tokenizer(tokens: list[str], lowercase: bool, strip_accents: bool = False) -> Any:
    """A ``tokenizers.Tokenizer`` over ``tokens`` (``[UNK]`` first) with our normaliser and
    pre-tokeniser (module docstring)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token=UNK,
                                     continuing_subword_prefix=PREFIX,
                                     max_input_chars_per_word=MAX_UNIT_CHARS))
    steps = [normalizers.Replace(Regex(INVISIBLE), ""),  # dropped as swe.text.words drops them
             normalizers.Replace(MARK, "")]
    if lowercase:
        steps.append(normalizers.Lowercase())
    if strip_accents:
        steps += [normalizers.NFD(), normalizers.StripAccents(), normalizers.NFC()]
    steps.append(normalizers.Replace(Regex(BOUNDARY), MARK))
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(UNIT_PATTERN), "isolated"), pre_tokenizers.WhitespaceSplit()])
    return tok


def _strips_accents(model: StaticModel) -> bool:
    """Whether the teacher strips accents before its subwords (uncased BERT), and at most 1% of
    our words carry one (stripping merges ``café`` into ``cafe``)."""

    def strips(spec: Any) -> bool:
        if not isinstance(spec, dict):
            return False
        if spec.get("type") == "BertNormalizer":
            accents = spec.get("strip_accents")
            return bool(accents or (accents is None and spec.get("lowercase")))
        return spec.get("type") == "StripAccents" or any(map(strips, spec.get("normalizers") or []))

    if model.tokenizer is None:
        return False
    if not strips(json.loads(model.tokenizer.to_str()).get("normalizer")):
        return False
    return sum(unicodedata.normalize("NFD", w) != w for w in model.words) <= 0.01 * len(model)


def _case_variants(word: str) -> list[str]:
    """Forms of a lowercase word that swe's lowercased second lookup sends to it."""
    forms = {word[:1].upper() + word[1:], word.upper()}
    return sorted(f for f in forms if f != word and f.lower() == word
                  and not any(c.isspace() for c in f))


def _charset(model: StaticModel) -> list[str]:
    chars = {c for w in model.words for c in w} | set(_EXTRA_CHARS)
    if model.tokenizer is not None:
        chars |= {c for t in model.tokenizer.get_vocab() for c in t}
    return sorted(c for c in chars if not c.isspace() and c != MARK)


def _teacher_initials(tokenizer: Any) -> list[str]:
    """The teacher's word-initial subwords without their marker (WordPiece: those without
    ``##``; sentencepiece: those with ``▁``); none for other tokenizers."""
    if tokenizer is None:
        return []
    spec = json.loads(tokenizer.to_str())
    vocab = tokenizer.get_vocab()
    if spec["model"].get("type") == "WordPiece":
        cont = spec["model"].get("continuing_subword_prefix") or PREFIX
        return sorted(t for t in vocab if not t.startswith(cont))
    if "▁" in json.dumps(spec.get("pre_tokenizer"), ensure_ascii=False):
        return sorted(t[1:] for t in vocab if t.startswith("▁") and len(t) > 1)
    return []


def _row(model: StaticModel, form: str, prefixes: bool) -> int:
    """The row (0: none) swe gives ``form`` as a whole word, else (``prefixes``) its longest
    word prefix of at least ``PREFIX_MIN`` characters."""
    i = model._find(form)
    if i is None and prefixes:
        i = model._prefix(form)
    return 0 if i is None or is_punctuation(model.words[i]) else 1 + i


def _base_vocabulary(model: StaticModel, lowercase: bool, strip: bool) -> dict[str, int]:
    """Token → row (0: the zero row, 1 + i: word i), in token id order, before the table."""
    norm = export_tokenizer([UNK], lowercase, strip).normalizer
    prefixes = model.oov == "prefix"
    forms = [(w, 0 if is_punctuation(w) else 1 + i) for i, w in enumerate(model.words)
             if MARK not in w]
    if model.lowercase and not lowercase:  # a cased vocabulary: our lowercased second lookup
        known = set(model.words)
        forms += [(f, row) for w, row in list(forms) if w == w.lower()
                  for f in _case_variants(w) if f not in known]
    vocab: dict[str, int] = {UNK: 0}
    for w, row in forms:  # our words first: they win over a variant that normalises alike
        marked = norm.normalize_str(w)
        vocab.setdefault(marked, row)
        if prefixes and len(w) >= PREFIX_MIN and marked.endswith(MARK):
            vocab.setdefault(marked[:-1], row)
    # The teacher's word-initial subwords as prefixes, shortest first, each only where it
    # changes what the greedy match picks (its row differs from its longest prefix's).
    for t in sorted(_teacher_initials(model.tokenizer), key=len):
        key = norm.normalize_str(t)[:-1]
        if MARK in t or not key or key in vocab:
            continue
        row = _row(model, t, prefixes)
        have = next((vocab[key[:n]] for n in range(len(key) - 1, 0, -1) if key[:n] in vocab), 0)
        if row != have:
            vocab[key] = row
    for c in [*_charset(model), MARK]:
        vocab.setdefault(PREFIX + c, 0)
    return vocab


@lru_cache(maxsize=1)
def _sample() -> tuple[str, ...]:
    """The shipped sample's non-empty lines."""
    with lzma.open(SAMPLE, "rt", encoding="utf-8") as f:
        return tuple(s for s in (line.strip() for line in f) if s)


def check_lines() -> list[str]:
    """The last :data:`CHECK_LINES` lines of :data:`SAMPLE`: agreement is measured on them, the
    table never sees them."""
    return list(_sample()[-CHECK_LINES:])


@lru_cache(maxsize=4)
def _sample_units(lines: int) -> Counter:
    """Word units (no punctuation, no CJK) of the first ``lines`` sample lines, counted; never
    the :func:`check_lines`."""
    texts = _sample()[:max(0, min(lines, len(_sample()) - CHECK_LINES))]
    counts = Counter(u for t in texts for u in words(t))
    return Counter({u: n for u, n in counts.items()  # each distinct unit judged once
                    if not is_punctuation(u) and not has_unspaced_script(u) and MARK not in u})


def _table(model: StaticModel, vocab: dict[str, int], lowercase: bool, strip: bool,
           counts: Counter, min_count: int) -> dict[str, int]:
    """Whole-unit tokens for the units of ``counts`` (seen ``min_count`` times or more) on
    which the WordPiece over ``vocab`` disagrees with swe: marked unit → swe's row. Units that
    normalise alike (``café`` and ``cafe`` with accents stripped) get their majority's row."""
    tok = export_tokenizer(list(vocab), lowercase, strip)
    norm, wordpiece = tok.normalizer, tok.model
    keys: dict[str, dict[str, int]] = {}  # plain dicts: a Counter each cost a second here
    for unit, n in counts.items():
        keys.setdefault(norm.normalize_str(unit), {})[unit] = n
    table: dict[str, int] = {}
    for marked, units in keys.items():
        if sum(units.values()) < min_count or len(marked) > MAX_UNIT_CHARS:
            continue
        votes: dict[int, int] = {}
        for unit, n in units.items():
            i = model._lookup(unit)
            vote = 0 if i < 0 else 1 + i
            votes[vote] = votes.get(vote, 0) + n
        row = max(votes.items(), key=itemgetter(1))[0]  # the first most voted (most_common)
        got = [r for r in (vocab[p.value] for p in wordpiece.tokenize(marked)) if r]
        if got != ([row] if row else []):
            table[marked] = row
    return table


def export_arrays(model: StaticModel, table_lines: int = TABLE_LINES,
                  min_count: int = TABLE_MIN_COUNT) -> ExportArrays:
    """The exported tokens, rows and token → row mapping (module docstring); the table is
    built on the first ``table_lines`` lines of :data:`SAMPLE` (0: no table)."""
    lowercase = model.lowercase and all(w == w.lower() for w in model.words)
    strip = _strips_accents(model)
    vocab = _base_vocabulary(model, lowercase, strip)
    table = (_table(model, vocab, lowercase, strip, _sample_units(table_lines), min_count)
             if table_lines else {})
    vocab.update(table)
    rows = np.zeros((1 + len(model), model.dim), dtype=np.float32)
    rows[1:] = model.vectors
    rows[1:][[is_punctuation(w) for w in model.words]] = 0.0
    mapping = np.fromiter(vocab.values(), dtype=np.int32, count=len(vocab))
    return ExportArrays(list(vocab), rows, lowercase, mapping, len(table), strip)


def encode_like_export(arrays: ExportArrays, texts: list[str], tok: Any = None) -> np.ndarray:
    """What model2vec and sentence-transformers compute from the exported files: the
    L2-normalised mean of the mapped rows (a zero vector when every row is zero)."""
    tok = tok or arrays.tokenizer()
    out = np.zeros((len(texts), arrays.rows.shape[1]), dtype=np.float32)
    for j, enc in enumerate(tok.encode_batch(texts, add_special_tokens=False)):
        r = arrays.mapping[np.asarray(enc.ids, dtype=np.int64)]
        s = arrays.rows[r[r > 0]].sum(axis=0)
        n = np.linalg.norm(s)
        if n > 0:
            out[j] = s / n
    return out


def agreement(model: StaticModel, arrays: ExportArrays, texts: list[str] | None = None,
              source: str = "texts") -> Agreement:
    """Cosine between ``model.encode`` and :func:`encode_like_export` on ``texts`` (default:
    :func:`check_lines`, English)."""
    if texts is None:
        texts, source = check_lines(), f"held-out lines of the English sample {SAMPLE.name}"
    ours, theirs = model.encode(texts), encode_like_export(arrays, texts)
    a, b = np.linalg.norm(ours, axis=1) > 0, np.linalg.norm(theirs, axis=1) > 0
    cos = np.where(a & b, (ours * theirs).sum(1), np.where(a | b, 0.0, 1.0))
    if not len(cos):
        cos = np.ones(1)
    return Agreement(source=source, sentences=len(texts), mean=float(cos.mean()),
                     min=float(cos.min()), identical=float((cos >= 0.9999).mean()),
                     zero_mismatch=int((a != b).sum()),
                     not_measured=[c for c in model.languages if c != "en"])


def _check_out(out: str, model: object) -> str:
    """The output as the export may use it (:func:`storage.output_url`'s checks), refused when
    it overlaps the input model's folder or is not empty."""
    try:
        out = storage.output_url(out, "the output")
    except ValueError as e:
        raise ExportError(f"{e}; name a new folder") from None
    storage.refuse_file_output(out, "the output")
    if isinstance(model, str | os.PathLike) and storage.overlaps(os.fspath(model), out):
        raise ExportError(f"the output {out} overlaps the input model {os.fspath(model)}; "
                          "name a new folder outside it")
    refuse_inside(out, "the output")  # a ValueError, as ExportError is
    if holds_others_files(out):
        raise _not_empty(out)
    return out


def _not_empty(out: str) -> ExportError:
    return ExportError(f"{out} exists and is not an empty directory; choose a new output path "
                       "or remove it first")


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


def _json(obj: object) -> bytes:
    return json.dumps(obj, indent=2, ensure_ascii=False).encode("utf-8")


def export(model: str | os.PathLike | StaticModel, to: str, out: str | os.PathLike,
           report: Callable[[str], Any] | None = print, measure: bool = True,
           table_lines: int = TABLE_LINES) -> Exported:
    """Write ``model`` (a path or a loaded model) to ``out`` in the ``to`` library's format
    (``model2vec`` or ``sentence-transformers``); returns ``out`` as an :class:`Exported`
    string whose ``.agreement`` is the agreement with swe measured on held-out lines of the
    shipped sample (``measure=False``: not measured, ``None``). The agreement also goes to
    ``report`` (default ``print``; ``None``: silent) and into the folder's ``README.md``.
    ``table_lines``: sample lines the table is built on (0: no table)."""
    if to not in TARGETS:
        raise ExportError(f"unknown export target {to!r}; choose one of {', '.join(TARGETS)}")
    out = _check_out(os.fspath(out), model)
    if not isinstance(model, StaticModel):
        model = StaticModel.load(model)
    t0 = time.perf_counter()
    with lease_new_folder(out, f"export to {to}", _not_empty,
                          writes=[re.escape(name) for name in WRITES[to]]) as lease:
        agree = _write(model, to, out, table_lines, measure, lease.record_files)
    if report is not None and agree is not None:
        report(f"{agree.line()} (export took {time.perf_counter() - t0:.1f} s; "
               f"recorded in {storage.join(out, 'README.md')})")
    result = Exported(out)
    result.agreement = agree
    return result


def _write(model: StaticModel, to: str, out: str, table_lines: int, measure: bool,
           record: Callable[[dict[str, bytes]], None]) -> Agreement | None:
    """Export ``model`` into ``out``; the agreement measured (``None``: not measured).
    ``record`` is told every file's bytes before they are written (the lease keeps their
    checksums, by which a rerun knows a killed export's files)."""
    arrays = export_arrays(model, table_lines)
    agree = agreement(model, arrays) if measure else None
    tok_json = arrays.tokenizer().to_str().encode("utf-8")
    files = (_model2vec_files(model, tok_json, arrays) if to == "model2vec"
             else _st_files(tok_json, arrays))
    files["README.md"] = export_card(model, to, arrays, agree)
    assert set(files) == set(WRITES[to])
    record(files)
    entries = {n: files.pop(n) for n in ENTRY_FILES if n in files}
    # the entry files last: a folder cut short (a killed export) has none, so no library loads it
    write_new_folder(out, {**files, **entries})
    return agree


#: The files of each target's folder (recorded in the output's lease, so a rerun clears what a
#: killed export wrote), and the files a library opens first, written last.
WRITES = {"model2vec": ("model.safetensors", "tokenizer.json", "1_Normalize/config.json",
                        "README.md", "config.json", "modules.json"),
          "sentence-transformers": ("0_StaticEmbedding/model.safetensors",
                                    "0_StaticEmbedding/tokenizer.json", "1_Normalize/config.json",
                                    "README.md", "config_sentence_transformers.json",
                                    "modules.json")}
ENTRY_FILES = ("config_sentence_transformers.json", "config.json", "modules.json")
