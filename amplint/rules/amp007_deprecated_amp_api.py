"""AMP007 deprecated-amp-api."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterator

from amplint.lazy import libcst as cst
from amplint import vocabulary as vocab
from amplint.facts.walk import walk
from amplint.lazy import visitor_class

from amplint.facts import ModuleFacts
from amplint.facts.names import (
    DEPRECATED_AMP, DEPRECATED_AMP_MODULES, PARTIAL, ImportBinding, code_words, dotted_name,
)
from amplint.index.summary import Summary, dotted
from amplint.facts.versions import AMP_DEPRECATED_SINCE, SPELLING_SINCE, TorchSupport, shown_floor
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask
from amplint.rules.scopes import snippet

# The legacy signatures (torch 1.10 to 2.13, measured): what a call may pass, by position and by keyword. A call
# that passes anything else, or one parameter twice, raises TypeError already: it is reported, never rewritten.
LEGACY_AUTOCAST_POSITIONS = (vocab.ENABLED, vocab.DTYPE, vocab.CACHE_ENABLED)
LEGACY_PARAMETERS = {
    vocab.AUTOCAST: LEGACY_AUTOCAST_POSITIONS,
    vocab.GRAD_SCALER: ("init_scale", "growth_factor", "backoff_factor", "growth_interval", vocab.ENABLED),
    vocab.CUSTOM_FWD: ("fwd",),  # custom_fwd(fwd=None, *, cast_inputs=None)
    vocab.CUSTOM_BWD: ("bwd",),
}
LEGACY_NAMES = tuple(LEGACY_PARAMETERS)  # the AMP names the legacy modules hold
LEGACY_KEYWORD_ONLY = {vocab.CUSTOM_FWD: (vocab.CAST_INPUTS,)}
# The dtype a legacy autocast passes when the call names none. `torch.amp.autocast(device)` without a dtype takes
# the current autocast dtype instead, which an enclosing region sets: inside `torch.autocast("cuda",
# dtype=torch.bfloat16)` a legacy `torch.cuda.amp.autocast()` computes in float16, the bare new spelling in
# bfloat16. The migration writes the legacy default so the region computes as before.
LEGACY_AUTOCAST_DTYPE = {"cuda": vocab.FLOAT16, "cpu": vocab.BFLOAT16}
# Words of an `if` test (names, strings, numbers: `code_words`) that make its branches a deliberate
# compatibility shim for old torch versions.
COMPAT_TEST = re.compile(r"hasattr|version|torch\.amp|\d+_\d+|\d+\.\d+")
# Handlers of a `try: <new spelling> except ...: <old spelling>` shim (a bare `except:` too).
COMPAT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError", "TypeError", "Exception"})


def _called_behind_a_name(summary) -> bool:
    """The screen's question for what `_aliases` and the star imports report: a call through a name that an
    assignment binds to a legacy API or module (either branch of `a if test else b`), or a bare call of an AMP
    name with a legacy module star-imported. A bare decorator through such a name is looked for in the text
    (`@name`): more files kept, none dropped."""
    legacy = (*DEPRECATED_AMP, *DEPRECATED_AMP_MODULES)

    def exact() -> bool:
        starred = set(LEGACY_NAMES) if summary.imported_modules & set(DEPRECATED_AMP_MODULES) else set()
        called = set(starred)  # names whose call may reach a legacy API
        for targets, value in summary.assignments:
            branches = [value]
            while branches:
                branch = branches.pop()
                if type(branch) is ast.IfExp:
                    branches += [branch.body, branch.orelse]
                elif summary.resolves(branch, legacy) or dotted(branch) in starred:
                    called |= targets
        for sites in summary.call_sites_by_name.values():
            for _, _, receiver, _, call in sites:
                if dotted(call.func) in called or receiver in called:
                    return True
                if any(dotted(arg) in called for arg in call.args) \
                        or any(dotted(keyword.value) in called for keyword in call.keywords):
                    return True  # handed on to a function that may call it
        return any(f"@{name}" in summary.text for name in called)

    return summary.ask(summary.has_token(vocab.AMP) and summary.has_token("cuda", "cpu"), exact)


class DeprecatedAmpApi(Rule):
    """## What it does
    Checks for the `torch.cuda.amp` / `torch.cpu.amp` spellings deprecated in torch 2.4. That is
    `torch.cuda.amp.autocast`, `torch.cpu.amp.autocast`,
    `torch.cuda.amp.GradScaler`, `torch.cpu.amp.GradScaler`, `torch.cuda.amp.custom_fwd` and
    `torch.cuda.amp.custom_bwd` (called, used as decorators, or wrapped in `functools.partial`), under every
    import spelling (`import torch as th`, `import torch.cuda.amp as amp`, `from torch.cuda import amp`), and for
    the `from torch.cuda.amp import ...` / `from torch.cpu.amp import ...` lines that import them. Also behind a
    name: an assignment that binds a legacy API or module (`autocast = torch.cuda.amp.autocast if args.amp else
    contextlib.suppress`, `amp_mod = torch.cuda.amp`) and a `from torch.cuda.amp import *`, each reported where
    the legacy spelling is written (the assignment, the star import) with the calls that go through it. A name
    handed on as an argument (`train_one_epoch(..., amp_autocast=amp_ctx)`) to a function of the project that
    calls the parameter (`with amp_autocast():`) is called through too.

    Applies to torch >= 1.6 (where these spellings appeared), unless every torch the project supports predates
    the warnings: a project whose requirements say `torch>=1.13,<2` is never warned, so it is not reported. A
    project that supports both old and new torch (`torch>=1.13`) is reported: its code warns on torch >= 2.4.

    ## Why is this bad?
    Every call of a deprecated spelling emits a `FutureWarning` (measured with torch 2.13:
    `` `torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', args...)` ``;
    the same for the other five names), floods logs once per training step when the region opens in the loop,
    and turns into an error in test suites run with `-W error`. The spellings are scheduled for removal.

    The migration is not a rename: the legacy `autocast` takes `enabled` as its *first positional* argument,
    while `torch.amp.autocast` takes the device, so `torch.cuda.amp.autocast(False)` must become
    `torch.amp.autocast("cuda", enabled=False)`; `torch.amp.GradScaler` takes the device first (a legacy
    positional `init_scale` moves one place right); `torch.amp.custom_fwd`/`custom_bwd` need
    `device_type="cuda"`.

    ## Example
    ```python
    import torch
    from torch.cuda.amp import GradScaler, autocast

    scaler = GradScaler(2.0**14)
    with autocast(use_amp):
        loss = model(x)
    ```

    ## Use instead
    ```python
    import torch
    from torch.amp import GradScaler, autocast

    scaler = GradScaler("cuda", 2.0**14)
    with autocast("cuda", enabled=use_amp, dtype=torch.float16):
        loss = model(x)
    ```

    ## Fix safety
    Safe: the new spelling builds an equal object from the same arguments (the legacy classes are thin subclasses
    that forward to it; measured with torch 2.13: the same device, dtype, enabled and cache flags for autocast, the
    same attributes and `state_dict()` for GradScaler, the same wrapped function for `custom_fwd`).

    - Each argument keeps its meaning: positional `enabled, dtype, cache_enabled` of autocast become keywords after
      the device; positional GradScaler arguments keep their order behind the device; `custom_fwd`/`custom_bwd` get
      `device_type=`. A legacy autocast relying on its default dtype gets it written out (`dtype=torch.float16` for
      CUDA, `torch.bfloat16` for CPU), a disabled one too: the bare new spelling would take an enclosing region's
      dtype instead (inside `torch.autocast("cuda", dtype=torch.bfloat16)`, the legacy call computes in float16).
    - One fix migrates the whole module: calls, decorators (`@custom_fwd` becomes `@custom_fwd(device_type="cuda")`),
      `functools.partial` wrappers, `isinstance` and annotation references to the legacy GradScaler, and the imports
      (`from torch.cuda.amp import autocast` becomes `from torch.amp import autocast`, `import torch.cuda.amp as amp`
      becomes `import torch.amp as amp`), keeping `import torch as th` aliases. A module alias bound once and read
      only to call its AMP names (`amp_mod = torch.cuda.amp`) is rebound to `torch.amp`.
    - It writes only spellings every torch the project supports has: the lowest one, from `target-torch-version`
      or the declared requirements (pyproject.toml, requirements*.txt, setup.cfg, setup.py, environment.yml,
      Pipfile), raised by what the module needs wherever it runs: a top-level, unguarded use of a newer API
      (`from torch.amp import GradScaler` shows torch >= 2.3, `torch.autocast` 1.10, `torch.amp` 1.12); a use
      inside a function, a condition or a `try` shows nothing. `torch.amp.GradScaler` needs torch 2.3 and `torch.amp.custom_fwd(device_type=...)` 2.4: below those
      the finding stays without a fix; autocast becomes `torch.autocast("cuda", ...)` below torch 2.0 and gets no
      fix below 1.10.
    - No fix, and the message says what to bind instead, where the new signature would change a use: an autocast
      passed around as a value, `*args`, a partial called with positional arguments, any other alias of a legacy
      name (through `Scaler = torch.cuda.amp.GradScaler`, `Scaler(2.0**14)` would pass the scale as the device), a
      module alias bound twice, in `a if test else b` or handed to a function, a star import, a name whose import
      also serves such a use. Nor where the call already raises TypeError (`autocast(True, enabled=flag)`, an
      unknown keyword), or where the default dtype cannot be written (no `import torch`; `**kwargs` that may hold
      a dtype).

    ## Limits
    Silent inside compatibility shims: `try: ... except ImportError:` handlers and `if` branches testing
    `hasattr`, a version, or `torch.amp` (in their code: a comment mentioning a version or an import makes no
    shim), and for names bound both to a legacy and to a `torch.amp` import.
    An import line is reported only when the module calls one of its names (importing alone warns nothing; a
    legacy class used only in `isinstance` is left alone); likewise a name bound to a legacy API or module, or a
    star import, is reported only when this module calls through it. A star import of a module other than
    `torch.cuda.amp`, `torch.cpu.amp` and `torch.amp` may rebind any name, so the names an earlier star import
    bound are no longer followed after it. Not followed: `torch` (or a legacy name) reached through a project
    module's star import (`from common import *` where `common.py` imports torch), which needs the project index,
    and aliases across modules.
    """

    code = "AMP007"
    name = "deprecated-amp-api"
    severity = "warning"  # a deprecated spelling: it warns and will break one day, it computes the same
    words = (vocab.AMP,)  # every path to torch.cuda.amp / torch.cpu.amp spells it
    # A finding needs a call, a decorator or a partial naming a deprecated API through the imports (an import or
    # a reference alone warns nothing), or a call through a name bound to one (an alias, a star import).
    requires = Ask(Summary.imports_module, vocab.TORCH) & (
        Ask(Summary.calls_api, *DEPRECATED_AMP, partial=True, decorator=True) | Ask(_called_behind_a_name))
    min_torch = "1.6"  # the legacy spellings appeared in torch 1.6
    fix = "safe"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        if not self.torch.reaches(AMP_DEPRECATED_SINCE):
            return  # every supported torch predates the warnings (`torch>=1.13,<2`): nothing ever warns
        scan = visitor_class(_Scan)(facts)
        walk(facts.module, scan)
        if not scan.sites and not scan.import_sites and not scan.star_sites and not scan.module_references:
            return
        aliases = _aliases(facts, scan)  # before the plan: a name bound to a legacy API is never rewritten
        # The declared floor, raised by what this module needs wherever it runs (`from torch.amp import
        # GradScaler` at its top: torch >= 2.3): the fix may write what the module already requires.
        plan = _Plan(facts, scan, self.torch.raised_to(shown_floor(facts)), aliases)
        fix = FixPlan("Migrate the deprecated AMP spellings of this module to `torch.amp`", plan.rewrite) \
            if plan.replacements else None
        findings: list[tuple[cst.CSTNode, str, FixPlan | None, str]] = []
        starred = plan.star_bound()
        for site in scan.sites:
            if site.skip or site.kind in ("reference", "base", "alias") or site.head in starred:
                continue  # references (isinstance, annotations, base classes) do not warn by themselves; aliases
                # and names from a star import are reported where the legacy spelling is written
            new_name, device = DEPRECATED_AMP[site.qualified]
            fixed = plan.fixed_sites.get(id(site))
            spelling = plan.spelling(new_name)
            use = f"use `{plan.render(fixed)}`" if fixed is not None else (
                f"use {_advice(spelling, device)}" if spelling is not None else "")
            why_not = plan.why_not(site) if fixed is None else None
            warned = _public(site.qualified)
            used = snippet(facts, site.report, 28)
            when = _when(site, scan)
            message = (f"`{warned}` is deprecated since torch 2.4 and {when}" if used.startswith(warned)
                       else f"`{used}` is the deprecated `{warned}` ({when})")
            advice = "; ".join(part for part in (use, why_not) if part) or \
                f"use `{_new_spelling(new_name, device)}`"
            if new_name == vocab.AUTOCAST and site.kind == "call" and _positional(site.node):
                advice += " (the legacy first positional argument is `enabled`, not the device)"
            findings.append((site.report, message, fix if fixed is not None else None, _sentence(advice)))
        aliases = [alias for alias in aliases if not alias.skipped(plan)]
        for alias in aliases:
            fixed = id(alias) in plan.fixed_aliases
            findings.append((alias.reference, _alias_message(facts, alias), fix if fixed else None,
                             _alias_advice(plan, alias)))
        warned = {site.head for site in scan.sites if not site.skip and site.kind in ("call", "decorator", "partial")}
        warned |= {(dotted_name(alias.reference) or "").split(".", 1)[0] for alias in aliases}
        for statement, names in scan.star_sites:
            uses = {name: [site for site in scan.sites if site.head == name and not site.skip
                           and site.kind in ("call", "decorator", "partial")] for name in names}
            names = [name for name in names if uses[name]]
            if names:
                nodes = sorted((site.node for name in names for site in uses[name]), key=facts.line_of)
                message = (f"`from {dotted_name(statement.module)} import *` binds deprecated "
                           f"{', '.join(f'`{name}`' for name in names)}: {_uses(facts, nodes)} "
                           f"{'warns' if len(nodes) == 1 else 'warn'}")
                advice = _import_advice(plan, scan, statement, names) + [
                    "no fix: a star import may bring other names the module relies on, so it is not rewritten"]
                findings.append((statement, message, None, _sentence("; ".join(advice))))
        for statement, names in scan.import_sites:
            names = [name for name in names if name in warned]  # an import alone warns nothing
            if not names:
                continue
            moved = [name for name in names if plan.moved_import(statement, name)]
            module = dotted_name(statement.module) or ""
            listed = ", ".join(f"`{scan.imported_as[(id(statement), name)]}`" for name in names)
            advice = _import_advice(plan, scan, statement, names)
            message = f"{listed} imported from `{module}`, deprecated since torch 2.4"
            findings.append((statement, message, fix if moved else None, _sentence("; ".join(advice))))
        for node, message, fix_plan, advice in findings:
            yield Finding(node, message, fix_plan, help=advice or None)


def _import_advice(plan: "_Plan", scan: "_Scan", statement, names: list[str]) -> list[str]:
    """Where each imported name's replacement lives at the project's oldest torch, and how to call it."""
    by_module: dict[str, list[str]] = {}  # module to import from -> the names that move there
    spellings: dict[str, list[str]] = {}  # module -> how to call its names
    missing = []
    for name in names:
        new_name, device = DEPRECATED_AMP[scan.qualified_of[(id(statement), name)]]
        target = plan.module_for(new_name)
        if target is None:
            missing.append(f"`torch.amp.{new_name}` exists from torch {SPELLING_SINCE[f'torch.amp.{new_name}']} on")
            continue
        by_module.setdefault(target, []).append(name)
        spelling = (f'`{name}("{device}", ...)`' if new_name in (vocab.AUTOCAST, vocab.GRAD_SCALER)
                    else f'`{name}(..., device_type="{device}")`')
        if spelling not in spellings.setdefault(target, []):
            spellings[target].append(spelling)
    advice = [f"import {'them' if len(by_module[target]) > 1 else 'it'} from `{target}` and pass the device: "
              f"{', '.join(calls)}" for target, calls in spellings.items()]
    if missing:
        advice.append(f"the project supports torch {plan.support.floor}: no replacement where {', '.join(missing)}")
    return advice


def _public(qualified: str) -> str:
    """`torch.cuda.amp.autocast_mode.autocast` -> `torch.cuda.amp.autocast` (the name the warning uses)."""
    new_name, device = DEPRECATED_AMP[qualified]
    return f"torch.{device}.amp.{new_name}"


def _sentence(text: str) -> str:
    """A help line starts as a sentence does."""
    return text[:1].upper() + text[1:]


def _advice(spelling: str, device: str) -> str:
    """How to call the replacement (`torch.amp.autocast`, or `torch.autocast` for an older oldest torch)."""
    if spelling.endswith((vocab.AUTOCAST, vocab.GRAD_SCALER)):
        return f"`{spelling}(\"{device}\", ...)` (keyword arguments for the legacy positional ones)"
    return f"`{spelling}(..., device_type=\"{device}\")`"


def _when(site: "_Site", scan: "_Scan") -> str:
    """When the deprecation warning is raised: a decorator, called or not (`@custom_fwd(cast_inputs=...)`), warns
    once, when it is applied to the function."""
    if site.kind == "decorator" or id(site.node) in scan.decorator_calls:
        return "warns when the function is defined"
    if site.kind == "partial":
        return "warns on each call of the partial"
    return "warns on each call"


def _new_spelling(new_name: str, device: str) -> str:
    if new_name in (vocab.AUTOCAST, vocab.GRAD_SCALER):
        return f"torch.amp.{new_name}('{device}', args...)"
    return f"torch.amp.{new_name}(args..., device_type='{device}')"


def _positional(call: cst.Call) -> bool:
    return any(arg.keyword is None and not arg.star for arg in call.args)


@dataclass(eq=False)
class _Site:
    kind: str  # "call" | "decorator" | "partial" | "reference" | "base" (a class's base) | "alias" (see _Alias)
    node: cst.CSTNode  # the Call (call, partial), the decorator expression, or the reference expression
    reference: cst.BaseExpression  # the dotted expression that names the deprecated API
    qualified: str
    head: str
    skip: bool = False  # inside a compatibility shim, or the name is ambiguous

    @property
    def report(self) -> cst.CSTNode:
        return self.reference if self.kind in ("partial", "reference") else self.node


@dataclass(eq=False)
class _Alias:
    """A name an assignment binds to a legacy API or module (`autocast = torch.cuda.amp.autocast if amp else
    contextlib.suppress`, `amp_mod = torch.cuda.amp`), with the calls that go through it: each warns."""

    reference: cst.BaseExpression  # where the legacy spelling is written: the value, or a branch of it
    target: str  # the name bound
    qualified: str  # what the reference names: a key of DEPRECATED_AMP, or of DEPRECATED_AMP_MODULES
    uses: list[tuple[cst.CSTNode, str]]  # (a call or decorator through the name, the legacy API it reaches)
    site: "_Site | None"  # the reference's site, for an API (a module has none)
    shimmed: bool  # inside a compatibility shim
    assignment: object  # the Assignment that binds it

    def skipped(self, plan: "_Plan") -> bool:
        """Inside a compatibility shim, or naming a legacy object through an ambiguous name (as its site)."""
        if self.site is not None:
            return self.site.skip
        return self.shimmed or (dotted_name(self.reference) or "").split(".", 1)[0] in plan.ambiguous


def _branches(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The expressions an assignment's value may evaluate to: both branches of `a if test else b`."""
    if isinstance(value, cst.IfExp):
        return _branches(value.body) + _branches(value.orelse)
    return [value]


