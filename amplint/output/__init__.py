"""Output formats: one module each, all rendering the same Diagnostic objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from amplint.diagnostics import Diagnostic


@dataclass
class Report:
    """Everything a format may show: the diagnostics (sorted) and the run's context."""

    diagnostics: list[Diagnostic]
    fixed: int = 0  # findings the fixes of this run took away (found before fixing minus remaining)
    unsafe_fixes: bool = False
    show_fixes: bool = False
    messages: list[str] = field(default_factory=list)  # notes about files, e.g. fixes refused
    rules: list = field(default_factory=list)  # the Rule classes that ran
    severities: dict = field(default_factory=dict)  # code -> Severity the configuration gave, where not the default
    summary: bool = True  # the human formats end with the totals (concise.summary); not with --quiet


def _formats() -> dict[str, Callable[[Report], str]]:
    """Imported on use so that `import amplint.output` (config, cli start-up) stays cheap."""
    from amplint.output import concise, full, github, gitlab, grouped, json_format, json_lines, junit, sarif

    return {
        "full": full.render,
        "concise": concise.render,
        "grouped": grouped.render,
        "json": json_format.render,
        "json-lines": json_lines.render,
        "github": github.render,
        "gitlab": gitlab.render,
        "sarif": sarif.render,
        "junit": junit.render,
    }


FORMAT_NAMES = ("full", "concise", "grouped", "json", "json-lines", "github", "gitlab", "sarif", "junit")


def render(name: str, report: Report) -> str:
    return _formats()[name](report)
