"""A whole-module migration of deprecated spellings to their replacements, read from the vocabulary's table
(`vocabulary.DEPRECATIONS`: each legacy spelling's new name, device, legacy signature and default dtype): which
sites are rewritten, how each call's arguments move (legacy positionals to keywords, the device inserted first
or passed as `device_type=`), and how each import line changes. AMP007's fix, and the words of its findings
(`site_report`, `alias_report`, `star_report`, `import_report`: what warns, when, and what to write instead at the
project's oldest torch, or why no fix is offered); the facts it rewrites are amplint/facts/legacy.py's.
"""

from __future__ import annotations

from amplint import vocabulary as vocab
from amplint.facts.legacy import Alias, Scan, Site
from amplint.facts.names import DEPRECATED_AMP, DEPRECATED_AMP_MODULES, ImportBinding, dotted_name
from amplint.facts.versions import SPELLING_SINCE, TorchSupport
from amplint.facts import ModuleFacts
from amplint.lazy import libcst as cst
from amplint.rules.base import replace_nodes
from amplint.rules.scopes import snippet

ROWS = vocab.DEPRECATED_BY_SPELLING


def positional(call: cst.Call) -> bool:
    return any(arg.keyword is None and not arg.star for arg in call.args)


class Migration:
    """The whole-module migration: which sites are rewritten, and how each import line changes."""

    def __init__(self, facts, scan: Scan, support: TorchSupport = TorchSupport(),
                 aliases: list[Alias] = ()) -> None:
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

    def _torch_name(self) -> str | None:
        names = [local for local, bindings in self.scan.bindings.items()
                 if len(bindings) >= 1 and all(b.qualified == "torch" and b.module_level for b in bindings)]
        return "torch" if "torch" in names else (sorted(names)[0] if names else None)

    def _decide(self) -> None:
        by_head: dict[str, list[Site]] = {}
        for site in self.scan.sites:
            if not site.skip:
                by_head.setdefault(site.head, []).append(site)
        torch_name = self.torch_name
        starred = self.scan.star_bound()
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

    def _decide_module_alias(self, alias: Alias) -> None:
        """`amp_mod = torch.cuda.amp`, bound once and read only to call its AMP names: rebind it to `torch.amp`
        and migrate each call, as `import torch.cuda.amp as amp` is. Any other alias keeps its spelling."""
        if alias.qualified not in DEPRECATED_AMP_MODULES or alias.skipped(self) or "." in alias.target:
            return
        if alias.assignment.value is not alias.reference or \
                sum(alias.target in a.targets for a in self.facts.assignments) != 1:
            return  # a branch of `a if test else b`, or a name bound more than once
        if self.scan.loads.get(alias.target, 0) != len(alias.uses) + 1:
            return  # read some other way too (passed on, printed): the rebinding would reach that read
        head = alias.head
        bindings = self.scan.bindings.get(head, [])
        if not isinstance(alias.reference, cst.Attribute) or not bindings or \
                any(b.qualified != "torch" for b in bindings):
            return  # `torch.cuda.amp` spelled through torch only: a from-imported module keeps its import
        sites = [Site("call", node, node.func, api, alias.target) if isinstance(node, cst.Call)
                 else Site("decorator", node, node, api, alias.target) for node, api in alias.uses]
        if not all(self._convertible(site) and self.module_for(site.row.new_name) == vocab.TORCH_AMP
                   for site in sites):
            return
        for site in sites:
            self._rewrite(site, None)
        self.replacements[alias.reference] = cst.parse_expression(f"{head}.amp")
        self.fixed_aliases.add(id(alias))

    def _rewrite_under(self, torch_name: str, sites: list[Site]) -> None:
        """Spell each site through the module's name for torch (`torch.amp.autocast`, `th.autocast`...)."""
        for site in sites:
            where = self.spelling(site.row.new_name)
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

    def why_not(self, site: Site) -> str | None:
        """Why a site gets no fix, when the reason is worth telling (the floor, or a call that raises)."""
        row = site.row
        new_name = row.new_name
        if self.spelling(new_name) is None:
            since = SPELLING_SINCE[f"torch.amp.{new_name}"]
            return (f"`torch.amp.{new_name}` exists only from torch {since} on and the project supports torch "
                    f"{self.support.floor}: no fix (keep the legacy spelling behind a version check, or raise the "
                    f"oldest supported torch to {since})")
        if site.kind in ("call", "partial"):
            args = site.node.args[1:] if site.kind == "partial" else site.node.args
            twice = _passed_twice(row, args)
            if twice:
                return (f"the call passes `{twice}` twice (by position and by keyword), so it raises TypeError "
                        f"already: no fix")
            if _legacy_call_error(row, args):
                return "the call does not match the legacy signature (it raises TypeError already): no fix"
            if row.default_dtype is not None and _needs_dtype(args) and self.torch_name is None:
                return (f"the migration must keep the legacy default `dtype=torch.{row.default_dtype}` "
                        f"(without it an enclosing region's dtype applies) and the module has no `import torch`: "
                        f"no fix")
        if self._convertible(site) and self.scan.bindings.get(site.head) and \
                self.scan.bindings[site.head][0].qualified != "torch":
            return f"not every use of `{site.head}` in this module can be migrated, and they share its import: no fix"
        return None

    def _every_use_is_a_site(self, head: str, sites: list[Site]) -> bool:
        return self.scan.loads.get(head, 0) == len(sites)

    def _convertible(self, site: Site) -> bool:
        row = site.row
        new_name = row.new_name
        if site.kind == "reference":
            return new_name == vocab.GRAD_SCALER  # isinstance()/annotations: the base class accepts both
        if site.kind in ("base", "alias", "value"):  # a value: its callers pass what this module does not show
            return False
        if site.kind == "decorator":
            return not row.device_first  # `@custom_fwd` becomes `@custom_fwd(device_type=...)`
        args = site.node.args[1:] if site.kind == "partial" else site.node.args
        if _legacy_call_error(row, args):
            return False  # the call raises TypeError as written: report it, change nothing
        if row.default_dtype is not None:  # autocast
            if any(arg.star == "*" for arg in args):
                return False
            if _needs_dtype(args) and (self.torch_name is None or any(arg.star == "**" for arg in args)):
                return False  # the legacy default dtype cannot be written (no name for torch; `**` may hold one)
            return site.kind != "partial" or self._partial_called_with_keywords_only(site)
        if row.device_first:  # GradScaler
            return True
        return not any(arg.star == "**" for arg in args)

    def _partial_called_with_keywords_only(self, site: Site) -> bool:
        bound = [a for a in self.facts.assignments if a.value is site.node and len(a.targets) == 1]
        if not bound:
            return False
        name = bound[0].targets[0]
        return all(not positional(call.node) and not any(arg.star == "*" for arg in call.node.args)
                   for call in self.facts.calls if call.dotted == name)

    # rewrites ---------------------------------------------------------------------------------------
    def _string(self, device: str) -> cst.SimpleString:
        return cst.SimpleString(f"{self.quote}{device}{self.quote}")

    def _rewrite(self, site: Site, new_func: str | None) -> None:
        if not self._convertible(site):
            return
        row = site.row
        device = row.device
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
            if row.default_dtype is not None:  # autocast: the legacy positionals become keywords
                dtype = None
                if _needs_dtype(args):
                    dtype = cst.Arg(cst.parse_expression(f"{self.torch_name}.{row.default_dtype}"),
                                    keyword=cst.Name(vocab.DTYPE), equal=_equal())
                return _autocast_args(args, row.positional, self._string(device), self.indent, dtype)
            if row.device_first:
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