def _aliases(facts: ModuleFacts, scan: "_Scan") -> list[_Alias]:
    """Names bound by an assignment to a legacy API or module, and called through (an alias never called warns
    nothing: silent). Their reference sites become "alias" sites, which no migration rewrites: a call through
    the name passes the legacy arguments (`autocast()`, `Scaler(2.0**14)`), which the new signature reads
    otherwise."""
    sites = {id(site.reference): site for site in scan.sites}
    aliases = []
    for assignment in facts.assignments:
        if len(assignment.targets) != 1:
            continue
        target = assignment.targets[0]
        for branch in _branches(assignment.value):
            qualified = facts.imports.qualify(branch)
            site = sites.get(id(branch))
            if site is None and id(branch) not in scan.module_references:
                continue
            uses = _uses_of(facts, assignment, target, qualified)
            if not uses:
                continue
            if site is not None:
                site.kind = "alias"
            aliases.append(_Alias(branch, target, qualified, uses, site, scan.module_references.get(id(branch), False),
                                  assignment))
    return aliases


def _uses_of(facts: ModuleFacts, assignment, target: str, qualified: str) -> list[tuple[cst.CSTNode, str]]:
    """The calls (and bare decorators) that reach a legacy API through the name `target` bound by
    `assignment`: `target(...)` for an API, `target.autocast(...)` for a module."""
    def reached(dotted: str | None) -> str | None:
        if dotted == target and qualified in DEPRECATED_AMP:
            return qualified
        if dotted is not None and qualified in DEPRECATED_AMP_MODULES and dotted.startswith(f"{target}."):
            api = f"{qualified}.{dotted[len(target) + 1:]}"
            return api if api in DEPRECATED_AMP else None
        return None

    def bound_here(frame) -> bool:
        return any(binding is assignment for binding in facts.bindings(target, frame))

    uses = []
    for call in facts.calls:
        api = reached(call.dotted)
        if api is not None and bound_here(call.frame):
            uses.append((call.node, api))
        elif qualified in DEPRECATED_AMP and bound_here(call.frame) and _hands_on(facts, call, target):
            uses.append((call.node, qualified))  # `train(..., amp_autocast=amp_ctx)` calls `amp_autocast()`
    for function in facts.functions:
        for decorator in function.decorators:
            api = reached(dotted_name(decorator.decorator))
            if api is not None and bound_here(function.frame.parent):
                uses.append((decorator.decorator, api))
    return uses


