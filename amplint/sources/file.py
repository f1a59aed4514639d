"""A Python file (`.py`, `.pyi`) named by its path: read per PEP 263 (coding cookie, BOM), fixes written back
atomically in the file's own encoding (amplint/source.py)."""

from __future__ import annotations

from amplint.source import DEFAULT_MAX_FILE_SIZE, SourceText, read_source, write_atomically
from amplint.sources.base import Source


class FileSource(Source):
    writes = True

    def __init__(self, path: str, max_size: int = DEFAULT_MAX_FILE_SIZE) -> None:
        self.path = path
        self.max_size = max_size  # a larger file is not read (AMP901; `max-file-size` in the configuration)

    def read(self) -> SourceText:
        loaded = read_source(self.path, self.max_size)
        self.encoding = loaded.encoding
        return loaded

    def write(self, data: bytes, expected: bytes) -> None:
        write_atomically(self.path, data, expected)
