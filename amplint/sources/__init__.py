"""The kinds of source a run reads, each a `Source` (amplint/sources/base.py) that the one pipeline
(amplint/pipeline.py) takes: a Python file (`file.py`), a notebook (`notebook.py`: its code cells as one program),
and Python handed over as text or bytes (`text.py`: stdin, an editor's buffer, flake8's file, the harness's
programs). A new kind of source is one more module here.

The notebook module is imported only when a notebook is met: a run over Python files never loads it.
"""

from __future__ import annotations

from amplint.source import DEFAULT_MAX_FILE_SIZE
from amplint.sources.base import Source
from amplint.sources.file import FileSource
from amplint.sources.text import TextSource

NOTEBOOK_SUFFIX = ".ipynb"


def open_path(path: str, max_size: int = DEFAULT_MAX_FILE_SIZE) -> Source:
    """The file at `path`: a notebook by its suffix, else Python."""
    if path.endswith(NOTEBOOK_SUFFIX):
        from amplint.sources.notebook import NotebookSource

        return NotebookSource(path, max_size=max_size)
    return FileSource(path, max_size)


def from_bytes(raw: bytes, name: str) -> Source:
    """Bytes handed over under `name` (stdin with `--stdin-filename`): a notebook's JSON by the name's suffix,
    else Python."""
    if name.endswith(NOTEBOOK_SUFFIX):
        from amplint.sources.notebook import NotebookSource

        return NotebookSource(name, raw=raw)
    return TextSource(name, raw=raw)


def from_text(text: str, name: str, screened: bool = True, line_noqa: bool = True) -> Source:
    """Python handed over as text under `name` (an editor's buffer, flake8's file, a harness program)."""
    return TextSource(name, text, screened=screened, line_noqa=line_noqa)