def _hands_on(facts: ModuleFacts, call, target: str) -> bool:
    """Does the call pass the name `target` (by position or keyword) to a function, of this module or another
    (through the project index), that calls the parameter receiving it (`with amp_autocast():`)?"""
    passed = [(position, arg.keyword.value if arg.keyword is not None else None)
              for position, arg in enumerate(call.node.args) if dotted_name(arg.value) == target and not arg.star]
    if not passed or call.dotted is None or (call.qualified or "").startswith("torch."):
        return False
    view = facts.project
    info = facts.function_info(call.frame)
    found = view.resolve(info.qualname if info else None, call.dotted)
    summary = view.function(found) if found is not None else None
    if summary is None:
        return False
    params = list(summary.params)
    if call.method is not None and params and "." in summary.qualname:
        params = params[1:]  # a method called on its object: the first parameter is the object
    called = {record.callee for record in summary.calls}
    for position, keyword in passed:
        name = keyword if keyword is not None else (params[position] if position < len(params) else None)
        if name is not None and name in summary.params and name in called:
            return True
    return False


def _uses(facts: ModuleFacts, nodes: list[cst.CSTNode]) -> str:
    """"`autocast()` (line 12)", or "`autocast()` (line 12) and 2 more"; a bare decorator as "`@name`"."""
    first = snippet(facts, nodes[0], 28)
    first = f"`{first if isinstance(nodes[0], cst.Call) else '@' + first}` (line {facts.line_of(nodes[0])})"
    return first if len(nodes) == 1 else f"{first} and {len(nodes) - 1} more"


