"""Facts about gradient clips that AMP003 reads: what a clip's parameters are, where the gradients it measures
are read (a split clip's norm), whether a gradient hook clamps, and where (through the project index) the
scaled backward runs whose gradients a function clips (a caller, a method of its class).

A clip that clips scaled gradients is mended by `scaler.unscale_(optimizer)` before the gradients are first
measured: before the clip itself, or, for torch 2.6's split clip (`total = get_total_norm(grads)` then
`clip_grads_with_norm_(params, max_norm, total)`), before the statement that computes the norm: an `unscale_`
between the two would leave the clip dividing true gradients by a norm of scaled ones (a factor max_norm / total,
65536 times too small at the default scale)."""

from __future__ import annotations

import ast

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts.model import Call, EventKind, FrameKind
from amplint.facts.module import ModuleFacts, call_argument
from amplint.facts.names import dotted_name
from amplint.index.project import Target
from amplint.index.summary import dotted

_CLIP_WITH_NORM = frozenset(name for name in vocab.CLIP_FUNCTIONS
                            if vocab.last_name(name).strip("_") == vocab.CLIP_GRADS_WITH_NORM_.strip("_"))


def is_split_clip(call: Call) -> bool:
    """Is the call torch's `clip_grads_with_norm_(parameters, max_norm, total_norm)` (torch 2.6+)?"""
    return call.qualified in _CLIP_WITH_NORM


def first_measured(facts: ModuleFacts, call: Call) -> cst.CSTNode | None:
    """The statement before which an `unscale_` makes the clip see true gradients: the clip's own statement, or,
    for a split clip, the statement that computes its `total_norm` from the gradients. That is the clip's
    statement when the norm is computed there (`clip_grads_with_norm_(ps, 1.0, get_total_norm(grads))`), or the
    statement just before it in the same block, binding the name the clip is handed, once in the function, to
    `get_total_norm(...)`. Only for a norm of the gradients themselves (`p.grad`, read where the norm is
    computed or through a name bound to a list of them: `unscale_` divides those tensors in place); None when
    the norm comes from anywhere else (a copy, another function, an earlier statement): no place is known."""
    if not is_split_clip(call):
        return call.statement
    norm = call_argument(call.node, 2, "total_norm")
    if norm is None:
        return None
    if isinstance(norm, cst.Call):
        return call.statement if _norm_of_gradients(facts, norm, call) else None
    name = dotted_name(norm)
    bound = facts.bindings(name, call.frame) if name else []
    if len(bound) != 1 or not isinstance(bound[0].value, cst.Call) or bound[0].frame is not call.frame \
            or not _norm_of_gradients(facts, bound[0].value, call):
        return None
    statement = bound[0].statement
    here, there = facts.block_of(call.statement), facts.block_of(statement)
    if here is None or there is None or here[0] is not there[0] or there[1] != here[1] - 1:
        return None
    return statement


def _norm_of_gradients(facts: ModuleFacts, value: cst.Call, call: Call) -> bool:
    """Is `value` `get_total_norm(...)` of gradients as they are (`p.grad` of each, in a comprehension or a list,
    inline or through a name bound once to one)?"""
    if facts.imports.qualify(value.func) not in vocab.TOTAL_NORM_FUNCTIONS:
        return False
    tensors = call_argument(value, 0, "tensors")
    name = dotted_name(tensors) if tensors is not None else None
    if name is not None:
        bound = facts.bindings(name, call.frame)
        if len(bound) != 1:
            return False
        tensors = bound[0].value
    return _gradients(tensors)


def _gradients(node) -> bool:
    """A comprehension or list whose elements are `x.grad`."""
    if isinstance(node, (cst.ListComp, cst.GeneratorExp)):
        return _is_grad(node.elt)
    if isinstance(node, (cst.List, cst.Tuple)):
        return bool(node.elements) and all(_is_grad(e.value) for e in node.elements)
    return False


