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

    def __init__(self, text: str, encoding: str | None = None) -> None:
        self.text = text
        self.encoding = encoding  # the file's, for a diff of its bytes (None: a text handed over as text)

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
        """The fixed program as a patch of the source's bytes (see `unified_diff`)."""
        return unified_diff(path, self.text, fixed, self.encoding)


NO_NEWLINE = "\\ No newline at end of file\n"


def patch_lines(text: str) -> list[str]:
    """The lines of `text` as `patch` and `git apply` read them: each ends at a `\\n`, which it keeps (with the
    `\\r` before it: a CRLF line is written back as it was); the last one has none when the text does not end
    with a newline. Nothing else ends a line: `str.splitlines` also splits at `\\r` alone, `\\f`, `\\v`,
    `\\x1c`-`\\x1e`, `\\x85`, U+2028 and U+2029, which would put one line of the file on several lines of the
    patch."""
    lines = text.split("\n")
    ends = [line + "\n" for line in lines[:-1]]
    return ends + [lines[-1]] if lines[-1] else ends


def as_bytes(text: str, encoding: str) -> str | None:
    """`text` as the bytes the file holds in its `encoding` (its BOM included), spelled as a str whose UTF-8
    sequences are characters and whose other bytes are surrogates (`surrogateescape`): writing it back with
    `encode("utf-8", "surrogateescape")` gives those bytes. None for an encoding that is not ASCII-compatible
    (lines could not be found in its bytes) or cannot encode the text."""
    try:
        if not "a\n".encode(encoding).endswith(b"a\n"):  # (utf-8-sig's BOM comes first)
            return None
        return text.encode(encoding).decode("utf-8", "surrogateescape")
    except (UnicodeError, LookupError):
        return None


def unified_diff(path: str, old: str, new: str, encoding: str | None = None, suffix: str = "") -> str:
    """A unified diff from `old` to `new` that `patch -p1` and `git apply` apply to the file and that leaves it
    byte for byte what `--fix` writes: lines as `patch_lines` finds them, in the file's `encoding` (with its
    BOM: `as_bytes`; print it with `encode("utf-8", "surrogateescape")`), and `\\ No newline at end of file`
    after a last line without one. `suffix`: what the header adds to the name (a notebook cell's `:cell 3`; the
    name is quoted only when the path itself must be)."""
    import difflib  # only a diff needs it

    name = path.lstrip("/")

    def header(side: str) -> str:
        plain = diff_path(f"{side}/{name}")
        return plain + suffix if plain == f"{side}/{name}" else diff_path(f"{side}/{name}{suffix}")

    if encoding is not None:
        old_bytes, new_bytes = as_bytes(old, encoding), as_bytes(new, encoding)
        if old_bytes is not None and new_bytes is not None:
            old, new = old_bytes, new_bytes
    chunks = []
    for line in difflib.unified_diff(patch_lines(old), patch_lines(new),
                                     fromfile=header("a"), tofile=header("b")):
        chunks.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE)
    return "".join(chunks)


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

    encoding: str | None = None  # as `read` found it (a diff shows the file's bytes)

    def program(self, text: str) -> PythonProgram:
        """The program `text` is analysed as; SourceError when the text is not a source of this kind."""
        return PythonProgram(text, self.encoding)
