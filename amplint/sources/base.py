"""What every kind of source gives the pipeline (amplint/pipeline.py): its text, the Python program that text
is analysed as, the way from that program's findings and fixes back to the source, and where fixes go.

A source is read once into a `SourceText` (its text, encoding and bytes: amplint/source.py), then seen as a
*program*: the Python text the engine analyses, with the way back. For a Python file the program is the text
itself (`PythonProgram`); for a notebook it is the code cells joined, with diagnostics mapped back to cells
and a fixed program split back into the cells' sources (amplint/sources/notebook.py).
"""

from __future__ import annotations


from amplint.diagnostics import Diagnostic
from amplint.output.common import diff_path
from amplint.source import SourceText


class FixRefused(Exception):
    """A fixed program that cannot be put back into its source; the message says why (nothing is written)."""


class PythonProgram:
    """A Python text, analysed as it is: its findings and fixes need no mapping."""

    analysable = True  # a notebook without Python cells has nothing to analyse

    def __init__(self, text: str) -> None:
        self.text = text

    def skippable(self) -> bool:
        """May the screen's "no rule can fire here" stand? For a Python file it does: a syntax error in a file
        that no rule can fire on goes unreported."""
        return True

    def isolate(self, filename: str) -> bool:
        """After a syntax error, leave out the parts that do not parse, so that the rest is still analysed;
        whether any was left out. A Python file is one piece: a syntax error is its finding."""
        return False

    def map(self, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
        """The program's findings as the source's (rows of a notebook's cells)."""
        return diagnostics

    def content(self, fixed: str) -> str:
        """The source's text once the fixed program is put back (FixRefused when it cannot be)."""
        return fixed

    def diff(self, path: str, fixed: str) -> str:
        """The fixed program as a patch of the source."""
        return unified_diff(path, self.text, fixed)


def unified_diff(path: str, old: str, new: str) -> str:
    import difflib  # only a diff needs it

    return "".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=diff_path(f"a/{path.lstrip('/')}"), tofile=diff_path(f"b/{path.lstrip('/')}")))


class Source:
    """One input of a run. Subclasses say how it is read (`read`), what program its text is (`program`) and
    whether fixes are written back to it (`write`); what is alike for all lives in the pipeline."""

    path: str  # the name its findings are reported under
    raw: bytes | None = None  # the bytes it was handed over as (stdin): what `check - --fix` prints back unfixed
    writes = False  # fixes are written back where it was read from (a file: `write(data, expected)`); else handed back
    # The screen (amplint/prefilter.py) may spare it libcst: a text no enabled rule can fire on is not analysed,
    # so a syntax error in it goes unreported. Sources whose syntax errors must be seen are not screened.
    screened = True
    line_noqa = True  # `# noqa` comments are honoured here (flake8 applies its own)

    def screens(self, program) -> bool:
        """Is this program screened (see `screened`)? A source may screen a program whose skip it can check
        (`skippable`) even when its words alone decide nothing."""
        return self.screened

    def read(self) -> SourceText:
        """Its text; SourceError when it cannot be read or decoded (reported as AMP901)."""
        raise NotImplementedError

    def program(self, text: str) -> PythonProgram:
        """The program `text` is analysed as; SourceError when the text is not a source of this kind."""
        return PythonProgram(text)