def _warn(nodes: list[cst.CSTNode]) -> str:
    """When the uses warn: a call on each call, a bare decorator when its function is defined."""
    verb = "warns" if len(nodes) == 1 else "warn"
    if all(isinstance(node, cst.Call) for node in nodes):
        return f"{verb} on each call"
    if not any(isinstance(node, cst.Call) for node in nodes):
        return f"{verb} at definition"
    return f"{verb} on each call or definition"


def _alias_message(facts: ModuleFacts, alias: _Alias) -> str:
    nodes = [node for node, _ in alias.uses]
    calls, warns = _uses(facts, nodes), _warn(nodes)
    if alias.qualified in DEPRECATED_AMP_MODULES:
        return f"`{alias.target}` is the deprecated `{alias.qualified}`: {calls} {warns}"
    return f"`{alias.target}` is the deprecated `{_public(alias.qualified)}`: {calls} {warns}"


def _alias_advice(plan: "_Plan", alias: _Alias) -> str:
    """What to bind instead; no fix: each call through the name would have to change with it."""
    if alias.qualified in DEPRECATED_AMP_MODULES:
        device = DEPRECATED_AMP_MODULES[alias.qualified]
        missing = sorted({DEPRECATED_AMP[api][0] for _, api in alias.uses
                          if plan.spelling(DEPRECATED_AMP[api][0]) != f"torch.amp.{DEPRECATED_AMP[api][0]}"})
        if missing:
            return _sentence(f"the project supports torch {plan.support.floor}, which has no "
                             f"{', '.join(f'`torch.amp.{name}`' for name in missing)}: no replacement to bind")
        first = f"`{alias.target}.{DEPRECATED_AMP[alias.uses[0][1]][0]}(\"{device}\", ...)`"
        if id(alias) in plan.fixed_aliases:
            return _sentence(f"bind `torch.amp` instead and pass the device to each call through `{alias.target}` "
                             f"({first})")
        return _sentence(f"bind `torch.amp` instead and pass the device to each call through `{alias.target}` "
                         f"({first}); no fix: the name is bound more than once, read some other way, or a call "
                         f"cannot be migrated")
    new_name, device = DEPRECATED_AMP[alias.qualified]
    spelling = plan.spelling(new_name)
    if spelling is None:
        return _sentence(f"`torch.amp.{new_name}` exists from torch {SPELLING_SINCE[f'torch.amp.{new_name}']} on "
                         f"and the project supports torch {plan.support.floor}: no replacement to bind")
    if new_name in (vocab.AUTOCAST, vocab.GRAD_SCALER):
        extra = f", dtype=torch.{LEGACY_AUTOCAST_DTYPE[device]}" if new_name == vocab.AUTOCAST else ""
        bound = f'functools.partial({spelling}, "{device}"{extra})'
    else:
        bound = f'functools.partial({spelling}, device_type="{device}")'
    return _sentence(f"bind `{bound}` instead, and pass keyword arguments where a call through "
                     f"`{alias.target}` passes the legacy positional ones; no fix: every call through the name "
                     f"changes with it")


def _compat_test(test: cst.BaseExpression) -> bool:
    """Does an `if` test name a version, `hasattr` or `torch.amp` (in its code: a comment says nothing)?"""
    return any(COMPAT_TEST.search(word) for word in code_words(test))


def _compat_try(node: cst.Try) -> bool:
    """Does the body import (a statement, `importlib.import_module`, `__import__`) or name `torch.amp`, and a
    handler catch an import or attribute error (or everything)? Read from the code: a comment is no import."""
    imports = any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in _small_statements(node.body)) or any(
        "import" in word or vocab.TORCH_AMP in word for word in code_words(node.body))
    return imports and any(
        handler.type is None or {word.rsplit(".", 1)[-1] for word in code_words(handler.type)} & COMPAT_ERRORS
        for handler in node.handlers)


