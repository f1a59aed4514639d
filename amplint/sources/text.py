"""Python handed over rather than read from a path: stdin's bytes (`amplint check -`), an editor's buffer (the
server), the file flake8 hands the plugin, the harness's programs. Nothing is written back: the fixed text (and,
for bytes, the fixed bytes in the input's own encoding) comes back in the outcome."""

from __future__ import annotations

from amplint.source import SourceText, decode_source
from amplint.sources.base import Source


class TextSource(Source):
    def __init__(self, path: str, text: str | None = None, raw: bytes | None = None, screened: bool = True,
                 line_noqa: bool = True) -> None:
        """Either `text` (already decoded) or `raw` (bytes, decoded per PEP 263) is given."""
        self.path = path
        self.text = text
        self.raw = raw
        self.screened = screened
        self.line_noqa = line_noqa

    def read(self) -> SourceText:
        if self.raw is not None:
            loaded = decode_source(self.raw)
            self.encoding = loaded.encoding
            return loaded
        return SourceText(self.text, "utf-8", None)
