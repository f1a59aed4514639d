"""Reading source files as text and writing them back byte-faithfully (encoding, BOM, newlines)."""

from __future__ import annotations

import errno
import io
import os
import stat
import tokenize
from dataclasses import dataclass


class SourceError(Exception):
    """A file that cannot be read or decoded; the message is shown to the user."""


@dataclass
class SourceText:
    text: str
    encoding: str  # as detected; "utf-8-sig" means the file starts with a BOM
    raw: bytes | None  # None for a text handed over as text (an editor's buffer): no bytes to write back

    def encode(self, text: str) -> bytes:
        return text.encode(self.encoding)


def decode_source(raw: bytes) -> SourceText:
    """Decode per PEP 263 (coding cookie, BOM), keeping newlines exactly as they are."""
    if b"\x00" in raw:  # no Python source holds a NUL byte (CPython refuses it); binary files do
        raise SourceError("binary or not Python source (it holds a NUL byte)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as error:  # unknown codec in the cookie, BOM/cookie conflict, bytes that are not UTF-8
        if "invalid or missing encoding declaration" in str(error):
            raise SourceError("binary or not Python source: cannot decode as UTF-8, and no coding declaration "
                              "says otherwise") from None
        raise SourceError(f"cannot determine the encoding: {error}") from None
    try:
        text = raw.decode(encoding)
    except (UnicodeDecodeError, LookupError) as error:
        raise SourceError(f"cannot decode as {encoding}: {error}") from None
    return SourceText(text, encoding, raw)


DEFAULT_MAX_FILE_SIZE = 10 * 1024 * 1024  # bytes; `max-file-size` in the configuration
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_BINARY", 0))
_SPECIAL_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                  (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def read_source(path: str, max_size: int = DEFAULT_MAX_FILE_SIZE) -> SourceText:
    """The decoded text of the regular file at `path` (see `read_bytes`)."""
    return decode_source(read_bytes(path, max_size))


def read_bytes(path: str | os.PathLike, max_size: int = DEFAULT_MAX_FILE_SIZE, follow: bool = True) -> bytes:
    """The bytes of the regular file at `path`, at most `max_size` of them; SourceError for anything else (with
    `follow=False`, a symlink too: the cache reads its own files so).

    Only a regular file has an end: a FIFO named `x.py` would block the run until something writes to it, a
    link to `/dev/zero` would be read until memory runs out. The path is checked before it is opened (opening a
    device can do something), opened without blocking (a FIFO does not wait for a writer) and checked again on
    the open descriptor (the path may have been replaced in between). At most `max_size + 1` bytes are read: a
    file that grows past the limit while it is read is refused too.
    """
    try:
        _check_regular(os.stat(path, follow_symlinks=follow), max_size)
        descriptor = os.open(path, _OPEN_FLAGS if follow else _OPEN_FLAGS | getattr(os, "O_NOFOLLOW", 0))
        try:
            info = os.fstat(descriptor)
            _check_regular(info, max_size)
            raw = _read_up_to(descriptor, max_size + 1, info.st_size)
        finally:
            os.close(descriptor)
    except OSError as error:
        raise SourceError(f"cannot read: {error.strerror or error}") from None
    if len(raw) > max_size:
        raise SourceError(_too_large(max_size))
    return raw


def _read_up_to(descriptor: int, limit: int, expected: int) -> bytes:
    """At most `limit` bytes, read in reads of the size the file had when it was opened (plus one, to see its
    end): a buffered `read(limit)` would allocate the whole limit for every small file."""
    parts: list[bytes] = []
    total = 0
    while total < limit:
        chunk = os.read(descriptor, min(limit - total, max(expected + 1 - total, 1 << 16)))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
    return b"".join(parts)


def _check_regular(info: os.stat_result, max_size: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _SPECIAL_KINDS if test(info.st_mode)), "a special file")
        raise SourceError(f"not a regular file ({kind}); not read")
    if info.st_size > max_size:
        raise SourceError(_too_large(max_size))


def _too_large(max_size: int) -> str:
    return f"larger than `max-file-size` ({max_size:,} bytes); not read (raise `max-file-size` to lint it)"


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
    import tempfile  # only a write needs it

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
        _copy_extended_attributes(target, temporary)
        _check_unchanged(target, expected, info)
        os.replace(temporary, target)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise


def _copy_extended_attributes(source: str, destination: str) -> None:
    """Give the temporary file the original's extended attributes (`user.*`, ACLs as `system.posix_acl_*`,
    security labels): a rename would otherwise drop them. Where one cannot be read or set (a file system without
    them, a namespace this user may not write), _KeepInode: the file is written in place, which keeps them all."""
    if not hasattr(os, "listxattr"):
        return
    try:
        names = os.listxattr(source)
    except OSError as error:
        if error.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return  # the file system has none to keep
        raise _KeepInode from None
    try:
        for name in names:
            value = os.getxattr(source, name)
            try:
                if os.getxattr(destination, name) == value:
                    continue  # given already (an inherited default ACL, a label set on creation)
            except OSError:
                pass
            os.setxattr(destination, name, value)
    except OSError:
        raise _KeepInode from None


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
