"""Reading source files as text and writing them back byte-faithfully (encoding, BOM, newlines)."""

from __future__ import annotations

import errno
import io
import os
import stat
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


CHANGED = "changed on disk while fixing; not overwritten"


class _KeepInode(Exception):
    """The replacement file cannot be given the original's owner or group, or made in its folder."""


def write_atomically(path: str, data: bytes, expected: bytes) -> None:
    """Replace the content of the file at `path` with `data` unless it is no longer `expected`.

    Nothing the user wrote may be lost, and the file stays the file it was:
    - a symlink is followed: the file it points to gets the new content, the link stays a link;
    - a read-only file (no write permission) is not written (SourceError says so);
    - a file with one link gets its new content in a temporary file in its own folder, given the file's owner,
      group and mode, then renamed over it, so a failed write leaves the original intact;
    - a file with several hard links, or whose owner or group the temporary file cannot be given (or whose
      folder is not writable), is written in place, which keeps its inode, links, owner and group;
    - just before the rename (or the in-place write) the file's size, mtime and inode are compared with what
      they were when its content was checked, then its content again: a file changed on disk meanwhile is not
      overwritten (SourceError, `CHANGED`).
    """
    target = os.path.realpath(path)
    info = os.stat(target)
    if not stat.S_ISREG(info.st_mode):
        raise SourceError("not a regular file; not overwritten")
    if is_read_only(target, info):
        raise SourceError("read-only file (no write permission); left as it was")
    if _read(target) != expected:
        raise SourceError(CHANGED)
    if info.st_nlink == 1:
        try:
            _replace(target, data, expected, info)
            return
        except _KeepInode:
            pass
    _write_in_place(target, data, expected, info)


def is_read_only(path: str, info: os.stat_result) -> bool:
    """No write permission: no write bit at all (even for root, who may write anyway), or none for this user."""
    return not info.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(path, os.W_OK)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _identity(info: os.stat_result) -> tuple[int, int, int, int]:
    return (info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev)


def _check_unchanged(target: str, expected: bytes, info: os.stat_result) -> None:
    """The file is still the one whose content was `expected`: size, mtime and inode first, then the bytes."""
    if _identity(os.stat(target)) != _identity(info) or _read(target) != expected:
        raise SourceError(CHANGED)


def _replace(target: str, data: bytes, expected: bytes, info: os.stat_result) -> None:
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=".amplint-", suffix=".tmp", dir=os.path.dirname(target))
    except PermissionError:
        raise _KeepInode from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        own = os.stat(temporary)
        if (own.st_uid, own.st_gid) != (info.st_uid, info.st_gid):
            try:
                os.chown(temporary, info.st_uid, info.st_gid)  # before chmod: chown clears set-id bits
            except (OSError, AttributeError):
                raise _KeepInode from None
        os.chmod(temporary, stat.S_IMODE(info.st_mode))
        _check_unchanged(target, expected, info)
        os.replace(temporary, target)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise


def _write_in_place(target: str, data: bytes, expected: bytes, info: os.stat_result) -> None:
    """Overwrite the file through its own inode; on a failed write the original bytes are put back."""
    with open(target, "r+b") as handle:
        if _identity(os.fstat(handle.fileno())) != _identity(info) or handle.read() != expected:
            raise SourceError(CHANGED)
        if len(data) > len(expected) and hasattr(os, "posix_fallocate"):
            try:
                os.posix_fallocate(handle.fileno(), 0, len(data))  # a full disk fails here, before any write
            except OSError as error:
                if error.errno == errno.ENOSPC:
                    raise
        handle.seek(0)
        try:
            handle.write(data)
            handle.truncate()
            handle.flush()
            os.fsync(handle.fileno())
        except OSError:
            handle.seek(0)
            handle.write(expected)
            handle.truncate()
            handle.flush()
            raise
