"""What processing one source asks for (`Mode`) and what it gives (`FileOutcome`): shared by the runner and the
source kinds it dispatches to (amplint/notebook.py), which import this module, not each other."""

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
    fixed_text: str | None = None  # the fixed source
    output: bytes | None = None  # what `check - --fix` prints: the fixed source's bytes, else the input unchanged
    message: str | None = None
    internal_error: bool = False
