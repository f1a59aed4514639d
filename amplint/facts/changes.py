"""What a piece of code may change: the names it may rebind (`bound`) or change in place (`mutated`), and the
dotted targets it assigns (`stored`). AMP004 hoists a construction out of a loop only when the loop changes nothing
it reads; AMP003 moves an `unscale_` before a clip only over statements that rebind neither the scaler nor the
optimizer."""

from __future__ import annotations

from amplint.lazy import libcst as cst, visitor_class

from amplint.facts.names import dotted_name

# Builtins that read their arguments without changing them (unless rebound, which counts as a binding).
READ_ONLY_BUILTINS = frozenset({"print", "len", "isinstance", "float", "int", "str", "bool", "repr", "format"})


def base_name(node: cst.CSTNode) -> str | None:
    """The name an expression starts from: `cfg` for `cfg.opt.lr`, `x[0].y` or `cfg.get()`."""
    while True:
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        elif isinstance(node, cst.Call):
            node = node.func
        else:
            return None


class Changes:
    """The names a piece of code may rebind (`bound`) or change in place (`mutated`), and the dotted targets it
    assigns (`stored`, `self.scaler` for `self.scaler = ...`).

    Over-approximates on purpose: every binding form counts (assignment, augmented, annotated, walrus, `import`,
    `for`/`with`/`except` targets, `match` captures, `global`/`nonlocal`, `del`, nested `def`/`class` names,
    comprehension variables), and an object may change when an attribute or item of it is assigned or deleted,
    when a method is called on it, or when it is passed to a call. Calls into imported modules (`torch.autocast(...,
    enabled=flag)`) and read-only builtins (`print`, `len`) are taken not to change their arguments, except
    `torch` functions that work in place (a trailing `_`) or write to `out=`. `imports` maps names bound by
    import statements to what they stand for; method calls on those names do not count as changing them.
    """

    def __init__(self, imports: dict[str, str]) -> None:
        self.imports = imports
        self.bound: set[str] = set()
        self.mutated: set[str] = set()
        self.stored: set[str] = set()

    @classmethod
    def of(cls, node: cst.CSTNode, imports: dict[str, str], skip: cst.CSTNode | None = None) -> Changes:
        """What `node` may change, leaving out the statement `skip` inside it."""
        changes = cls(imports)
        node.visit(visitor_class(_ChangesVisitor)(changes, skip))
        return changes

    def target(self, target: cst.CSTNode) -> None:
        """An assignment (or `del`) target."""
        if isinstance(target, cst.Name):
            self.bound.add(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.target(element.value)
        elif isinstance(target, cst.StarredElement):
            self.target(target.value)
        else:
            base = base_name(target)
            if base is not None:
                self.mutated.add(base)
            dotted = dotted_name(target)
            if dotted is not None:
                self.stored.add(dotted)

    def call(self, call: cst.Call) -> None:
        func = call.func
        callee = dotted_name(func) or ""
        head = callee.split(".", 1)[0]
        if isinstance(func, cst.Attribute):
            receiver = base_name(func.value)
            if receiver is not None and receiver not in self.imports:
                self.mutated.add(receiver)
        in_place = callee.endswith("_") or any(a.keyword is not None and a.keyword.value == "out" for a in call.args)
        if not in_place and (head in self.imports or callee in READ_ONLY_BUILTINS):
            return
        for arg in call.args:
            for name in _names_in(arg.value):
                self.mutated.add(name)


def _names_in(node: cst.CSTNode) -> set[str]:
    """The names whose objects an argument hands over: `x`, `cfg` for `cfg.sub` or `cfg[0]`, the elements of a
    tuple/list/dict, either side of `or`/`if-else`. Not those inside a call, an operation or a generator: a new
    object is passed (their own calls are looked at one by one)."""
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, (cst.Attribute, cst.Subscript)):
        base = base_name(node)
        return {base} if base is not None and not isinstance(node.value, cst.Call) else set()
    if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        return {name for element in node.elements for name in _names_in(element.value)}
    if isinstance(node, cst.Dict):
        return {name for element in node.elements for name in _names_in(element.value)}
    if isinstance(node, (cst.StarredElement, cst.Arg)):
        return _names_in(node.value)
    if isinstance(node, cst.BooleanOperation):
        return _names_in(node.left) | _names_in(node.right)
    if isinstance(node, cst.IfExp):
        return _names_in(node.body) | _names_in(node.orelse)
    if isinstance(node, cst.NamedExpr):
        return _names_in(node.value)
    return set()


class _ChangesVisitor:  # a libcst visitor once made one with amplint.lazy.visitor_class
    def __init__(self, changes: Changes, skip: cst.CSTNode | None) -> None:
        super().__init__()
        self.changes = changes
        self.skip = skip

    def on_visit(self, node) -> bool:
        if node is self.skip:
            return False
        return super().on_visit(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self.changes.target(target.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.changes.target(node.target)
        base = base_name(node.target)
        if base is not None:
            self.changes.mutated.add(base)  # `x *= 2` on a list or tensor changes it in place

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.changes.target(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.changes.target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.changes.target(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.changes.target(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:  # with ... as x, except E as x, import a as x
        self.changes.target(node.name)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            if alias.asname is None:
                self.changes.bound.add((dotted_name(alias.name) or "").split(".", 1)[0])

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            self.changes.bound.add("*")
            return
        for alias in node.names:
            if alias.asname is None:
                self.changes.bound.add(dotted_name(alias.name) or "")

    def visit_Global(self, node: cst.Global) -> None:
        self.changes.bound.update(item.name.value for item in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.changes.bound.update(item.name.value for item in node.names)

    def visit_MatchAs(self, node: cst.MatchAs) -> None:
        if node.name is not None:
            self.changes.target(node.name)

    def visit_MatchStar(self, node: cst.MatchStar) -> None:
        if node.name is not None:
            self.changes.target(node.name)

    def visit_MatchMapping(self, node: cst.MatchMapping) -> None:
        if node.rest is not None:
            self.changes.target(node.rest)

    def visit_Del(self, node: cst.Del) -> None:
        self.changes.target(node.target)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.changes.bound.add(node.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.changes.bound.add(node.name.value)

    def visit_Call(self, node: cst.Call) -> None:
        self.changes.call(node)