def _small_statements(block: cst.BaseSuite) -> Iterator[cst.CSTNode]:
    """The simple statements of a block and of the blocks inside it."""
    pending = [block]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.BaseSmallStatement):
            yield current
        elif not isinstance(current, cst.BaseExpression):
            pending.extend(current.children)


class _Scan:  # a libcst visitor once made one with amplint.lazy.visitor_class
    """References to deprecated AMP names (with their role), the imports that sit in compatibility shims, and
    name loads, in one walk. What each import binds is the facts layer's (`facts.imports`); this walk only adds,
    per name, its bindings in source order and whether a shim guards them."""

    def __init__(self, facts: ModuleFacts) -> None:
        super().__init__()
        self.facts = facts
        self.bindings: dict[str, list[ImportBinding]] = {}
        self.guarded: set[int] = set()  # ids of the import statements inside a compatibility shim
        self._by_statement: dict[int, list[ImportBinding]] = {}
        for records in facts.imports.records.values():
            for record in records:
                self._by_statement.setdefault(id(record.statement), []).append(record)
        self.sites: list[_Site] = []
        self.decorator_calls: set[int] = set()  # ids of the calls written as a decorator (`@custom_fwd(...)`)
        self.import_sites: list[tuple[cst.ImportFrom, list[str]]] = []
        self.star_sites: list[tuple[cst.ImportFrom, list[str]]] = []  # (star import, deprecated names it binds)
        self.module_references: dict[int, bool] = {}  # id of a name of a legacy module -> inside a shim
        self.imported_as: dict[tuple[int, str], str] = {}
        self.qualified_of: dict[tuple[int, str], str] = {}
        self.loads: dict[str, int] = {}  # local name -> how many times it is read (outside imports)
        self.consumed: set[int] = set()
        self.guards: list[bool] = []
        self.in_bases = False
        self.scope_depth = 0
        self.quotes = {'"': 0, "'": 0}

    # scopes and guards ------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for decorator in node.decorators:
            walk(decorator, self)
        walk(node.params, self)
        if node.returns is not None:
            walk(node.returns, self)
        self.scope_depth += 1
        walk(node.body, self)
        self.scope_depth -= 1
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        for decorator in node.decorators:
            walk(decorator, self)
        self.in_bases = True  # `class MyScaler(GradScaler)`: the new base class has another signature
        for arg in node.bases:
            walk(arg, self)
        self.in_bases = False
        self.scope_depth += 1
        walk(node.body, self)
        self.scope_depth -= 1
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        if node.annotation is not None:
            walk(node.annotation, self)
        if node.default is not None:
            walk(node.default, self)
        return False

    def visit_If(self, node: cst.If) -> None:
        self.guards.append(_compat_test(node.test))

    def leave_If(self, node: cst.If) -> None:
        self.guards.pop()

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        self._statements(node.body)
        return False

    def visit_Module(self, node: cst.Module) -> bool:
        self._statements(node.body)
        return False

    def _statements(self, statements) -> None:
        """After `if <new torch>: return ...`, the rest of the block is the old-torch fallback."""
        pushed = 0
        for statement in statements:
            walk(statement, self)
            if isinstance(statement, cst.If) and _compat_test(statement.test) \
                    and isinstance(statement.body, cst.IndentedBlock) and statement.body.body:
                last = statement.body.body[-1]
                if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], (cst.Return, cst.Raise)):
                    self.guards.append(True)
                    pushed += 1
        del self.guards[len(self.guards) - pushed:]

    def visit_Try(self, node: cst.Try) -> None:
        """`try: <torch.amp spelling or an import> except ImportError/AttributeError: <legacy>` is a shim."""
        self.guards.append(_compat_try(node))

    def leave_Try(self, node: cst.Try) -> None:
        self.guards.pop()

    @property
    def guard_depth(self) -> int:
        return sum(self.guards)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        quote = node.quote[-1:]
        if quote in self.quotes:
            self.quotes[quote] += 1

    # imports ----------------------------------------------------------------------------------------
    def _bind(self, node: cst.Import | cst.ImportFrom) -> list[ImportBinding]:
        """The bindings of one import statement (from the facts layer), noted in source order."""
        if self.guard_depth:
            self.guarded.add(id(node))
        records = self._by_statement.get(id(node), [])
        for record in records:
            self.bindings.setdefault(record.local, []).append(record)
        return records

    def visit_Import(self, node: cst.Import) -> bool:
        self._bind(node)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        deprecated = []
        for record in self._bind(node):
            if record.qualified in DEPRECATED_AMP and not self.guard_depth:
                deprecated.append(record.local)
                self.qualified_of[(id(node), record.local)] = record.qualified
                if record.alias is None:
                    continue  # a star import's name: reported with its statement
                name = dotted_name(record.alias.name)
                self.imported_as[(id(node), record.local)] = name if record.local == name else \
                    f"{name} as {record.local}"
        if deprecated:
            sites = self.star_sites if isinstance(node.names, cst.ImportStar) else self.import_sites
            sites.append((node, deprecated))
        return False

    # references -------------------------------------------------------------------------------------
    def _deprecated(self, node: cst.CSTNode) -> str | None:
        qualified = self.facts.imports.qualify(node)
        return qualified if qualified in DEPRECATED_AMP else None

    def _site(self, kind: str, node: cst.CSTNode, reference: cst.BaseExpression, qualified: str) -> None:
        self.consumed.add(id(reference))
        if kind == "reference" and self.in_bases:
            kind = "base"
        head = (dotted_name(reference) or "").split(".", 1)[0]
        self.sites.append(_Site(kind, node, reference, qualified, head, skip=self.guard_depth > 0))

    def visit_Decorator(self, node: cst.Decorator) -> None:
        expr = node.decorator
        if isinstance(expr, cst.Call):
            self.decorator_calls.add(id(expr))
        if isinstance(expr, (cst.Name, cst.Attribute)):
            qualified = self._deprecated(expr)
            if qualified is not None:
                self._site("decorator", expr, expr, qualified)

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self._deprecated(node.func)
        if qualified is not None:
            self._site("call", node, node.func, qualified)
            return
        if self.facts.imports.qualify(node.func) in PARTIAL and node.args and node.args[0].keyword is None:
            first = node.args[0].value
            qualified = self._deprecated(first)
            if qualified is not None:
                self._site("partial", node, first, qualified)

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)
        return False

    def _reference(self, node: cst.Attribute | cst.Name) -> None:
        if id(node) in self.consumed:
            return
        qualified = self.facts.imports.qualify(node)
        if qualified in DEPRECATED_AMP:
            self._site("reference", node, node, qualified)
        elif qualified in DEPRECATED_AMP_MODULES:
            self.module_references[id(node)] = self.guard_depth > 0

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self._reference(node)
        walk(node.value, self)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.loads[node.value] = self.loads.get(node.value, 0) + 1
        self._reference(node)


