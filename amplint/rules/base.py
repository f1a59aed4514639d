"""What a rule is: metadata, documentation (its docstring) and a check over ModuleFacts."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator

from amplint.lazy import libcst as cst

from amplint.diagnostics import Applicability, Severity
from amplint.facts import ModuleFacts
from amplint.facts.versions import TorchSupport

if TYPE_CHECKING:
    from amplint.rules.rewrite import Rewritten
    from amplint.rules.screen import Need

DOC_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety")
# What `amplint rule CODE` prints; `--long` (and the documentation site) add the rest: Fix safety and Limits.
SHORT_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead")


@dataclass
class FixPlan:
    """A fix as a rewrite of the module's tree; the engine turns it into text edits."""

    message: str
    rewrite: Callable[[], Rewritten | None]  # what the fix makes of the module; None when it cannot be built
    applicability: Applicability = Applicability.SAFE


@dataclass
class Finding:
    """One report. `message` says what is wrong, in the user's names, in about 100 characters (one line, whatever
    the output format); `help` says what to do. The measured consequences belong to the rule's docstring ("Why
    is this bad?", shown by `amplint rule CODE`), not here."""

    node: cst.CSTNode  # the reported range
    message: str
    fix: FixPlan | None = None
    help: str | None = None  # what to do; None: the fix's title, when there is a fix
    # Evidence at other places, each (where, text): `where` a node of this module, or (filename, line, column)
    # in another file of the project (1-based line and column); shown as `= note:` lines and SARIF
    # `relatedLocations`.
    notes: tuple[tuple[object, str], ...] = ()

    def help_line(self) -> str | None:
        if self.help is not None:
            return self.help
        return self.fix.message if self.fix is not None else None


class Rule:
    """Base class. Subclasses set `code`, `name`, `words` and write their docs in the docstring."""

    code: ClassVar[str]
    name: ClassVar[str]
    # Prefilter, stage 1 (amplint/prefilter.py): words one of which a file must contain (as plain substrings,
    # anywhere in the text) for this rule to possibly fire. None: no word filter, every file is considered.
    # Choose words that every spelling of what the rule looks for must contain, imports and aliases included.
    words: ClassVar[tuple[str, ...] | None] = None
    # Prefilter, stage 2: what must co-occur in a file for this rule to fire (amplint/rules/screen.py), asked of
    # the file's summary; None: words alone decide. `requires_across`: what must hold of the project seen from
    # the file for a finding here to come from other modules; None: no finding of the rule depends on them.
    requires: ClassVar[Need | None] = None
    requires_across: ClassVar[Need | None] = None
    min_torch: ClassVar[str | None] = None
    # The torch releases the linted code supports (set per run by amplint.selection): a fix writes only spellings
    # every one of them has. The default knows nothing and allows every spelling.
    torch: TorchSupport = TorchSupport()
    # What --fix can do for this rule's findings: "safe", "unsafe", "sometimes" (safe or unsafe depending on
    # the code), or "none". Shown in the README's rule table.
    fix: ClassVar[str] = "none"
    # The default level of the rule's findings (a rule file may write the value: `severity = "warning"`). An error
    # changes what training computes or makes it raise; a warning is harmless where it stands (a deprecated
    # spelling, needless work). `[tool.amplint.severity]` changes it per run (amplint/config.py).
    severity: ClassVar[Severity] = Severity.ERROR
    # An opt-in rule runs only where a selector names it by its code or name (`extend-select = ["AMP015"]`):
    # `ALL` and code prefixes (`AMP01`) do not enable it. For a contract stricter than what the code shows wrong.
    opt_in: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.severity = Severity(cls.severity)  # "warning" -> Severity.WARNING; a misspelt level fails at import

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:  # pragma: no cover - interface
        raise NotImplementedError

    @classmethod
    def maybe_applies(cls, summary) -> bool:
        """Prefilter, stage 2: can this rule fire on a file with this `amplint.index.summary.Summary`? Computed
        from `requires` (True when the rule declares nothing). Asked only when one of `words` is in the file,
        once with answers from the text alone, then with answers from the parsed tree."""
        return cls.requires is None or cls.requires.holds(summary)

    @classmethod
    def maybe_applies_across(cls, summary, view) -> bool:
        """Prefilter, across modules: can this rule fire on the file because of what other files of the project
        do (`view`: the project index seen from the file, `amplint.index.ModuleView`)? Computed from
        `requires_across`; asked only when one of `words` is in the file and `maybe_applies` said no."""
        return cls.requires_across is not None and cls.requires_across.holds(summary, view)

    @classmethod
    def headline(cls) -> str:
        """The first sentence of "What it does", on one line."""
        paragraph = []
        for line in cls.documentation().splitlines():
            if line.startswith("##"):
                if paragraph:
                    break
                continue
            if not line.strip():
                if paragraph:
                    break
                continue
            paragraph.append(line.strip())
        text = " ".join(paragraph)
        end = text.find(". ")
        return text if end == -1 else text[: end + 1]

    @classmethod
    def documentation(cls) -> str:
        """The whole documentation (the long form): every `## ` section of the docstring."""
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def short_documentation(cls) -> str:
        """The short form: the sections of SHORT_SECTIONS, in the docstring's order (Fix safety and Limits left
        out)."""
        parts = re.split(r"^(?=## )", cls.documentation(), flags=re.M)
        kept = [part.rstrip() for part in parts if part.startswith("## ") and
                part[3:].split("\n", 1)[0].strip() in SHORT_SECTIONS]
        return "\n\n".join(kept)


def replace_nodes(module: cst.Module, replacements: dict) -> Rewritten:
    """What a fix makes of the module: these nodes (by identity) replaced (see amplint/rules/rewrite.py)."""
    from amplint.rules.rewrite import Rewritten  # libcst's transformer and code generator, when a fix is built

    return Rewritten(module, replacements)
