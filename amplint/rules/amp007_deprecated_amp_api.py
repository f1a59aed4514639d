"""AMP007 deprecated-amp-api: a reader of the vocabulary's table of deprecated spellings (`DEPRECATIONS`), of
where the module names them (amplint/facts/legacy.py), and of the migration (amplint/rules/migrate.py)."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst
from amplint import vocabulary as vocab

from amplint.facts import ModuleFacts
from amplint.facts.legacy import Alias, Scan, Site, called_behind_a_name, legacy_aliases, scan_module, \
    used_as_value
from amplint.facts.names import DEPRECATED_AMP, DEPRECATED_AMP_MODULES, dotted_name
from amplint.index.summary import Summary
from amplint.facts.versions import AMP_DEPRECATED_SINCE, SPELLING_SINCE, shown_floor
from amplint.rules.base import Finding, FixPlan, Rule
from amplint.rules.migrate import ROWS, Migration, positional
from amplint.rules.screen import Ask
from amplint.rules.scopes import snippet

CALLED = ("call", "decorator", "partial", "value")  # the uses that warn (a value where it is called)


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
    calls the parameter (`with amp_autocast():`) is called through too. And a legacy class or function handed on
    as a value, to be called by code this module does not show: passed to a factory or a decorator
    (`register("cuda")(torch.cuda.amp.grad_scaler.GradScaler)`), stored in a registry (`REGISTRY[k] = GradScaler`,
    an attribute, a table the module reads), or returned.

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
      also serves such a use. A legacy class handed on as a value gets no fix either: its callers are not shown,
      and `torch.amp.GradScaler` takes the device first, so a caller's `cls(2.0**14)` would pass the scale as the
      device. Nor where the call already raises TypeError (`autocast(True, enabled=flag)`, an
      unknown keyword), or where the default dtype cannot be written (no `import torch`; `**kwargs` that may hold
      a dtype).

    ## Limits
    Silent inside compatibility shims: `try: ... except ImportError:` handlers and `if` branches testing
    `hasattr`, a version, or `torch.amp` (in their code: a comment mentioning a version or an import makes no
    shim), and for names bound both to a legacy and to a `torch.amp` import.
    An import line is reported only when the module calls one of its names (importing alone warns nothing; a
    legacy class used only in `isinstance` is left alone); likewise a name bound to a legacy API or module, or a
    star import, is reported only when this module calls through it or hands it on. A value handed to a project
    function that never calls the parameter receiving it, to a builtin that only looks at it (`print`,
    `getattr`), or kept in a table the module never reads, is left alone. A star import of a module other than
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
        Ask(Summary.calls_api, *DEPRECATED_AMP, partial=True, decorator=True) | Ask(called_behind_a_name)
        | Ask(used_as_value))
    min_torch = "1.6"  # the legacy spellings appeared in torch 1.6
    fix = "safe"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        if not self.torch.reaches(AMP_DEPRECATED_SINCE):
            return  # every supported torch predates the warnings (`torch>=1.13,<2`): nothing ever warns
        scan = scan_module(facts)
        if not scan.sites and not scan.import_sites and not scan.star_sites and not scan.module_references:
            return
        aliases = legacy_aliases(facts, scan)  # before the plan: a name bound to a legacy API is never rewritten
        # The declared floor, raised by what this module needs wherever it runs (`from torch.amp import
        # GradScaler` at its top: torch >= 2.3): the fix may write what the module already requires.
        plan = Migration(facts, scan, self.torch.raised_to(shown_floor(facts)), aliases)
        fix = FixPlan("Migrate the deprecated AMP spellings of this module to `torch.amp`", plan.rewrite) \
            if plan.replacements else None
        findings: list[tuple[cst.CSTNode, str, FixPlan | None, str]] = []
        starred = plan.star_bound()
        for site in scan.sites:
            if site.skip or site.kind in ("reference", "base", "alias") or site.head in starred:
                continue  # references (isinstance, annotations, base classes) do not warn by themselves; aliases
                # and names from a star import are reported where the legacy spelling is written
            if site.kind == "value":
                findings.append((site.report, _value_message(facts, site), None, _value_advice(plan, site)))
                continue
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
            if new_name == vocab.AUTOCAST and site.kind == "call" and positional(site.node):
                advice += " (the legacy first positional argument is `enabled`, not the device)"
            findings.append((site.report, message, fix if fixed is not None else None, _sentence(advice)))
        aliases = [alias for alias in aliases if not alias.skipped(plan)]
        for alias in aliases:
            fixed = id(alias) in plan.fixed_aliases
            findings.append((alias.reference, _alias_message(facts, alias), fix if fixed else None,
                             _alias_advice(plan, alias)))
        warned = {site.head for site in scan.sites if not site.skip and site.kind in CALLED}
        warned |= {(dotted_name(alias.reference) or "").split(".", 1)[0] for alias in aliases}
        for statement, names in scan.star_sites:
            uses = {name: [site for site in scan.sites if site.head == name and not site.skip
                           and site.kind in CALLED] for name in names}
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


def _import_advice(plan: "Migration", scan: "Scan", statement, names: list[str]) -> list[str]:
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


def _when(site: "Site", scan: "Scan") -> str:
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


def _alias_message(facts: ModuleFacts, alias: Alias) -> str:
    nodes = [node for node, _ in alias.uses]
    calls, warns = _uses(facts, nodes), _warn(nodes)
    if alias.qualified in DEPRECATED_AMP_MODULES:
        return f"`{alias.target}` is the deprecated `{alias.qualified}`: {calls} {warns}"
    return f"`{alias.target}` is the deprecated `{_public(alias.qualified)}`: {calls} {warns}"


def _value_message(facts: ModuleFacts, site: Site) -> str:
    warned, used = _public(site.qualified), snippet(facts, site.report, 40)
    kind = "class" if DEPRECATED_AMP[site.qualified][0] in (vocab.AUTOCAST, vocab.GRAD_SCALER) else "function"
    named = f"`{warned}`" if used == warned else f"`{used}` (`{warned}`)"
    if len(named) > 60:  # the message stays within 120 characters
        named = f"`{used}`"
    return f"{named} is deprecated and handed on as a value: the {kind} warns wherever it is called"


def _value_advice(plan: "Migration", site: Site) -> str:
    """What to hand on instead; no fix: the receiver calls it with arguments this module does not show."""
    new_name, device = DEPRECATED_AMP[site.qualified]
    spelling = plan.spelling(new_name)
    if spelling is None:
        return _sentence(f"`torch.amp.{new_name}` exists from torch {SPELLING_SINCE[f'torch.amp.{new_name}']} on "
                         f"and the project supports torch {plan.support.floor}: no replacement to hand on")
    row = ROWS[site.qualified]
    if row.device_first:
        dtype = f", dtype=torch.{row.default_dtype}" if row.default_dtype is not None else ""
        return _sentence(f"hand on `{spelling}` and pass the device first where it is called (`(\"{device}\"{dtype}, "
                         f"...)`, keywords for the legacy positional arguments); no fix: the callers are not shown "
                         f"here, and the new signature reads their legacy positional arguments otherwise")
    return _sentence(f"hand on `functools.partial({spelling}, device_type=\"{device}\")`; no fix: the callers are "
                     f"not shown here")


def _alias_advice(plan: "Migration", alias: Alias) -> str:
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
        extra = f", dtype=torch.{ROWS[alias.qualified].default_dtype}" if new_name == vocab.AUTOCAST else ""
        bound = f'functools.partial({spelling}, "{device}"{extra})'
    else:
        bound = f'functools.partial({spelling}, device_type="{device}")'
    return _sentence(f"bind `{bound}` instead, and pass keyword arguments where a call through "
                     f"`{alias.target}` passes the legacy positional ones; no fix: every call through the name "
                     f"changes with it")