class _Plan:
    """The whole-module migration: which sites are rewritten, and how each import line changes."""

    def __init__(self, facts: ModuleFacts, scan: _Scan, support: TorchSupport = TorchSupport(),
                 aliases: list[_Alias] = ()) -> None:
        self.facts = facts
        self.scan = scan
        self.support = support  # the torch releases the code supports: only spellings they all have are written
        self.quote = "'" if scan.quotes["'"] > scan.quotes['"'] else '"'
        self.replacements: dict[cst.CSTNode, object] = {}
        self.fixed_sites: dict[int, cst.CSTNode] = {}
        self.moved: set[tuple[int, str]] = set()  # (id(import statement), local name) moved to torch.amp
        self.indent: cst.BaseParenthesizableWhitespace | None = None  # of the call being rewritten
        # import statement -> (its line, [(alias, "torch.amp" to move it there, or None to drop it)])
        self.import_changes: dict[cst.CSTNode, tuple[cst.SimpleStatementLine | None, list]] = {}
        self.fixed_aliases: set[int] = set()  # ids of the module aliases rebound to torch.amp
        self._mark_ambiguous()
        self.torch_name = self._torch_name()
        self._decide()
        for alias in aliases:
            self._decide_module_alias(alias)

    # decisions --------------------------------------------------------------------------------------
    def _mark_ambiguous(self) -> None:
        """A name bound by several imports (a compatibility shim), or reassigned, is left alone."""
        assigned = {target for a in self.facts.assignments for target in a.targets}
        defined = {f.qualname for f in self.facts.functions}
        for site in self.scan.sites:
            bindings = self.scan.bindings.get(site.head, [])
            targets = {b.qualified for b in bindings}
            guarded = any(id(b.statement) in self.scan.guarded
                          and (b.qualified in DEPRECATED_AMP or b.qualified in DEPRECATED_AMP_MODULES)
                          for b in bindings)
            if len(targets) > 1 or guarded or site.head in assigned | defined:
                site.skip = True
        self.ambiguous = ambiguous = {name for name, bindings in self.scan.bindings.items()
                                      if len({b.qualified for b in bindings}) > 1 or name in assigned | defined}
        self.scan.import_sites = [(statement, [n for n in names if n not in ambiguous])
                                  for statement, names in self.scan.import_sites]
        self.scan.import_sites = [(s, names) for s, names in self.scan.import_sites if names]

    def star_bound(self) -> set[str]:
        """The names some star import binds (`from torch.cuda.amp import *`)."""
        return {name for name, bindings in self.scan.bindings.items() if any(b.alias is None for b in bindings)}

    def _torch_name(self) -> str | None:
        names = [local for local, bindings in self.scan.bindings.items()
                 if len(bindings) >= 1 and all(b.qualified == "torch" and b.module_level for b in bindings)]
        return "torch" if "torch" in names else (sorted(names)[0] if names else None)

    def _decide(self) -> None:
        by_head: dict[str, list[_Site]] = {}
        for site in self.scan.sites:
            if not site.skip:
                by_head.setdefault(site.head, []).append(site)
        torch_name = self.torch_name
        starred = self.star_bound()
        for head, sites in by_head.items():
            binding = self.scan.bindings[head][0] if self.scan.bindings.get(head) else None
            if binding is None or head in starred:
                continue  # a star import's names: no safe rewrite (see the Fix safety section)
            if binding.qualified == "torch":
                self._rewrite_under(head, sites)
            elif binding.qualified in DEPRECATED_AMP:
                # `from torch.cuda.amp import autocast [as ac]`: keep the local name, move the import.
                module = self.module_for(DEPRECATED_AMP[binding.qualified][0])
                if module is not None and self._every_use_is_a_site(head, sites) and all(
                        self._convertible(s) for s in sites):
                    for site in sites:
                        self._rewrite(site, None)
                    for each in self.scan.bindings[head]:  # every import of the name (one per function, say)
                        self._move_import(each, module)
            elif binding.qualified in DEPRECATED_AMP_MODULES:
                # `import torch.cuda.amp as amp` / `from torch.cuda import amp`: rebind the alias to torch.amp.
                if self._every_use_is_a_site(head, sites) and all(self._convertible(s) for s in sites) and all(
                        dotted_name(s.reference).count(".") == 1 for s in sites) and all(
                        self.module_for(DEPRECATED_AMP[s.qualified][0]) == vocab.TORCH_AMP for s in sites):
                    for site in sites:
                        self._rewrite(site, None)
                    for each in self.scan.bindings[head]:
                        self._move_import(each, vocab.TORCH_AMP)
                elif torch_name is not None:
                    self._rewrite_under(torch_name, sites)
            elif torch_name is not None:
                self._rewrite_under(torch_name, sites)
                if self.scan.loads.get(head, 0) == len(sites) and all(id(s) in self.fixed_sites for s in sites):
                    for each in self.scan.bindings[head]:
                        self._drop_import(each)

    def _decide_module_alias(self, alias: _Alias) -> None:
        """`amp_mod = torch.cuda.amp`, bound once and read only to call its AMP names: rebind it to `torch.amp`
        and migrate each call, as `import torch.cuda.amp as amp` is. Any other alias keeps its spelling."""
        if alias.qualified not in DEPRECATED_AMP_MODULES or alias.skipped(self) or "." in alias.target:
            return
        if alias.assignment.value is not alias.reference or \
                sum(alias.target in a.targets for a in self.facts.assignments) != 1:
            return  # a branch of `a if test else b`, or a name bound more than once
        if self.scan.loads.get(alias.target, 0) != len(alias.uses) + 1:
            return  # read some other way too (passed on, printed): the rebinding would reach that read
        head = (dotted_name(alias.reference) or "").split(".", 1)[0]
        bindings = self.scan.bindings.get(head, [])
        if not isinstance(alias.reference, cst.Attribute) or not bindings or \
                any(b.qualified != "torch" for b in bindings):
            return  # `torch.cuda.amp` spelled through torch only: a from-imported module keeps its import
        sites = [_Site("call", node, node.func, api, alias.target) if isinstance(node, cst.Call)
                 else _Site("decorator", node, node, api, alias.target) for node, api in alias.uses]
        if not all(self._convertible(site) and self.module_for(DEPRECATED_AMP[site.qualified][0]) == vocab.TORCH_AMP
                   for site in sites):
            return
        for site in sites:
            self._rewrite(site, None)
        self.replacements[alias.reference] = cst.parse_expression(f"{head}.amp")
        self.fixed_aliases.add(id(alias))

    def _rewrite_under(self, torch_name: str, sites: list[_Site]) -> None:
        """Spell each site through the module's name for torch (`torch.amp.autocast`, `th.autocast`...)."""
        for site in sites:
            where = self.spelling(DEPRECATED_AMP[site.qualified][0])
            if where is not None:
                self._rewrite(site, f"{torch_name}.{where.removeprefix('torch.')}")

    # spellings at the project's oldest torch --------------------------------------------------------------
    def spelling(self, new_name: str) -> str | None:
        """The replacement every supported torch has: `torch.amp.<name>`, `torch.autocast` where the project
        supports torch older than `torch.amp.autocast`, or None (no replacement at the oldest torch)."""
        if self.support.has(f"torch.amp.{new_name}"):
            return f"torch.amp.{new_name}"
        if new_name == vocab.AUTOCAST and self.support.has(vocab.TORCH_AUTOCAST):
            return vocab.TORCH_AUTOCAST
        return None

    def module_for(self, new_name: str) -> str | None:
        """The module a from-imported name moves to (`torch.amp`, or `torch` for `autocast` before 2.0)."""
        where = self.spelling(new_name)
        return where.rsplit(".", 1)[0] if where is not None else None

    def why_not(self, site: _Site) -> str | None:
        """Why a site gets no fix, when the reason is worth telling (the floor, or a call that raises)."""
        new_name, device = DEPRECATED_AMP[site.qualified]
        if self.spelling(new_name) is None:
            since = SPELLING_SINCE[f"torch.amp.{new_name}"]
            return (f"`torch.amp.{new_name}` exists only from torch {since} on and the project supports torch "
                    f"{self.support.floor}: no fix (keep the legacy spelling behind a version check, or raise the "
                    f"oldest supported torch to {since})")
        if site.kind in ("call", "partial"):
            args = site.node.args[1:] if site.kind == "partial" else site.node.args
            twice = _passed_twice(new_name, args)
            if twice:
                return (f"the call passes `{twice}` twice (by position and by keyword), so it raises TypeError "
                        f"already: no fix")
            if _legacy_call_error(new_name, args):
                return "the call does not match the legacy signature (it raises TypeError already): no fix"
            if new_name == vocab.AUTOCAST and _needs_dtype(args) and self.torch_name is None:
                return (f"the migration must keep the legacy default `dtype=torch.{LEGACY_AUTOCAST_DTYPE[device]}` "
                        f"(without it an enclosing region's dtype applies) and the module has no `import torch`: "
                        f"no fix")
        if self._convertible(site) and self.scan.bindings.get(site.head) and \
                self.scan.bindings[site.head][0].qualified != "torch":
            return f"not every use of `{site.head}` in this module can be migrated, and they share its import: no fix"
        return None

    def _every_use_is_a_site(self, head: str, sites: list[_Site]) -> bool:
        return self.scan.loads.get(head, 0) == len(sites)

    def _convertible(self, site: _Site) -> bool:
        new_name = DEPRECATED_AMP[site.qualified][0]
        if site.kind == "reference":
            return new_name == vocab.GRAD_SCALER  # isinstance()/annotations: the base class accepts both
        if site.kind in ("base", "alias"):
            return False
        if site.kind == "decorator":
            return new_name in (vocab.CUSTOM_FWD, vocab.CUSTOM_BWD)
        args = site.node.args[1:] if site.kind == "partial" else site.node.args
        if _legacy_call_error(new_name, args):
            return False  # the call raises TypeError as written: report it, change nothing
        if new_name == vocab.AUTOCAST:
            if any(arg.star == "*" for arg in args):
                return False
            if _needs_dtype(args) and (self.torch_name is None or any(arg.star == "**" for arg in args)):
                return False  # the legacy default dtype cannot be written (no name for torch; `**` may hold one)
            return site.kind != "partial" or self._partial_called_with_keywords_only(site)
        if new_name == vocab.GRAD_SCALER:
            return True
        return not any(arg.star == "**" for arg in args)

    def _partial_called_with_keywords_only(self, site: _Site) -> bool:
        bound = [a for a in self.facts.assignments if a.value is site.node and len(a.targets) == 1]
        if not bound:
            return False
        name = bound[0].targets[0]
        return all(not _positional(call.node) and not any(arg.star == "*" for arg in call.node.args)
                   for call in self.facts.calls if call.dotted == name)

    # rewrites ---------------------------------------------------------------------------------------
    def _string(self, device: str) -> cst.SimpleString:
        return cst.SimpleString(f"{self.quote}{device}{self.quote}")

    def _rewrite(self, site: _Site, new_func: str | None) -> None:
        if not self._convertible(site):
            return
        new_name, device = DEPRECATED_AMP[site.qualified]
        func = cst.parse_expression(new_func) if new_func is not None else None
        if site.kind == "reference":
            if func is None:
                return  # a from-imported GradScaler name stays as it is; only its import moves
            self.replacements[site.node] = func
            self.fixed_sites[id(site)] = func
            return
        if site.kind == "decorator":
            call = cst.Call(func=func or site.node, args=[self._keyword(vocab.DEVICE_TYPE, device)])
            self.replacements[site.node] = call
            self.fixed_sites[id(site)] = call
            return

        def convert(args: list[cst.Arg]) -> list[cst.Arg]:
            if new_name == vocab.AUTOCAST:
                dtype = None
                if _needs_dtype(args):
                    dtype = cst.Arg(cst.parse_expression(f"{self.torch_name}.{LEGACY_AUTOCAST_DTYPE[device]}"),
                                    keyword=cst.Name(vocab.DTYPE), equal=_equal())
                return _autocast_args(args, self._string(device), self.indent, dtype)
            if new_name == vocab.GRAD_SCALER:
                return _insert_first(args, cst.Arg(self._string(device)), self.indent)
            return _append(args, self._keyword(vocab.DEVICE_TYPE, device), self.indent)

        if site.kind == "call":
            def rebuild(updated: cst.Call) -> cst.Call:
                self.indent = updated.whitespace_before_args
                return updated.with_changes(func=func or updated.func, args=convert(list(updated.args)))

            self.replacements[site.node] = rebuild
            self.fixed_sites[id(site)] = rebuild(site.node)
        else:  # partial(<deprecated>, ...)
            def rebuild(updated: cst.Call) -> cst.Call:
                self.indent = updated.whitespace_before_args
                first, *rest = updated.args
                first = first.with_changes(value=func) if func is not None else first
                converted = convert(rest)
                if converted and first.comma is cst.MaybeSentinel.DEFAULT:
                    first = first.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                return updated.with_changes(args=[first, *converted])

            self.replacements[site.node] = rebuild
            self.fixed_sites[id(site)] = rebuild(site.node)

    def _keyword(self, keyword: str, device: str) -> cst.Arg:
        return cst.Arg(self._string(device), keyword=cst.Name(keyword), equal=_equal())

    def _move_import(self, binding: ImportBinding, target_module: str) -> None:
        self.moved.add((id(binding.statement), binding.local))
        self._statement_change(binding, target_module)

    def _drop_import(self, binding: ImportBinding) -> None:
        self._statement_change(binding, None)

    def _statement_change(self, binding: ImportBinding, target_module: str | None) -> None:
        """Queue moving (or dropping) one alias of an import statement; applied per statement in rewrite()."""
        entry = self.import_changes.setdefault(binding.statement, (binding.line, []))
        entry[1].append((binding.alias, target_module))

    def moved_import(self, statement: cst.ImportFrom, local: str) -> bool:
        return (id(statement), local) in self.moved

    def render(self, node: cst.CSTNode) -> str:
        text = " ".join(cst.Module(body=[]).code_for_node(node).split())
        return text if len(text) <= 70 else text[:67] + "..."

    def rewrite(self) -> cst.Module:
        replacements = dict(self.replacements)
        for statement, (line, changes) in self.import_changes.items():
            _import_rewrite(statement, line, changes, replacements)
        return replace_nodes(self.facts.module, replacements)