def _autocast_args(args: list[cst.Arg], parameters: tuple[str, ...], device: cst.SimpleString, indent=None,
                   dtype: cst.Arg | None = None) -> list[cst.Arg]:
    """Legacy (enabled, dtype, cache_enabled) positionals become keywords after the device; `dtype`, when
    given, is the legacy default the call relied on, written out."""
    converted = []
    position = 0
    for arg in args:
        if arg.keyword is None and not arg.star:
            arg = arg.with_changes(keyword=cst.Name(parameters[position]), equal=_equal())
            position += 1
        converted.append(arg)
    if dtype is not None:
        converted = _append(converted, dtype, indent)
    return _insert_first(converted, cst.Arg(device), indent)


def _positional_and_keywords(args) -> tuple[list[cst.Arg], list[str]]:
    return ([arg for arg in args if arg.keyword is None and not arg.star],
            [arg.keyword.value for arg in args if arg.keyword is not None])


def _passed_twice(row: vocab.Deprecated, args) -> str | None:
    """A parameter the call passes both by position and by keyword (`autocast(True, enabled=flag)`)."""
    positional, keywords = _positional_and_keywords(args)
    for name in row.positional[:len(positional)]:
        if name in keywords:
            return name
    return None


def _legacy_call_error(row: vocab.Deprecated, args) -> bool:
    """Does this call (or partial) raise TypeError against the legacy signature as written: too many
    positional arguments, an unknown keyword, a parameter passed twice?"""
    positional, keywords = _positional_and_keywords(args)
    parameters = row.positional
    known = set(parameters) | set(row.keyword_only)
    return (len(positional) > len(parameters) or len(keywords) != len(set(keywords))
            or bool(set(keywords) - known) or _passed_twice(row, args) is not None)


