"""What rules ask the project index about calls that leave a module (amplint/index/project.py)."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Iterator

from amplint.facts import ModuleFacts
from amplint.facts.model import Call, Region
from amplint.index.project import Target, calls_leaving
from amplint.vocabulary import AUTOCAST, STEP, TORCH, Effect


# A function whose facts a caller's region does not reach: its body runs with autocast off.
REGION_OFF = (Effect.AUTOCAST_OFF,)


@dataclass
class Reached:
    """A call of this module, in an active autocast region, to a function of another module that does `fact`
    itself or through its callees (`chain`: from the called function to the one that does it)."""

    call: Call
    region: Region
    region_chain: list[Call]  # same-module callers through which the region is reached (facts.effective_region)
    chain: list[Target]
    fact: str
    line: int  # where the last function of the chain does it

    def describe(self, facts: ModuleFacts, what: str) -> str:
        """"`self.model.optimize()` runs `loss.backward()` at model.py:13": the call as written, what the callee
        does (its code, else `what`) and where (the line, and the file when another)."""
        done = self.code(facts)
        return f"`{self.call.dotted}()` runs {f'`{done}`' if done else what} at {self.where(facts)}"

    def where(self, facts: ModuleFacts) -> str:
        target = self.chain[-1]
        if target.module == facts.project.path:
            return f"line {self.line}"
        return f"{os.path.basename(target.module)}:{self.line}"

    def code(self, facts: ModuleFacts) -> str | None:
        """The statement of the line where the last function of the chain does it, when short (a backward or a
        step is one call)."""
        target = self.chain[-1]
        text = facts.source if target.module == facts.project.path else facts.project.text(target.module)
        lines = text.splitlines() if text else []
        if not 0 < self.line <= len(lines):
            return None
        line = lines[self.line - 1].split("#", 1)[0].strip()
        return line if line and len(line) <= 24 and "`" not in line else None

    def note(self, facts: ModuleFacts) -> tuple:
        """A note at the line of the callee where it is done (Finding.notes)."""
        target = self.chain[-1]
        text = facts.source if target.module == facts.project.path else facts.project.text(target.module)
        lines = text.splitlines() if text else []
        line = lines[self.line - 1] if 0 < self.line <= len(lines) else ""
        column = len(line) - len(line.lstrip()) + 1
        filename = None if target.module == facts.project.path else target.module
        return ((filename, self.line, column),
                f"`{target.qualname}()` does it here, under the autocast region of the call")

    def path(self) -> str:
        """"`run_step()` -> `backward_and_step()`": the calls from the called function to the one that does it."""
        return " -> ".join(f"`{target.qualname}()`" for target in self.chain)


def calls_in_regions_reaching(facts: ModuleFacts, wanted: tuple[str, ...]) -> Iterator[Reached]:
    """Calls in an active region (lexical, or through this module's callers) to a function that does one of the
    index facts `wanted`, a few calls deep: of another module, or of this one through a call the facts layer
    does not follow (an object's method or `__call__`, an inherited method). torch's own API and method calls named like the
    facts themselves (`x.backward()`, reported as events) are not calls that leave."""
    view = facts.project
    followed = {id(site) for sites in facts.call_sites.values() for site in sites}  # the facts layer's own
    for call in facts.calls:
        if call.dotted is None or (call.qualified or "").startswith("torch."):
            continue
        region, region_chain = facts.effective_region(call.frame)
        if region is None or not region.active:
            continue
        info = facts.function_info(call.frame)
        target = view.resolve(info.qualname if info else None, call.dotted)
        if target is None or (target.module == view.path and id(call) in followed):
            continue  # a call the facts layer follows: what the callee does is reported where it is
        reached = view.reaches(target, wanted, stop=REGION_OFF)
        if reached is None:
            continue
        chain, fact = reached
        doer = view.function(chain[-1])
        yield Reached(call, region, region_chain, chain, fact, doer.lines.get(fact, doer.line))


def reaches_from_region(view, wanted: tuple[str, ...]) -> bool:
    """The screen's question: does a call in a region of the view's file reach, in another module, a function
    doing one of `wanted`?"""
    return any(view.reaches(target, wanted, stop=REGION_OFF) for _, _, target in calls_leaving(view, "in_region"))


def reaches_from_module(view, wanted: tuple[str, ...]) -> bool:
    """The screen's question for a call anywhere in the view's file (not only in a region): does one reach, in
    another module, a function doing one of `wanted`?"""
    for _, _, target in calls_leaving(view, "callee"):  # every call has a callee: every call of the file
        if view.reaches(target, wanted):
            return True
    return False


STEPS = frozenset({Effect.STEP, Effect.SCALER_STEP})  # a function calling a `.step()` method notes one of them


def calls_beside_a_step(view) -> Iterator[tuple[str | None, object]]:
    """(calling function or None at module level, call record) of every call of the view's file made in a
    function that calls a `.step()` method, or at module level beside one."""
    record = view.record(view.path)
    if record is None:
        return
    for qualname, summary in record.functions.items():
        if summary.does & STEPS:
            for call in summary.calls:
                yield qualname, call
    if any(call.callee.rsplit(".", 1)[-1] == STEP for call in record.module_calls):
        for call in record.module_calls:
            yield None, call



def opens_through_project(view) -> bool:
    """The screen's question for a file whose own text shows no region: does a `with` of it enter a call of a
    function of the project that makes an autocast region (`returns_autocast`: `with make_ctx():`, `ctx =
    amp_context()` then `with ctx:`, `stack.enter_context(amp_context())`)? What it reads of the file's own tree
    (`Openings`) comes from the screen's summary, or from where the index parsed the file (`ModuleView.file_part`)."""
    entered = None
    if view.summary is not None:
        openings = view.file_part(Openings.of)
        if openings is None:  # unparsable: the engine reports it
            return True
        entered = {name for name in openings.entered if not _outside(view, openings, name)}
        if any(name.split(".", 1)[0] in ("self", "cls") for name in entered) and not _project_bases(view, openings):
            # a method of the object: of this file (which shows no region), or of a base class outside the project
            entered = {name for name in entered if name.split(".", 1)[0] not in ("self", "cls")}
        if not entered or not _imports_a_region_module(view, openings):
            return False
        imported = _imported_factory(view, openings, entered)
        if imported is not None:
            return imported  # answered from the modules the names come from, without this file's record
    record = view.record(view.path)
    if record is None:
        return False
    sites = [(qualname, call) for qualname, summary in record.functions.items() for call in summary.calls]
    sites += [(None, call) for call in record.module_calls]
    for qualname, call in sites:
        if entered is not None and call.callee not in entered:
            continue
        target = view.resolve(qualname, call.callee)
        function = view.function(target) if target is not None else None
        if function is not None and Effect.RETURNS_AUTOCAST in function.does:
            return True
    return False


@dataclass(frozen=True)
class Openings:
    """What `opens_through_project` reads of the file's own tree, as plain data (so that it can be found where the
    index parses the file, and sent to another process): the names a `with` may enter a call of (`_entered_names`),
    the dotted names of the classes' bases (`object` left out), for the first part of each of these names what
    imports bind it to and whether it is a builtin the file never binds (`_outside`), and the import statements
    ((module, level, ((name, as name), ...)); module None for `import x`)."""

    entered: frozenset[str]
    bases: tuple[str, ...]
    heads: dict[str, tuple[tuple[str, ...], bool]]
    imports: tuple[tuple[str | None, int, tuple[tuple[str, str | None], ...]], ...]

    @classmethod
    def of(cls, summary) -> Openings | None:
        """The file's openings, from its summary's tree (parsed now if not yet); None when it does not parse."""
        import builtins

        from amplint.index.summary import dotted

        try:
            summary.parse_tree()
        except Exception:  # noqa: BLE001 - unparsable: the engine reports it
            return None
        entered = _entered_names(summary)
        bases = tuple(name for node in summary.class_nodes
                      for name in map(dotted, node.bases) if name is not None and name != "object")
        heads = {}
        for name in (*entered, *bases):
            head = name.split(".", 1)[0]
            if head not in heads:
                heads[head] = (tuple(summary.qualified_imports.get(head) or ()), hasattr(builtins, head)
                               and head not in summary.bound and head not in summary.module_bound)
        imports = tuple((None if type(node) is ast.Import else node.module or "",
                         0 if type(node) is ast.Import else node.level,
                         tuple((alias.name, alias.asname) for alias in node.names)) for node in summary.import_nodes)
        return cls(frozenset(entered), bases, heads, imports)


opens_through_project.file_parts = (Openings.of,)  # what it reads of the file's tree (`ModuleView.file_part`)


_NO_FACTORIES = frozenset({TORCH, "contextlib", "functools"})


def _outside(view, openings: Openings, name: str) -> bool:
    """Is the dotted name surely not a function of the project: a builtin, or read through an absolute import of
    a module the project does not hold (`torch.no_grad`, `warnings.catch_warnings`)?"""
    head = name.split(".", 1)[0]
    if head in ("self", "cls"):
        return False
    imported, builtin = openings.heads[head]
    if imported:  # torch's own API, contextlib's, functools': never a region the project makes (as the facts layer)
        return all(qualified.split(".", 1)[0] in _NO_FACTORIES or view.outside(qualified) for qualified in imported)
    return builtin


def _imports_a_region_module(view, openings: Openings) -> bool:
    """Does the file import a module of the project whose text names `autocast` (a function making a region names
    it, or an alias of it, where it is defined)? Asked before the file's record is built."""
    for module, level, aliases in openings.imports:
        if module is None:
            names = [name for name, _ in aliases]
        else:
            base = view.project.absolute(view.path, module, level) if level else module
            names = [base] + [f"{base}.{name}" for name, _ in aliases] if base else [name for name, _ in aliases]
        for name in names:
            path = view._find(name, view.path) if name else None
            if path is not None and path != view.path and AUTOCAST in (view.text(path) or ""):
                return True
        if module is not None and base and _reexports_a_region_module(view, base, aliases):
            return True
    return False


def _reexports_a_region_module(view, base: str, aliases) -> bool:
    """Does the module `base` re-export one of the imported names (`aliases`: (name, as name) each) from a module of
    the project whose text names `autocast` (`from .helpers import make_ctx` in a package's `__init__`: one
    re-export followed, as `_imported_factory` follows it)?"""
    path = view._find(base, view.path)
    record = view.record(path) if path is not None and path != view.path else None
    if record is None:
        return False
    for name, _ in aliases:
        again = record.imports.get(name)
        if again is None or again[1] is None:
            continue
        module = view.project.absolute(path, again[0], again[2]) if again[2] else again[0]
        source = view._find(module, path)
        if source is not None and source != view.path and AUTOCAST in (view.text(source) or ""):
            return True
    return False


def _imported_factory(view, openings: Openings, entered: set[str]) -> bool | None:
    """For entered names all read through imports (no `self.` method): does one name a function making a region in
    the module it comes from (followed through one re-export)? None when a name is not read so: the file's record
    answers."""
    bound: dict[str, tuple[str, str | None, int]] = {}
    for module, level, aliases in openings.imports:
        for name, asname in aliases:
            if module is None:
                bound[asname or name.split(".")[0]] = (name if asname else name.split(".")[0], None, 0)
            elif name != "*":
                bound[asname or name] = (module, name, level)
    for name in entered:
        head, *rest = name.split(".")
        if head not in bound:
            if head in ("self", "cls"):
                return None  # a method (of a project base class): the record resolves it
            continue  # a local name: its bound values are among the names (`_entered_names`)
        module, attribute, level = bound[head]
        module = view.project.absolute(view.path, module, level) if level else module
        parts = ([attribute] if attribute else []) + rest
        if not parts:
            continue
        for depth in range(2):
            path = view._find(".".join(filter(None, [module, *parts[:-1]])), view.path)
            record = view.record(path) if path is not None and path != view.path else None
            if record is None:
                break
            function = record.functions.get(parts[-1])
            if function is not None:
                if Effect.RETURNS_AUTOCAST in function.does:
                    return True
                break
            again = record.imports.get(parts[-1])  # a re-export: `from .utils import make_ctx` in a package
            if again is None or again[1] is None:
                break
            module = view.project.absolute(path, again[0], again[2]) if again[2] else again[0]
            parts = [again[1]]
    return False


def _project_bases(view, openings: Openings) -> bool:
    """Does a class of the file derive from a class that may be the project's (not read through an absolute import
    of a module outside the project, such as `nn.Module` or `unittest.TestCase`)?"""
    return any(not _outside(view, openings, name) for name in openings.bases)


def _entered_names(summary) -> set[str]:
    """The dotted names a `with` of the file may enter a call of: its items' callees, the names they read and the
    callees of what those names are bound to, a few assignments away (a superset)."""
    from amplint.index.summary import ENTER_CONTEXT, dotted

    pending = [item.context_expr for with_node, _, _ in summary.withs for item in with_node.items]
    pending += [site[4].args[0] for site in summary.call_sites_by_name.get(ENTER_CONTEXT, ()) if site[4].args]
    names: set[str] = set()
    for _ in range(3):
        following = []
        for expr in pending:
            stack = [expr]
            while stack:
                node = stack.pop()
                if type(node) is ast.Call:
                    stack.append(node.func)
                elif type(node) is ast.IfExp:
                    stack += [node.body, node.orelse]
                else:
                    name = dotted(node)
                    if name is not None and name not in names:
                        names.add(name)
                        following += [value for targets, value in summary.assignments if name in targets]
        pending = following
    return names


def importing_callers(view, qualname: str) -> list:
    """(path, record) of each other module of the project calling the function `qualname` of the view's file,
    found among the modules importing it (read on demand: such a caller need not be indexed up front)."""
    from amplint.index.project import Target

    target = Target(view.path, qualname)
    view.asked_importers.add(view.path)
    found = []
    for path in view.project.importers(view.path):
        record = view.record(path)
        if record is None:
            continue
        sites = [(name, call) for name, summary in record.functions.items() for call in summary.calls]
        sites += [(None, call) for call in record.module_calls]
        if any(view.resolve(name, call.callee, path) == target for name, call in sites):
            found.append((path, record))
    return found