def _equal() -> cst.AssignEqual:
    """`=` of a keyword argument, without spaces."""
    return cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def _autocast_args(args: list[cst.Arg], device: cst.SimpleString, indent=None,
                   dtype: cst.Arg | None = None) -> list[cst.Arg]:
    """Legacy (enabled, dtype, cache_enabled) positionals become keywords after the device; `dtype`, when
    given, is the legacy default the call relied on, written out."""
    converted = []
    position = 0
    for arg in args:
        if arg.keyword is None and not arg.star:
            arg = arg.with_changes(keyword=cst.Name(LEGACY_AUTOCAST_POSITIONS[position]), equal=_equal())
            position += 1
        converted.append(arg)
    if dtype is not None:
        converted = _append(converted, dtype, indent)
    return _insert_first(converted, cst.Arg(device), indent)


def _positional_and_keywords(args) -> tuple[list[cst.Arg], list[str]]:
    return ([arg for arg in args if arg.keyword is None and not arg.star],
            [arg.keyword.value for arg in args if arg.keyword is not None])


def _passed_twice(new_name: str, args) -> str | None:
    """A parameter the call passes both by position and by keyword (`autocast(True, enabled=flag)`)."""
    positional, keywords = _positional_and_keywords(args)
    for name in LEGACY_PARAMETERS[new_name][:len(positional)]:
        if name in keywords:
            return name
    return None


