"""What running one source through the pipeline asks for (`Mode`) and what it gives (`FileOutcome`): shared by
the pipeline, the kinds of source and the entry points, which import this module, not each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from amplint.diagnostics import Diagnostic


@dataclass(frozen=True)
class Mode:
    fix: bool = False
    unsafe: bool = False
    diff: bool = False  # compute fixes, report them as a diff, write nothing


@dataclass
class FileOutcome:
    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    fixed: int = 0  # fixes applied (the file is written when there are any)
    removed: int = 0  # findings the fixes took away: found before minus remaining (what `Fixed N` counts)
    diff: str = ""
    fixed_text: str | None = None  # in a fix run: the source's text after it (as it was when nothing was fixed)
    output: bytes | None = None  # what `check - --fix` prints: the fixed source's bytes, else the input unchanged
    note: str | None = None  # what the user is told about this source (a fix refused, not written), without its path
    internal_error: bool = False
    applied: tuple[str, ...] = ()  # the codes of the fixes applied, in the order they were

    @property
    def message(self) -> str | None:
        """The note, said of this source: `path: note`."""
        return f"{self.path}: {self.note}" if self.note else None
