"""paths -> files -> results: lint (or fix) each file with the rules that apply to it."""

from __future__ import annotations

import difflib
import functools

from amplint import rules as registry
from amplint.config import Settings
from amplint.engine import IO_ERROR, error_diagnostic, lint_text
from amplint.facts.versions import TorchSupport, rule_applies
from amplint.fixer import fix_text
from amplint.output.common import diff_path
from amplint.outcome import FileOutcome, Mode
from amplint.prefilter import prefilter_for
from amplint.rules.base import Rule
from amplint.source import DEFAULT_MAX_FILE_SIZE, SourceError, decode_source, read_source, write_atomically


_INSTANCES: dict[tuple[type[Rule], TorchSupport], Rule] = {}  # rules keep no state: one per rule and torch range


def rules_for(path: str, rule_classes: list[type[Rule]], settings: Settings) -> list[Rule]:
    return list(_rules(tuple(rule_classes), tuple(settings.ignored_for(path)), settings.target_torch_version,
                       getattr(settings, "torch_below", None)))


@functools.lru_cache(maxsize=256)
def _rules(rule_classes: tuple[type[Rule], ...], ignored_selectors: tuple[str, ...], target: str | None,
           below: str | None = None) -> list[Rule]:
    """The enabled rules minus per-file ignores and rules needing a newer torch than the target (asked for every
    file: computed once per distinct answer)."""
    ignored: set[type[Rule]] = set()
    for selector in ignored_selectors:
        ignored.update(registry.matching(selector))
    support = TorchSupport(target, below)  # which spellings the fixes may write (amplint/facts/versions.py)
    return [_INSTANCES.get((rule, support)) or _INSTANCES.setdefault((rule, support), _instance(rule, support))
            for rule in rule_classes if rule not in ignored and rule_applies(rule.min_torch, target)]


def _instance(rule: type[Rule], support: TorchSupport) -> Rule:
    instance = rule()
    instance.torch = support
    return instance


def unified_diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=diff_path(f"a/{path.lstrip('/')}"), tofile=diff_path(f"b/{path.lstrip('/')}")))


def process_text(text: str, path: str, rules: list[Rule], mode: Mode, prefilter: bool = True) -> FileOutcome:
    if prefilter:
        verdict, candidates = prefilter_for(rules).select(text)
        if verdict.skipped:  # no enabled rule can fire (amplint/prefilter.py)
            return FileOutcome(path, [], fixed_text=text if (mode.fix or mode.diff) else None)
    if not (mode.fix or mode.diff):
        if prefilter:  # only the rules that can fire here; a fix run keeps them all (a fix can wake another)
            rules = [rule for rule in rules if type(rule) in candidates]
        result = lint_text(text, path, rules)
        return FileOutcome(path, result.diagnostics, internal_error=any(d.code == "AMP902" for d in result.diagnostics))
    outcome = fix_text(text, path, rules, unsafe=mode.unsafe)
    file_outcome = FileOutcome(path, outcome.remaining, fixed=len(outcome.applied), removed=outcome.removed,
                               fixed_text=outcome.text,
                               message=f"{path}: {outcome.error}" if outcome.error else None,
                               internal_error=any(d.code == "AMP902" for d in outcome.remaining))
    if mode.diff and outcome.changed:
        file_outcome.diff = unified_diff(path, text, outcome.text)
        file_outcome.diagnostics = outcome.remaining if not outcome.applied else lint_text(text, path, rules).diagnostics
        file_outcome.fixed = file_outcome.removed = 0
    return file_outcome


def process_file(path: str, rules: list[Rule], mode: Mode, cache=None,
                 max_size: int = DEFAULT_MAX_FILE_SIZE) -> FileOutcome:
    """`max_size`: a larger file is not read (AMP901; `max-file-size` in the configuration)."""
    if path.endswith(".ipynb"):  # notebooks: code cells linted as one program (amplint/notebook.py)
        from amplint.notebook import process_notebook

        return process_notebook(path, rules, mode, cache, max_size)
    try:
        source = read_source(path, max_size)
    except SourceError as error:
        return FileOutcome(path, [error_diagnostic(IO_ERROR, path, str(error))])
    if cache is not None and not (mode.fix or mode.diff):  # amplint/cache.py: lint results only
        found = cache.lint(source.raw, source.text, rules, path, lambda: process_text(source.text, path, rules, mode).diagnostics)
        return FileOutcome(path, found, internal_error=any(d.code == "AMP902" for d in found))
    outcome = process_text(source.text, path, rules, mode)
    if mode.fix and not mode.diff and outcome.fixed:
        try:
            write_atomically(path, source.encode(outcome.fixed_text), source.raw)
        except (SourceError, OSError, UnicodeEncodeError) as error:
            original = process_text(source.text, path, rules, Mode())
            original.message = f"{path}: fixes not written: {getattr(error, 'strerror', None) or error}"
            return original
    return outcome


def process_stdin(raw: bytes, filename: str, rules: list[Rule], mode: Mode) -> FileOutcome:
    """Source read from stdin. With fixes, `output` is what an editor replaces its buffer with: the fixed source
    in the input's own encoding and BOM, and the input's bytes unchanged whenever nothing was fixed (it could
    not be decoded, does not parse, has nothing to fix, or the fix cannot be encoded)."""
    if filename.endswith(".ipynb"):
        from amplint.notebook import encode_notebook, process_notebook_bytes

        outcome = process_notebook_bytes(raw, filename, rules, mode)
        if outcome.fixed and outcome.fixed_text is not None:
            outcome.output = encode_notebook(outcome.fixed_text, raw)
        else:
            outcome.output = raw
        return outcome
    try:
        source = decode_source(raw)
    except SourceError as error:
        return FileOutcome(filename, [error_diagnostic(IO_ERROR, filename, str(error))], output=raw)
    outcome = process_text(source.text, filename, rules, mode)
    outcome.output = raw
    if outcome.fixed and outcome.fixed_text is not None and outcome.fixed_text != source.text:
        try:
            outcome.output = source.encode(outcome.fixed_text)
        except UnicodeEncodeError as error:
            original = process_text(source.text, filename, rules, Mode())
            original.message = f"{filename}: fixes not applied: cannot encode as {source.encoding}: {error.reason}"
            original.output = raw
            return original
    return outcome
