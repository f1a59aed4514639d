"""The facts layer's import tracking: what a dotted expression of a module refers to, through its imports.

The AMP API's names themselves (every spelling of autocast, GradScaler, the clips, no_grad...) live in
amplint/vocabulary.py and are re-exported here for the modules that import them from this one.

libcst's QualifiedNameProvider resolves every name in the module through full scope analysis; we only need
to know what a handful of dotted expressions refer to, so we record the import statements and resolve the
head of a dotted expression through them.
"""

from __future__ import annotations

from dataclasses import dataclass

from amplint.lazy import libcst as cst

from amplint.vocabulary import ACCELERATOR_CLASSES, ACCELERATOR_NAMES, AUTOCAST_METHOD, CLAMP_FUNCTIONS, \
    CLAMP_METHODS, EVAL_METHOD, LOAD_STATE_DICT, PARAMETERS_METHODS, REGISTER_HOOK, STEP_METHOD, ZERO_GRAD, \
    AUTOCAST_LEGACY, AUTOCAST_NEW, AUTOGRAD_BACKWARD, \
    CLIP_FUNCTIONS, DEPRECATED_AMP, DEPRECATED_AMP_MODULES, ENABLE_GRAD_CONTEXTS, FLOAT32_DTYPES, GRAD_SCALERS, \
    LOW_DTYPES, NO_GRAD_CONTEXTS, NOT_OPTIMIZER_MODULES, NULL_CONTEXTS, OPTIMIZER_FUNCTIONS, OPTIMIZER_MODULES, \
    PARTIAL, SET_GRAD_ENABLED_FUNCTIONS, STAR_EXPORTS, TORCH_DEVICE, is_known_optimizer_class, may_build_optimizer

EXIT_STACKS = frozenset({"contextlib.ExitStack", "contextlib.AsyncExitStack"})
ENTER_CONTEXT = "enter_context"  # `stack.enter_context(cm)`: `cm` entered until the stack's `with` block ends
__all__ = ["ACCELERATOR_CLASSES", "AUTOCAST_METHOD", "CLAMP_FUNCTIONS", "CLAMP_METHODS", "EVAL_METHOD",
           "LOAD_STATE_DICT", "PARAMETERS_METHODS", "REGISTER_HOOK", "STEP_METHOD", "ZERO_GRAD", "ACCELERATOR_NAMES",
           "AUTOCAST_LEGACY", "AUTOCAST_NEW", "AUTOGRAD_BACKWARD", "CLIP_FUNCTIONS",
           "DEPRECATED_AMP", "DEPRECATED_AMP_MODULES", "ENABLE_GRAD_CONTEXTS", "FLOAT32_DTYPES", "GRAD_SCALERS",
           "LOW_DTYPES",
           "NO_GRAD_CONTEXTS", "NOT_OPTIMIZER_MODULES", "NULL_CONTEXTS", "OPTIMIZER_FUNCTIONS", "OPTIMIZER_MODULES",
           "PARTIAL", "SET_GRAD_ENABLED_FUNCTIONS", "STAR_EXPORTS", "TORCH_DEVICE", "is_known_optimizer_class",
           "may_build_optimizer", "EXIT_STACKS", "ENTER_CONTEXT", "dotted_name", "code_words", "ImportBinding", "ImportMap"]