def _is_grad(node) -> bool:
    return isinstance(node, cst.Attribute) and node.attr.value == vocab.GRAD


def covers(built_on: set[str], clipped: set[str]) -> bool:
    """Does an optimizer built on the parameters of `built_on` hold every parameter of `clipped`?"""
    return all(any(c == o or c.startswith(o + ".") for o in built_on) for c in clipped)


def parameter_owners(facts: ModuleFacts, expr, frame, depth: int = 0) -> set[str] | None:
    """The modules whose parameters `expr` yields: `gen.parameters()` -> {"gen"}; `list(...)`, `[*a, *b]`,
    `itertools.chain(...)`, param-group dicts and local names bound to them are followed. None: unknown."""
    if expr is None or depth > 4:
        return None
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in vocab.PARAMETER_READING_METHODS:
            owner = dotted_name(func.value)
            return {owner} if owner else None
        callee = dotted_name(func) or ""
        if callee in ("list", "tuple", "itertools.chain", "chain") and expr.args:
            return _union(parameter_owners(facts, arg.value, frame, depth + 1) for arg in expr.args)
        return None
    if isinstance(expr, (cst.List, cst.Tuple)) and expr.elements:
        return _union(parameter_owners(facts, element.value, frame, depth + 1) for element in expr.elements)
    if isinstance(expr, cst.Dict):
        params = [e.value for e in expr.elements if isinstance(e, cst.DictElement)
                  and isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == "params"]
        return parameter_owners(facts, params[0], frame, depth + 1) if params else None
    key = dotted_name(expr)
    if key is not None:
        bound = facts.bindings(key, frame)
        if len(bound) == 1 and len(bound[0].targets) == 1:
            return parameter_owners(facts, bound[0].value, bound[0].frame, depth + 1)
    return None


def _union(parts) -> set[str] | None:
    owners: set[str] = set()
    for part in parts:
        if part is None:
            return None
        owners |= part
    return owners


