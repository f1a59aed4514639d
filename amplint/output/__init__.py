"""Output formats: one module each, all rendering the same Diagnostic objects."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    totals: bool = True  # the human formats end with the totals (concise.totals); not with --quiet
    docs_url: str | None = None  # the documentation site reports link to (`docs-url`); None: no links


# format name -> the module that renders it (imported on use: a run imports the one it prints)
_MODULES = {"full": "full", "concise": "concise", "grouped": "grouped", "json": "json_format",
            "json-lines": "json_lines", "github": "github", "gitlab": "gitlab", "sarif": "sarif", "junit": "junit"}


FORMAT_NAMES = tuple(_MODULES)


def render(name: str, report: Report) -> str:
    import importlib

    return importlib.import_module(f"amplint.output.{_MODULES[name]}").render(report)
