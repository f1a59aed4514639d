"""AMP007 deprecated-amp-api: a reader of the vocabulary's table of deprecated spellings (`DEPRECATIONS`), of
where the module names them (amplint/facts/legacy.py), and of the migration (amplint/rules/migrate.py)."""

from __future__ import annotations

from typing import Iterator

from amplint import vocabulary as vocab

from amplint.facts import ModuleFacts
from amplint.facts.legacy import called_behind_a_name, legacy_aliases, scan_module, used_as_value
from amplint.facts.names import DEPRECATED_AMP
from amplint.facts.versions import AMP_DEPRECATED_SINCE, shown_floor
from amplint.rules.base import Finding, FixPlan, Rule
from amplint.rules.migrate import Migration, alias_report, import_report, site_report, star_report
from amplint.rules.screen import Ask, Summary


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
        if not scan.found:
            return
        aliases = legacy_aliases(facts, scan)  # before the plan: a name bound to a legacy API is never rewritten
        # The declared floor, raised by what this module needs wherever it runs (`from torch.amp import
        # GradScaler` at its top: torch >= 2.3): the fix may write what the module already requires.
        plan = Migration(facts, scan, self.torch.raised_to(shown_floor(facts)), aliases)
        fix = FixPlan("Migrate the deprecated AMP spellings of this module to `torch.amp`", plan.rewrite) \
            if plan.replacements else None
        for site in scan.warned_sites():  # calls, decorators, partials, values handed on
            message, advice = site_report(plan, site)
            yield Finding(site.report, message, fix if id(site) in plan.fixed_sites else None, help=advice)
        aliases = [alias for alias in aliases if not alias.skipped(plan)]
        for alias in aliases:  # reported where the legacy spelling is written, with the calls through the name
            message, advice = alias_report(plan, alias)
            yield Finding(alias.reference, message, fix if id(alias) in plan.fixed_aliases else None, help=advice)
        for statement, names, nodes in scan.called_star_imports():  # never rewritten
            message, advice = star_report(plan, statement, names, nodes)
            yield Finding(statement, message, help=advice)
        warned = scan.warned_names(aliases)
        for statement, names in scan.import_sites:
            names = [name for name in names if name in warned]  # an import alone warns nothing
            if names:
                message, advice = import_report(plan, statement, names)
                moved = any(plan.moved_import(statement, name) for name in names)
                yield Finding(statement, message, fix if moved else None, help=advice)