def _legacy_call_error(new_name: str, args) -> bool:
    """Does this call (or partial) raise TypeError against the legacy signature as written: too many
    positional arguments, an unknown keyword, a parameter passed twice?"""
    positional, keywords = _positional_and_keywords(args)
    parameters = LEGACY_PARAMETERS[new_name]
    known = set(parameters) | set(LEGACY_KEYWORD_ONLY.get(new_name, ()))
    return (len(positional) > len(parameters) or len(keywords) != len(set(keywords))
            or bool(set(keywords) - known) or _passed_twice(new_name, args) is not None)


def _needs_dtype(args) -> bool:
    """Does a legacy autocast call rely on its default dtype? Then the migration writes that dtype (see
    LEGACY_AUTOCAST_DTYPE). Even a disabled region needs it: it sets the dtype that a region opened inside it
    without one computes in (measured: inside `torch.cpu.amp.autocast(enabled=False)` within a float16 region,
    `torch.autocast("cpu")` computes in bfloat16; inside `torch.amp.autocast("cpu", enabled=False)`, float16)."""
    positional, keywords = _positional_and_keywords(args)
    return len(positional) < 2 and vocab.DTYPE not in keywords


def _insert_first(args: list[cst.Arg], new: cst.Arg, indent=None) -> list[cst.Arg]:
    if not args:
        return [new]
    first_comma = args[0].comma
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if isinstance(first_comma, cst.Comma) and len(args) > 1 and isinstance(indent, cst.ParenthesizedWhitespace):
        after = first_comma.whitespace_after
        if isinstance(after, cst.ParenthesizedWhitespace):  # one argument per line: keep it so, minus comments
            comma = cst.Comma(whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[]))
    return [new.with_changes(comma=comma), *args]


def _append(args: list[cst.Arg], new: cst.Arg,
            indent: cst.BaseParenthesizableWhitespace | None = None) -> list[cst.Arg]:
    """Append a keyword argument, on its own line when the call has one argument per line."""
    if not args:
        return [new]
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        if isinstance(indent, cst.ParenthesizedWhitespace):  # the first argument's line break, minus comments
            between = cst.Comma(whitespace_after=indent.with_changes(first_line=cst.TrailingWhitespace(),
                                                                     empty_lines=[]))
        else:
            between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        return [*args[:-1], last.with_changes(comma=between), new.with_changes(comma=last.comma)]
    return [*args[:-1], last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), new]


def _import_rewrite(statement, line, changes, replacements: dict) -> None:
    """Move the given aliases of one import statement to `torch.amp` (or drop them), splitting when needed."""
    changed = {id(alias): target for alias, target in changes}
    kept = [alias for alias in statement.names if id(alias) not in changed]
    moved = [alias for alias in statement.names if changed.get(id(alias))]
    if isinstance(statement, cst.Import):
        names = []
        for alias in statement.names:
            if id(alias) not in changed:
                names.append(alias)
            elif changed[id(alias)]:
                names.append(alias.with_changes(name=cst.parse_expression(changed[id(alias)])))
        if not names:
            replacements[line if line is not None and len(line.body) == 1 else statement] = cst.RemoveFromParent()
            return
        replacements[statement] = statement.with_changes(names=_fix_commas(names, statement))
        return
    # from X import a, b: the moved names go to `from torch.amp import ...` (`from torch import amp` for a module).
    module_of = {}
    for alias in moved:
        old = dotted_name(alias.name)
        module_of[id(alias)] = "torch" if old in (vocab.AMP,) and dotted_name(statement.module) in (
            "torch.cuda", "torch.cpu") else changed[id(alias)]
    targets = {module_of[id(alias)] for alias in moved}
    if not kept and len(targets) == 1 and moved:
        replacements[statement] = statement.with_changes(module=cst.parse_expression(targets.pop()))
        return
    if not kept and not moved:
        replacements[line if line is not None and len(line.body) == 1 else statement] = cst.RemoveFromParent()
        return
    remaining = statement.with_changes(names=_fix_commas(kept, statement))
    new_lines = []
    for target in sorted(targets):
        names = [alias for alias in moved if module_of[id(alias)] == target]
        names = [alias.with_changes(comma=cst.MaybeSentinel.DEFAULT) for alias in names]
        new_lines.append(cst.SimpleStatementLine(body=[cst.ImportFrom(
            module=cst.parse_expression(target), names=names)]))
    if line is None or len(line.body) != 1:
        return
    replacements[line] = cst.FlattenSentinel([line.with_changes(body=[remaining]), *new_lines])


def _fix_commas(names: list[cst.ImportAlias], statement) -> list[cst.ImportAlias]:
    if not names:
        return names
    parenthesized = isinstance(statement, cst.ImportFrom) and statement.lpar is not None
    if not parenthesized:
        names = [*names[:-1], names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
    return names
