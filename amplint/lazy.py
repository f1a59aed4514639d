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
    return type(mixin.__name__, (mixin, libcst.CSTVisitor), {"__module__": mixin.__module__, "__doc__": mixin.__doc__})