def _needs_dtype(args) -> bool:
    """Does a legacy autocast call rely on its default dtype? Then the migration writes that dtype (see
    the table's `default_dtype`). Even a disabled region needs it: it sets the dtype that a region opened inside it
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


# reporting: the message and help of each finding --------------------------------------------------------------
def site_report(plan: Migration, site: Site) -> tuple[str, str]:
    """A site reported where it is written (a call, a decorator, a partial, a value handed on): what warns, when,
    and what to write instead (the fix's rewrite, or why there is none)."""
    facts = plan.facts
    if site.kind == "value":
        return _value_message(facts, site), _value_advice(plan, site)
    new_name, device = site.row.new_name, site.row.device
    fixed = plan.fixed_sites.get(id(site))
    spelling = plan.spelling(new_name)
    use = f"use `{plan.render(fixed)}`" if fixed is not None else (
        f"use {_advice(spelling, device)}" if spelling is not None else "")
    why_not = plan.why_not(site) if fixed is None else None
    warned = _public(site.qualified)
    used = snippet(facts, site.report, 28)
    when = _when(site, plan.scan)
    message = (f"`{warned}` is deprecated since torch 2.4 and {when}" if used.startswith(warned)
               else f"`{used}` is the deprecated `{warned}` ({when})")
    advice = "; ".join(part for part in (use, why_not) if part) or \
        f"use `{_new_spelling(new_name, device)}`"
    if new_name == vocab.AUTOCAST and site.kind == "call" and positional(site.node):
        advice += " (the legacy first positional argument is `enabled`, not the device)"
    return message, _sentence(advice)


def alias_report(plan: Migration, alias: Alias) -> tuple[str, str]:
    """A name bound to a legacy API or module, reported at the assignment with the calls through it."""
    return _alias_message(plan.facts, alias), _alias_advice(plan, alias)


def star_report(plan: Migration, statement: cst.ImportFrom, names: list[str],
                nodes: list[cst.CSTNode]) -> tuple[str, str]:
    """A star import binding deprecated names the module calls (`nodes`): never rewritten."""
    message = (f"`from {dotted_name(statement.module)} import *` binds deprecated "
               f"{', '.join(f'`{name}`' for name in names)}: {_uses(plan.facts, nodes)} "
               f"{'warns' if len(nodes) == 1 else 'warn'}")
    advice = _import_advice(plan, statement, names) + [
        "no fix: a star import may bring other names the module relies on, so it is not rewritten"]
    return message, _sentence("; ".join(advice))


def import_report(plan: Migration, statement: cst.ImportFrom, names: list[str]) -> tuple[str, str]:
    """An import line of deprecated names the module calls: where they moved."""
    module = dotted_name(statement.module) or ""
    listed = ", ".join(f"`{plan.scan.imported_as[(id(statement), name)]}`" for name in names)
    message = f"{listed} imported from `{module}`, deprecated since torch 2.4"
    return message, _sentence("; ".join(_import_advice(plan, statement, names)))


def _import_advice(plan: Migration, statement: cst.ImportFrom, names: list[str]) -> list[str]:
    """Where each imported name's replacement lives at the project's oldest torch, and how to call it."""
    by_module: dict[str, list[str]] = {}  # module to import from -> the names that move there
    spellings: dict[str, list[str]] = {}  # module -> how to call its names
    missing = []
    for name in names:
        new_name, device = DEPRECATED_AMP[plan.scan.qualified_of[(id(statement), name)]]
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


def _when(site: Site, scan: Scan) -> str:
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
    kind = "class" if site.row.new_name in (vocab.AUTOCAST, vocab.GRAD_SCALER) else "function"
    named = f"`{warned}`" if used == warned else f"`{used}` (`{warned}`)"
    if len(named) > 60:  # the message stays within 120 characters
        named = f"`{used}`"
    return f"{named} is deprecated and handed on as a value: the {kind} warns wherever it is called"


def _value_advice(plan: Migration, site: Site) -> str:
    """What to hand on instead; no fix: the receiver calls it with arguments this module does not show."""
    new_name, device = DEPRECATED_AMP[site.qualified]
    spelling = plan.spelling(new_name)
    if spelling is None:
        return _sentence(f"`torch.amp.{new_name}` exists from torch {SPELLING_SINCE[f'torch.amp.{new_name}']} on "
                         f"and the project supports torch {plan.support.floor}: no replacement to hand on")
    row = site.row
    if row.device_first:
        dtype = f", dtype=torch.{row.default_dtype}" if row.default_dtype is not None else ""
        return _sentence(f"hand on `{spelling}` and pass the device first where it is called (`(\"{device}\"{dtype}, "
                         f"...)`, keywords for the legacy positional arguments); no fix: the callers are not shown "
                         f"here, and the new signature reads their legacy positional arguments otherwise")
    return _sentence(f"hand on `functools.partial({spelling}, device_type=\"{device}\")`; no fix: the callers are "
                     f"not shown here")


def _alias_advice(plan: Migration, alias: Alias) -> str:
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
