"""Reading input files, local or ``s3://``: their format and compression by name, paths, globs
and folders expanded into files (each once, regular files only), decompressed streams (a
truncated one is an error in every format), lines (``\\r`` too where asked) and what a corrupt
stream raises. Built on :mod:`swe.storage`."""

from __future__ import annotations

import io
import logging
import os
import stat
from collections.abc import Iterator
from typing import Any, BinaryIO

from swe.storage import data_path, filesystem, is_local, refuse_line_break

__all__ = ["check_path_text", "check_regular_file", "corrupt_file", "corrupt_stream",
           "expand_inputs", "input_format", "is_text_type", "iter_lines", "open_input",
           "peek_lines", "present", "refuse_binary", "refuse_parquet", "refuse_utf16"]

log = logging.getLogger("swe.inputs")

_COMPRESSION = {".gz": "gzip", ".xz": "xz", ".zst": "zstd", ".bz2": "bz2"}
_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl",
            ".json": "jsonl", ".txt": "text", ".text": "text"}



def _split_compression(path: str) -> tuple[str, str | None]:
    for ext, comp in _COMPRESSION.items():
        if path.endswith(ext):
            return path[: -len(ext)], comp
    return path, None


def input_format(path: str, fmt: str = "auto", flag: str = "--format") -> tuple[str, str | None]:
    """``(format, compression)`` of an input file; ``fmt`` overrides the extension. ``flag``:
    how the user sets it (the encoder's ``--format``, a build's ``corpus.<lang>.format``)."""
    stem, comp = _split_compression(path)
    if fmt != "auto":
        if fmt not in ("parquet", "jsonl", "text"):
            raise ValueError(f"unknown {flag} {fmt!r}; use auto, parquet, jsonl or text")
        return fmt, comp
    ext = os.path.splitext(stem)[1].lower()
    if ext not in _FORMATS:
        raise ValueError(f"cannot tell the format of {path} from its extension; set {flag} to "
                         "parquet, jsonl or text")
    return _FORMATS[ext], comp


#: The sample corpus that ships with the package (swe/data/sample/README.md).


def expand_inputs(patterns: list[str]) -> list[str]:
    """Files matched by paths, globs or directories (recursively; ``{data}/`` and ``{sample}/``
    resolved by :func:`data_path`), sorted; never empty. A file named twice (the same path, a
    symbolic or hard link to it, or a folder and a file in it) is read once, with a warning
    naming both; a local path that is not a regular file or folder (a named pipe, a device) is
    refused before anything reads it."""
    files: list[str] = []
    seen: dict[Any, str] = {}
    for given in patterns:
        for found in _matches(given):
            key = _identity(found)
            if key in seen:
                if (key, seen[key], found) not in _WARNED:  # once per process, not per stage
                    _WARNED.add((key, seen[key], found))
                    log.warning("%s is named twice among the inputs (also as %s); it is read "
                                "once", found, seen[key])
                continue
            seen[key] = found
            files.append(found)
    return files


def _identity(found: str) -> Any:
    """What makes two names one file: a local file's device and inode (a symbolic link, a
    hard link, another spelling of the path), or the URL."""
    if not is_local(found):
        return found
    st = os.stat(found.removeprefix("file://"))
    return (st.st_dev, st.st_ino)


#: The repeated inputs already warned about in this process (a build expands its inputs at
#: validation and again in its stages).
_WARNED: set[tuple[Any, str, str]] = set()


def present(paths: list[str]) -> list[str]:
    """The paths of ``paths`` that exist (``{data}/`` resolved): optional inputs."""
    out = []
    for given in paths:
        fs, path = filesystem(data_path(given))
        if fs.exists(path):
            out.append(given)
    return out


def check_path_text(given: str, what: str = "") -> None:
    """Refuse a path that is empty, blank, or holds a NUL byte or a line break (``what``: the
    option named)."""
    if not given.strip() or "\0" in given:
        raise ValueError(f"{what + ' ' if what else ''}{given!r} is not a path (empty, or "
                         "holding a NUL byte)")
    refuse_line_break(given, what)


