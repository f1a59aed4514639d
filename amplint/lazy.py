"""libcst, imported when first used.

Importing libcst takes about 0.2 s, more than a whole run needs when every file comes from the cache or has no
word of any rule (a pre-commit run on a few files, a warm CI run). So amplint's modules write
`from amplint.lazy import libcst as cst`: a module object that imports libcst the first time one of its
attributes is read. Nothing may read one while the modules are being imported: visitors are written as plain
classes and made libcst visitors where they are used, with `visitor_class`.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from types import ModuleType


def _lazy_module(name: str) -> ModuleType:
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # an `import libcst` elsewhere finds it (and loads it)
    loader.exec_module(module)
    return module


libcst = _lazy_module("libcst")


@functools.lru_cache(maxsize=None)
def visitor_class(mixin: type) -> type:
    """`mixin` (a plain class with libcst's `visit_<Node>`/`leave_<Node>` methods) as a `libcst.CSTVisitor`."""
    namespace = {"__module__": mixin.__module__, "__doc__": mixin.__doc__,
                 "_visits": {}, "_leaves": {}, "_field_hooks": {}}
    return type(mixin.__name__, (mixin, dispatching_visitor()), namespace)


def field_hooks_of(visitor) -> object:
    """The visitor's `field_hooks` (see below) when it is a dispatching visitor whose attribute hooks are
    CSTVisitor's (they only look the field hooks up); None otherwise: then every `on_visit_attribute` /
    `on_leave_attribute` must be called."""
    base = dispatching_visitor()
    kind = type(visitor)
    if isinstance(visitor, base) and kind.on_visit_attribute is base.on_visit_attribute \
            and kind.on_leave_attribute is base.on_leave_attribute:
        return kind.field_hooks
    return None


@functools.lru_cache(maxsize=None)
def dispatching_visitor() -> type:
    """CSTVisitor with its dispatch (`visit_<Node>`, `leave_<Node>`, and through `field_hooks` the
    `visit_<Node>_<field>` hooks) looked up once per visitor class and node type, instead of formatting and
    looking up a name at every node and field (the larger part of a walk's time). Its `on_visit_attribute` and
    `on_leave_attribute` stay CSTVisitor's: `amplint.facts.walk` calls the field hooks directly, and only libcst's
    own `visit` (the few node types walk leaves to it) goes through them."""

    class DispatchingVisitor(libcst.CSTVisitor):
        _visits: dict
        _leaves: dict
        _field_hooks: dict

        def on_visit(self, node) -> bool:
            kind = type(node)
            try:
                method = self._visits[kind]
            except KeyError:
                method = self._visits[kind] = hook(type(self), f"visit_{kind.__name__}")
            return method is None or method(self, node) is not False

        def on_leave(self, original_node) -> None:
            kind = type(original_node)
            try:
                method = self._leaves[kind]
            except KeyError:
                method = self._leaves[kind] = hook(type(self), f"leave_{kind.__name__}")
            if method is not None:
                method(self, original_node)

        @classmethod
        def field_hooks(cls, kind: type, fields: tuple[str, ...]) -> tuple:
            """(field, visit_<Node>_<field> or None, leave_<Node>_<field> or None) for each field of a node
            type: `amplint.facts.walk` calls only the hooks that exist (most fields have none)."""
            hooks = cls._field_hooks.get(kind)
            if hooks is None:
                hooks = cls._field_hooks[kind] = tuple(
                    (field, hook(cls, f"visit_{kind.__name__}_{field}"), hook(cls, f"leave_{kind.__name__}_{field}"))
                    for field in fields)
            return hooks

    return DispatchingVisitor


def hook(visitor_type: type, name: str):
    """The visitor's method of that name; None when it has none or only libcst's empty stub (marked `_is_no_op`,
    as libcst's batched visitor skips them): nothing to call."""
    method = getattr(visitor_type, name, None)
    return None if method is None or getattr(method, "_is_no_op", False) else method


@functools.lru_cache(maxsize=None)
def statement_types() -> frozenset[type]:
    """Every libcst statement node type (`type(node) in statement_types()` is much cheaper than an isinstance
    check against the abstract BaseStatement)."""
    found, pending = set(), [libcst.BaseStatement]
    while pending:
        for subclass in pending.pop().__subclasses__():
            if subclass not in found:
                found.add(subclass)
                pending.append(subclass)
    return frozenset(found)