def dotted_name(node: cst.CSTNode) -> str | None:
    """`a.b.c` for a Name/Attribute chain, None for anything else (calls, subscripts...)."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def code_words(node: cst.CSTNode) -> list[str]:
    """What a piece of code says, without its comments and layout: each dotted name (`torch.cuda.amp`), each
    string's value and each number, in source order. A string that is a statement of its
    own (a docstring) says nothing to the program and is left out. Rules that weigh words of code (a test naming
    a version, an AMP switch, a float16 dtype) read these, never the text, where a comment would count as code."""
    words: list[str] = []
    pending = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Expr) and isinstance(current.value, (cst.SimpleString, cst.ConcatenatedString,
                                                                         cst.FormattedString)):
            continue
        if isinstance(current, (cst.Name, cst.Attribute)):
            dotted = dotted_name(current)
            if dotted is not None:
                words.append(dotted)
                continue
        elif isinstance(current, cst.SimpleString):
            value = current.evaluated_value
            words.append(value if isinstance(value, str) else value.decode("latin-1"))
            continue
        elif isinstance(current, cst.FormattedStringText):
            words.append(current.value)
            continue
        elif isinstance(current, (cst.Integer, cst.Float, cst.Imaginary)):
            words.append(current.value)
            continue
        elif isinstance(current, (cst.Comment, cst.TrailingWhitespace, cst.EmptyLine)):
            continue
        pending.extend(reversed(current.children))
    return words


@dataclass(eq=False)
class ImportBinding:
    """One local name bound by one import statement: `from torch.cuda.amp import autocast as ac` binds `ac` to
    `torch.cuda.amp.autocast`. `alias` is None for a name a star import binds (`from torch.cuda.amp import *`)."""

    local: str
    qualified: str
    statement: cst.Import | cst.ImportFrom
    alias: cst.ImportAlias | None
    line: cst.SimpleStatementLine | None  # the line holding the statement, when it is a line of its own kind
    module_level: bool  # outside every function and class body


class ImportMap:
    """Local names bound by import statements -> the qualified names they stand for: the one import model of
    the facts layer. `bindings` holds what each name stands for after the last import of it (what `qualify`
    reads); `records` holds every binding of each name with the statement that made it, in source order."""

    def __init__(self) -> None:
        self.bindings: dict[str, str] = {}
        self.records: dict[str, list[ImportBinding]] = {}

    def add(self, node: cst.Import | cst.ImportFrom, line: cst.SimpleStatementLine | None = None,
            module_level: bool = True) -> None:
        for local, qualified, alias in _bound_names(node):
            self.bindings[local] = qualified
            self.records.setdefault(local, []).append(
                ImportBinding(local, qualified, node, alias, line, module_level))
        if isinstance(node, cst.ImportFrom) and isinstance(node.names, cst.ImportStar) and \
                _star_module(node) not in STAR_EXPORTS:
            # An unknown module's `*` may rebind any name: what an earlier star import bound is no longer known.
            for local, records in self.records.items():
                if records[-1].alias is None:
                    self.bindings.pop(local, None)

    def qualify(self, node: cst.CSTNode) -> str | None:
        """The qualified name of a dotted expression whose head was imported, else None."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        target = self.bindings.get(head)
        if target is None:
            return None
        return f"{target}.{rest}" if rest else target

    def star_imports(self) -> list[cst.ImportFrom]:
        """The `from <module> import *` statements whose names are known (STAR_EXPORTS), in source order."""
        found = {id(r.statement): r.statement for records in self.records.values() for r in records
                 if r.alias is None}
        return list(found.values())


def _star_module(node: cst.ImportFrom) -> str | None:
    return None if node.relative or node.module is None else dotted_name(node.module)


def _bound_names(node: cst.Import | cst.ImportFrom) -> list[tuple[str, str, cst.ImportAlias | None]]:
    """(local name, qualified name, its alias) for each name an import statement binds (relative imports and
    star imports of unknown modules bind nothing known)."""
    if isinstance(node, cst.Import):
        bound = []
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                bound.append((alias.asname.name.value, full, alias))
            else:
                head = full.split(".", 1)[0]
                bound.append((head, head, alias))
        return bound
    module = _star_module(node)
    if module is None:
        return []
    if isinstance(node.names, cst.ImportStar):
        return [(name, f"{module}.{name}", None) for name in STAR_EXPORTS.get(module, ())]
    bound = []
    for alias in node.names:
        name = dotted_name(alias.name)
        if name is None:
            continue
        local = name
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            local = alias.asname.name.value
        bound.append((local, f"{module}.{name}", alias))
    return bound