def clamps(facts: ModuleFacts, node: cst.CSTNode) -> bool:
    """Does the code call a clamp (`g.clamp(...)`, `g.clip(...)`, `torch.clamp(g, ...)`)?"""
    found = []

    class Clamps(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            if isinstance(call.func, cst.Attribute) and call.func.attr.value in vocab.CLAMP_METHODS \
                    or facts.imports.qualify(call.func) in vocab.CLAMP_FUNCTIONS:
                found.append(call)

    node.visit(Clamps())
    return bool(found)


def iterates_parameters(name: str, frame) -> bool:
    """Is `name` the target of a `for` around `frame` over a module's `.parameters()`?"""
    for current in frame.ancestors():
        if current.kind is FrameKind.FUNCTION:
            return False
        node = current.node
        if current.kind is FrameKind.LOOP and isinstance(node, cst.For) and dotted_name(node.target) == name \
                and isinstance(node.iter, cst.Call) and isinstance(node.iter.func, cst.Attribute) \
                and node.iter.func.attr.value in vocab.PARAMETERS_METHODS:
            return True
    return False


def scaled_backward_around(facts: ModuleFacts, qualname: str | None, depth: int) -> str | None:
    """Where a scaled backward runs that the function's work precedes: the function itself or a caller (a few
    calls up) reaching one, through the project index ("`train()`, line 9"); None when none is known."""
    view = facts.project
    names = view.project.names

    def describe(doer: Target) -> str:
        summary = view.function(doer)
        line = summary.lines.get(Effect.SCALED_BACKWARD, summary.line) if summary else 0
        module = names.get(doer.module) if doer.module != view.path else None
        return f"`{module + '.' if module else ''}{doer.qualname}()`, line {line}"

    if qualname is None:
        return None
    frontier, seen = [Target(view.path, qualname)], set()
    for _ in range(depth + 1):
        following = []
        for current in frontier:
            if current in seen:
                continue
            seen.add(current)
            reached = view.reaches(current, (Effect.SCALED_BACKWARD,))
            if reached is not None:
                return describe(reached[0][-1])
            following += [site.caller for site in view.callers(current) if site.caller.qualname != "<module>"]
        frontier = following
    return None


def scaled_backward_elsewhere(facts: ModuleFacts, qualname: str, depth: int):
    """Where the gradients a function's clip sees were scaled, through the project index: "`train()`, line 9"
    (or "`engine.Trainer.backward()`, line 9") for a caller (three calls up) or a method of its class that runs a
    scaled backward; True when the function is known not to follow an `unscale_` but no scaled backward is
    named; None when a caller or a method of the class reaches an `unscale_` (the clip may follow it)."""
    view = facts.project
    target = Target(view.path, qualname)
    record = view.record(view.path)
    names = view.project.names
    found = None

    def describe(doer: Target) -> str:
        summary = view.function(doer)
        line = summary.lines.get(Effect.SCALED_BACKWARD, summary.line) if summary else 0
        module = names.get(doer.module) if doer.module != view.path else None
        name = f"{module}.{doer.qualname}" if module else doer.qualname
        return f"`{name}()`, line {line}"

    owner = qualname.rsplit(".", 1)[0] if "." in qualname else None
    if owner is not None and record is not None:
        for other, summary in record.functions.items():
            if other == qualname or other.rsplit(".", 1)[0] != owner:
                continue
            if Effect.UNSCALE in summary.does:
                return None
            if found is None and Effect.SCALED_BACKWARD in summary.does:
                found = describe(Target(view.path, other))
    frontier, seen = [target], {target}
    for _ in range(depth):
        following = []
        for current in frontier:
            for site in view.callers(current):
                if site.caller in seen:
                    continue
                seen.add(site.caller)
                if site.caller.qualname == "<module>":
                    continue
                if view.reaches(site.caller, (Effect.UNSCALE,)) is not None:
                    return None
                caller = view.function(site.caller)
                if caller is not None and Effect.SCALED_BACKWARD in caller.does and current == target:
                    return None  # the caller runs the scaled backward itself: reported at its call (`clips and steps`)
                reached = view.reaches(site.caller, (Effect.SCALED_BACKWARD,))
                if found is None and reached is not None:
                    found = describe(reached[0][-1])
                following.append(site.caller)
        frontier = following
    return found if found is not None else True


# A clip stored on the object by a base class of another module ----------------------------------------------
def clips_stored_elsewhere(facts: ModuleFacts) -> list[Call]:
    """Calls `self.x(...)` in a method of a class of this module where `x` is bound by no method of the class
    here and is no method of it, but a base class of another module of the project binds `self.x` only to
    torch's clip (`self.grad_clip_fn = partial(clip_grad_norm_, ...)`, or `None` until configured), read from
    that module's text through the project index."""
    view = facts.project
    if view is None:
        return []
    found, answers, parsed = [], {}, {}
    own_methods = {info.qualname for info in facts.functions}
    stepping = {id(e.frame.function()) for e in facts.events if e.kind is EventKind.SCALER_STEP}
    for call in facts.calls:
        if call.receiver != "self" or not call.method or call.qualified or id(call.frame.function()) not in stepping:
            continue
        info = facts.function_info(call.frame)
        if info is None or info.qualname.count(".") != 1:
            continue
        owner = info.qualname.split(".")[0]
        key = f"self.{call.method}"
        if f"{owner}.{call.method}" in own_methods or facts.bindings(key, call.frame):
            continue
        if (owner, call.method) not in answers:
            try:
                answers[owner, call.method] = _base_stores_clip(view, owner, call.method, parsed)
            except (AttributeError, KeyError, OSError, SyntaxError, ValueError, RecursionError):
                answers[owner, call.method] = False  # an index question that fails knows nothing
        if answers[owner, call.method]:
            found.append(call)
    return found


def _base_stores_clip(view, owner: str, attribute: str, parsed: dict, depth: int = 3) -> bool:
    record = view.record(view.path)
    located = [(view.path, base) for base in (record.classes.get(owner, ()) if record else ())]
    for _ in range(depth):
        following = []
        for path, written in located:
            target = view.class_at(path, written)
            if target is None:
                continue
            stored = _stored_in_class(view, target, attribute, parsed) if target[0] != view.path else None
            if stored is not None:
                return stored
            base_record = view.record(target[0])
            following += [(target[0], base) for base in (base_record.classes.get(target[1], ()) if base_record else ())]
        located = following
    return False


def _stored_in_class(view, target: tuple[str, str], attribute: str, parsed: dict) -> bool | None:
    """Does the class bind `self.<attribute>` only to torch's clip (True), to something else or define it as a
    method (False), or not at all (None: its bases may)? `parsed`: each module's tree and imports, once."""
    if target[0] not in parsed:
        text = view.text(target[0])
        tree = ast.parse(text) if text and vocab.CLIP_GRAD in text else None
        parsed[target[0]] = (tree, ast_imports(tree)) if tree is not None else None
    if parsed[target[0]] is None:
        return None
    tree, imported = parsed[target[0]]
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name != target[1]:
            continue
        values = []
        for child in ast.walk(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and child.name == attribute:
                return False
            if isinstance(child, (ast.Assign, ast.AnnAssign)) and child.value is not None:
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                if any(isinstance(t, ast.Attribute) and t.attr == attribute and isinstance(t.value, ast.Name)
                       and t.value.id == "self" for t in targets):
                    values.append(child.value)
        values = [v for v in values if not (isinstance(v, ast.Constant) and v.value is None)]
        if not values:
            return None
        return all(_ast_clip(v, imported) for v in values)
    return None


def _ast_clip(value: ast.expr, imported: dict[str, str]) -> bool:
    """torch's clip function, `functools.partial` of it, or a conditional between it and None."""
    if isinstance(value, ast.IfExp):
        branches = [b for b in (value.body, value.orelse) if not (isinstance(b, ast.Constant) and b.value is None)]
        return bool(branches) and all(_ast_clip(b, imported) for b in branches)
    if isinstance(value, ast.Call):
        return ast_qualified(value.func, imported) in vocab.PARTIAL and bool(value.args) \
            and ast_qualified(value.args[0], imported) in vocab.CLIP_FUNCTIONS
    return ast_qualified(value, imported) in vocab.CLIP_FUNCTIONS


def ast_imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> the qualified name it is bound to by the module's absolute imports."""
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported[(alias.asname or alias.name).split(".")[0]] = alias.name if alias.asname else \
                    alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return imported


def ast_qualified(node: ast.expr, imported: dict[str, str]) -> str | None:
    """`torch.nn.utils.clip_grad_norm_` for `nn_utils.clip_grad_norm_` after `import torch.nn.utils as nn_utils`."""
    head, _, rest = (dotted(node) or "").partition(".")
    if head not in imported:
        return None
    return f"{imported[head]}.{rest}" if rest else imported[head]


def base_stores_clip(view) -> bool:
    """The screen's question (from the project index): does a method of a class of the view's file call
    `self.x(...)` where a base class of another module binds `self.x` to torch's clip?"""
    record = view.record(view.path)
    if record is None:
        return False
    asked, parsed = set(), {}
    for qualname, summary in record.functions.items():
        owner = qualname.split(".")[0] if qualname.count(".") == 1 else None
        if owner is None or not record.classes.get(owner):
            continue
        for call in summary.calls:
            attribute = call.callee[len("self."):] if call.callee.startswith("self.") else ""
            if attribute and "." not in attribute and f"{owner}.{attribute}" not in record.functions \
                    and (owner, attribute) not in asked:
                asked.add((owner, attribute))
                try:
                    if _base_stores_clip(view, owner, attribute, parsed):
                        return True
                except (AttributeError, KeyError, OSError, SyntaxError, ValueError, RecursionError):
                    continue
    return False