def _matches(given: str) -> list[str]:
    """The files one path, glob or directory names, sorted."""
    check_path_text(given)
    pattern = data_path(given)
    hint = f" ({given}: set SWE_DATA to the data root)" if given.startswith("{data}/") else ""
    fs, path = filesystem(pattern)
    proto = "" if is_local(pattern) else pattern.split("://", 1)[0] + "://"
    if any(c in path for c in "*?["):
        found = sorted(fs.glob(path))
    elif fs.isdir(path):  # not what lies under a name starting "_" or "." (markers, receipts)
        found = sorted(p for p in fs.find(path) if not any(
            part.startswith(("_", ".")) for part in p[len(path.rstrip("/")):].split("/")))
    elif fs.exists(path):
        found = [path]
    elif is_local(pattern) and os.path.islink(path):
        raise FileNotFoundError(f"input {pattern} is a symbolic link to nothing (a link loop, or "
                                f"its target {os.readlink(path)} is gone): fix or remove it")
    else:
        raise FileNotFoundError(f"input not found: {pattern}{hint}")
    found = [p for p in found if not fs.isdir(p)]
    if not found:
        raise FileNotFoundError(f"no input files match {pattern}{hint}")
    if not proto:
        for p in found:
            check_regular_file(p)
    return [proto + p for p in found]


def check_regular_file(path: str) -> None:
    """Refuse a local path that is not a regular file (a named pipe or a device would block or
    never end when read), naming it."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = "a named pipe" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ValueError(f"{path} is {kind}: swe reads regular files and folders only")


def open_input(path: str) -> BinaryIO:
    """A binary stream of an input file (local or s3://), decompressed by its extension. A
    truncated zstd stream raises ``EOFError`` at its end, as gzip, xz and bz2 do (zstandard's
    own reader ends it silently, as if the file were shorter), and so does a 0-byte compressed
    file (gzip's and zstandard's readers read it as empty text)."""
    if is_local(path):
        check_regular_file(path.removeprefix("file://"))  # a pipe or a device: never ends
    fs, p = filesystem(path)
    _, comp = _split_compression(path)
    if comp is None:  # one open: the first bytes are checked, then read again from 0
        f = fs.open(p, "rb")
        try:
            _refuse_unnamed_compression(path, f.read(10))
            f.seek(0)
        except BaseException:
            f.close()
            raise
        return f
    if fs.size(p) == 0:  # gzip and zstd readers take 0 bytes for an empty stream
        raise EOFError("compressed file ended before the end-of-stream marker was reached "
                       "(it is 0 bytes: no compressed stream at all)")
    if comp == "zstd":
        return io.BufferedReader(_ZstdReader(fs.open(p, "rb")), 1 << 16)
    return fs.open(p, "rb", compression=comp)


#: The first bytes of each compressed format swe reads, and the extension that names it.
_MAGIC = ((b"\x1f\x8b", "gzip", ".gz"), (b"\xfd7zXZ\x00", "xz", ".xz"),
          (b"\x28\xb5\x2f\xfd", "zstd", ".zst"))


def _refuse_unnamed_compression(path: str, head: bytes) -> None:
    """Refuse a file named as plain text whose first bytes ``head`` are compressed data or a zip
    archive (read as text, it would be a line of invalid bytes, encoded or skipped without a
    word). No UTF-8 text starts so; bz2's ``BZh`` is checked with its block marker."""
    found = [(name, ext) for magic, name, ext in _MAGIC if head.startswith(magic)]
    if head[:3] == b"BZh" and head[4:10] == b"1AY&SY":
        found = [("bz2", ".bz2")]
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):  # a zip archive (or an empty one)
        raise ValueError(f"{path} is a zip archive, not a file swe reads: unzip it first "
                         f"(unzip {path}) and pass the files it holds")
    if found:
        name, ext = found[0]
        raise ValueError(f"{path} holds {name}-compressed data, but its name says it is not "
                         f"compressed: rename it to end in {ext}")


