"""Reading source files as text and writing them back byte-faithfully (encoding, BOM, newlines)."""

from __future__ import annotations

import io
import os
import tempfile
import tokenize
from dataclasses import dataclass


class SourceError(Exception):
    """A file that cannot be read or decoded; the message is shown to the user."""


@dataclass
class SourceText:
    text: str
    encoding: str  # as detected; "utf-8-sig" means the file starts with a BOM
    raw: bytes

    def encode(self, text: str) -> bytes:
        return text.encode(self.encoding)


def decode_source(raw: bytes) -> SourceText:
    """Decode per PEP 263 (coding cookie, BOM), keeping newlines exactly as they are."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as error:  # unknown codec in the cookie, BOM/cookie conflict
        raise SourceError(f"cannot determine the encoding: {error}") from None
    try:
        text = raw.decode(encoding)
    except (UnicodeDecodeError, LookupError) as error:
        raise SourceError(f"cannot decode as {encoding}: {error}") from None
    return SourceText(text, encoding, raw)


def read_source(path: str) -> SourceText:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise SourceError(f"cannot read: {error.strerror or error}") from None
    return decode_source(raw)


def write_atomically(path: str, data: bytes, expected: bytes) -> None:
    """Replace `path` with `data` unless its content is no longer `expected` (changed since it was read).

    The new content goes to a temporary file in the same folder, then is renamed over the original, so a
    failed write leaves the original intact.
    """
    with open(path, "rb") as handle:
        if handle.read() != expected:
            raise SourceError("changed on disk since it was read; not overwritten")
    folder = os.path.dirname(os.path.abspath(path))
    mode = os.stat(path).st_mode
    descriptor, temporary = tempfile.mkstemp(prefix=".amplint-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