class _ZstdReader(io.RawIOBase):
    """Decompressed zstd frames of a raw stream; ``EOFError`` when it ends inside a frame."""

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self._zstd, self._raw = zstandard, raw
        self._obj = zstandard.ZstdDecompressor().decompressobj()
        self._out, self._pos, self._started = memoryview(b""), 0, False

    def readable(self) -> bool:
        """A reader."""
        return True

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` with decompressed bytes; 0 at the end of the last whole frame."""
        while self._pos == len(self._out):
            chunk = self._raw.read(1 << 16)
            if not chunk:
                if self._started and not self._obj.eof:
                    raise EOFError("compressed file ended before the end-of-stream marker was "
                                   "reached")
                return 0
            self._feed(chunk)
        n = min(len(buffer), len(self._out) - self._pos)  # no copy of what is left
        buffer[:n] = self._out[self._pos:self._pos + n]
        self._pos += n
        return n

    def _feed(self, chunk: bytes) -> None:
        out = []
        while chunk:
            if self._obj.eof:  # the next frame of a multi-frame file
                self._obj = self._zstd.ZstdDecompressor().decompressobj()
            self._started = True
            out.append(self._obj.decompress(chunk))
            chunk = self._obj.unused_data if self._obj.eof else b""
        self._out, self._pos = memoryview(b"".join(out)), 0

    def close(self) -> None:
        """Close the raw stream too."""
        self._raw.close()
        super().close()


def iter_lines(f: BinaryIO, chunk_size: int = 1 << 22,
               universal: bool = False) -> Iterator[bytes]:
    """Lines of a binary stream without their ``\\n``; works on any stream with ``read``
    (some decompressors cannot ``readline``). A last line without a newline still counts. A
    line longer than a chunk is joined once from its pieces (memory ~2x the line). With
    ``universal``, ``\\r\\n`` and a lone ``\\r`` end a line too (old Mac files; never for
    line-aligned pair files, where a stray ``\\r`` on one side would shift every pair)."""
    lines = _lines(f, chunk_size)
    return _universal(lines) if universal else lines


def _universal(lines: Iterator[bytes]) -> Iterator[bytes]:
    for line in lines:
        if b"\r" in line:
            yield from line.removesuffix(b"\r").split(b"\r")
        else:
            yield line


def _lines(f: BinaryIO, chunk_size: int) -> Iterator[bytes]:
    parts: list[bytes] = []
    while chunk := f.read(chunk_size):
        lines = chunk.split(b"\n")
        if len(lines) == 1:
            parts.append(chunk)
            continue
        parts.append(lines[0])
        yield b"".join(parts)
        yield from lines[1:-1]
        parts = [lines[-1]]
    if rest := b"".join(parts):
        yield rest


def peek_lines(path: str, limit: int = 2, flag: str = "--format") -> list[bytes]:
    """The first ``limit`` non-blank lines of a (possibly compressed) text file, reading no
    further than needed; a compressed file that is cut short or is not what its name says is a
    ``ValueError`` naming it (:func:`corrupt_stream`), and so is Parquet data or UTF-16 text
    (``flag``: the format's setting, for Parquet's message)."""
    out: list[bytes] = []
    try:
        with open_input(path) as f:
            for line in iter_lines(f, 1 << 16):
                if line.strip():
                    if not out:
                        refuse_parquet(path, line, flag)
                        refuse_utf16(path, line)
                        refuse_binary(path, line)
                    out.append(line.removeprefix(b"\xef\xbb\xbf") if not out else line)
                    if len(out) == limit:
                        break
    except Exception as e:
        if not corrupt_stream(e):
            raise
        raise corrupt_file(path, e) from None
    return out


def corrupt_file(path: str, e: BaseException) -> ValueError:
    """The one-line error for ``path``, whose reading raised ``e`` (:func:`corrupt_stream`)."""
    return ValueError(f"{path}: truncated or corrupt compressed file ({type(e).__name__}: {e}); "
                      "re-create or re-download it")


def refuse_parquet(path: str, head: bytes, flag: str = "--format") -> None:
    """Refuse, naming it, a file read as text (or JSONL) whose first bytes ``head`` are
    Parquet's: ``PAR1`` and a page header's first byte (a control byte: no text starts so).
    Read as text, its bytes would be a few rows of garbage, or a lone carriage return error.
    ``flag``: how the user sets the format."""
    if head.startswith(b"PAR1") and head[4:5] and head[4] < 0x20 and head[4:5] not in b"\t\n\r":
        fix = (f"set {flag} to parquet" if path.endswith(".parquet") else
               f"rename it to end in .parquet (or set {flag} to parquet)")
        raise ValueError(f"{path} holds Parquet data, not text: {fix}")


def refuse_utf16(path: str, head: bytes) -> None:
    """Refuse, naming it, a UTF-16 or UTF-32 text file: ``head`` (its first line) holds NUL
    bytes after such a byte-order mark, or is a quarter NUL bytes without one. Read as UTF-8 it
    would be valid text of NUL-separated letters: garbage vectors, and no error. (A line that
    merely starts with the mark's bytes is invalid UTF-8, counted as such.)"""
    first = head.split(b"\n", 1)[0]
    nul = first.count(b"\0")
    if (first.startswith((b"\xff\xfe", b"\xfe\xff")) and nul) or 0 < len(first) < 4 * nul:
        raise ValueError(f"{path} is UTF-16 or UTF-32 text, not UTF-8: convert it (e.g. "
                         f"{convert_command(path, 'UTF-16')}) and pass that instead")


def refuse_binary(path: str, head: bytes, lines: bool = False) -> None:
    """Refuse, naming it, a text input whose first line (``head``; with ``lines``, all of
    ``head``, line ends allowed) is not UTF-8 text: over 5% control bytes, or over 30% invalid
    UTF-8 (binary data, or a legacy encoding). Other checks would misjudge it: as old Mac line
    endings, say, or as garbage vectors."""
    text = (head if lines else head.split(b"\n", 1)[0])[:4096].decode("utf-8", errors="replace")
    if len(text) < 16:
        return
    controls = sum(c < " " and c not in "\t\r\f\v\n" for c in text)
    invalid = text.count("\ufffd")
    if controls > len(text) / 20 or invalid > len(text) * 0.3:
        where = "its first 4 KiB are" if lines else "its first line is"
        raise ValueError(f"{path} is not UTF-8 text: {where} {controls + invalid} of "
                         f"{len(text)} control bytes or invalid UTF-8 (binary data, or another "
                         f"encoding: convert it, e.g. {convert_command(path, 'LATIN1')})")


_DECOMPRESS = {".gz": "gzip", ".xz": "xz", ".zst": "zstd", ".bz2": "bzip2"}


def convert_command(path: str, source: str) -> str:
    """A shell command that writes ``path`` as UTF-8, from ``source`` encoding, into the current
    folder (not beside it: that may be an input folder the rerun would read it from too), under
    a name whose extension still names the format (decompressed first where it is compressed)."""
    stem, cat = path, ""
    for ext, tool in _DECOMPRESS.items():
        if path.endswith(ext):
            stem, cat = path.removesuffix(ext), f"{tool} -dc {path} | "
    base, dot, ext = os.path.basename(stem).rpartition(".")
    target = f"{base}.utf8.{ext}" if dot and base else f"{os.path.basename(stem)}.utf8.txt"
    return (f"{cat}iconv -f {source} -t UTF-8 > {target}" if cat
            else f"iconv -f {source} -t UTF-8 {path} > {target}")


def is_text_type(kind: Any) -> bool:
    """Whether an Arrow type holds text: string, large string, or a dictionary of them (what
    pandas writes for a categorical column)."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def corrupt_stream(e: BaseException) -> bool:
    """Whether ``e`` is what reading a truncated or corrupt compressed stream raises (gzip, xz,
    bz2, zstd; also data of another format under a compressed name)."""
    import gzip
    import lzma
    import zlib

    if isinstance(e, EOFError | lzma.LZMAError | zlib.error | gzip.BadGzipFile):
        return True
    if isinstance(e, OSError) and "Invalid data stream" in str(e):  # bz2
        return True
    return "zstd" in type(e).__name__.lower()
