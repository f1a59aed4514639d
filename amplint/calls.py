"""What a call is and what it does: one neutral shape, one classifier, for both walkers.

The libcst facts (amplint/facts/, within a module) and the `ast` project index (amplint/index/, across modules)
each turn a call of their own tree into a `CallShape`: plain data (the callee's names, the method called, the
arguments as dotted names or literals), no tree. The functions below say what a call does from its shape alone,
so that a call means one thing in a module and across modules:

- `conversion`: what a tensor method makes of its receiver's dtype (`CONVERTS_FLOAT32`, `CONVERTS_LOW`,
  `CONVERTS_UNKNOWN`, or None); `is_float32_cast`: shown to give float32 (or wider);
- `float32_dtype_keyword`: an op given a float32 `dtype=` (`torch.sum(x, dtype=torch.float32)`);
- `converts_to_half`: makes what it is called on float16 (`model.half()`, `model.to(torch.float16)`);
- `grad_mode`: the gradient mode a context or decorator sets (no_grad, inference_mode, enable_grad,
  set_grad_enabled).

A walker decides only how its tree spells a call (`amplint/facts/shapes.py`, `amplint/index/shapes.py`). What
the code does not show stays unknown: `.to(x)` with `x` not shown is no float32 cast, `set_grad_enabled(flag)`
sets no known mode. This module imports the vocabulary only.
"""

from __future__ import annotations

from dataclasses import dataclass

from amplint import vocabulary as vocab
from amplint.vocabulary import (BFLOAT16, CONVERT_METHODS, CONVERTS_FLOAT32, CONVERTS_LOW, CONVERTS_UNKNOWN,
                                ENABLE_GRAD_CONTEXTS, FLOAT, FLOAT16, FLOAT32_CASTS, FLOAT32_DTYPES, FLOAT32_WORDS,
                                HALF, HALF_DTYPES, LOW_CASTS, NO_GRAD_CONTEXTS, SET_GRAD_ENABLED_FUNCTIONS)

NOT_LITERAL = object()  # `Value.literal` of an argument that is no literal


@dataclass(frozen=True)
class Value:
    """An argument, as far as the classifier reads one: its dotted text as written (`torch.float32`,
    `self.device`) and the qualified names it may stand for through the module's imports, or the value of a
    literal (`False`, `None`, `"cuda"`, `3`). `string`: a string, literal or formatted (an f-string's value is not
    known). `starred`: `*args` or `**kwargs`, whose values are not known. Nothing is known of anything else (a
    call, a subscript, arithmetic)."""

    dotted: str | None = None
    qualified: tuple[str, ...] = ()
    literal: object = NOT_LITERAL
    string: bool = False
    starred: bool = False


UNKNOWN_VALUE = Value()
STARRED = Value(starred=True)


@dataclass(frozen=True)
class CallShape:
    """A call (or a callee named without a call: a decorator `@torch.no_grad`), as both walkers see it.

    `dotted`: the callee as written (`torch.no_grad`, `self.model.to`), None when it is no dotted name;
    `qualified`: the names the callee may stand for through the module's imports (none when its head is not
    imported; the facts layer knows one, the last import of the name, the index every import of it);
    `method`: the attribute called (`to` of `x.to(...)`, also of `f().to(...)`), None for a plain name;
    `receiver`: the dotted text a method is called on, None when it is no dotted name;
    `args`: the positional arguments in order; `keywords`: (name, value) in order, `**kwargs` as (None, starred);
    `called`: False for a callee named without a call."""

    dotted: str | None = None
    qualified: tuple[str, ...] = ()
    method: str | None = None
    receiver: str | None = None
    args: tuple[Value, ...] = ()
    keywords: tuple[tuple[str | None, Value], ...] = ()
    called: bool = True

    def argument(self, position: int | None, keyword: str) -> Value | None:
        """The argument passed as `keyword=`, else the one at `position` among the positional arguments not
        starred, else None (as Python binds a parameter that may be passed either way)."""
        for name, value in self.keywords:
            if name == keyword:
                return value
        if position is None:
            return None
        positional = [value for value in self.args if not value.starred]
        return positional[position] if position < len(positional) else None

    def is_named(self, qualified: frozenset[str] | dict) -> bool:
        """Does the callee stand for one of these qualified names?"""
        return any(name in qualified for name in self.qualified)


# --- dtypes ---------------------------------------------------------------------------------------------------

def _dtype_text(value: Value) -> str | None:
    """What a conversion reads of an argument: its dotted text, a quote for a string (`"cuda"`), None for a value
    not shown (a call, `*args`)."""
    if value.string:
        return '"'
    return None if value.starred else value.dotted


def conversion(shape: CallShape) -> str | None:
    """What the tensor method call makes of its receiver's dtype, from the arguments it may read a dtype from (its
    positional arguments, `dtype=`, `**kwargs`): `CONVERTS_FLOAT32` (`.float()`, `.double()`, `.to(torch.float32)`,
    `.type(torch.float64)`), `CONVERTS_LOW` (`.half()`, `.to(torch.bfloat16)`), `CONVERTS_UNKNOWN` (`.to(x)`,
    `.type(x)` with `x` not shown to be a device: it may be a dtype, which one is not shown), None when the method
    converts no dtype (`.to("cuda")`, `.to(device)`, any other method, a plain function)."""
    method = shape.method
    if method is None:
        return None
    if method in FLOAT32_CASTS:
        return CONVERTS_FLOAT32
    if method in LOW_CASTS:
        return CONVERTS_LOW
    if method not in CONVERT_METHODS:
        return None
    dtypes = [_dtype_text(value) for value in shape.args] + [
        _dtype_text(value) for name, value in shape.keywords if name is None or name == vocab.DTYPE]
    if not dtypes:
        return None
    for text in dtypes:
        last = (text or "").rsplit(".", 1)[-1]
        if text and ("." in text or text == FLOAT) and last in FLOAT32_WORDS:
            return CONVERTS_FLOAT32  # `torch.float32`, `th.double`, the builtin `float` (float64)
        if text and "." in text and last in (BFLOAT16, FLOAT16, HALF):
            return CONVERTS_LOW
    first = dtypes[0]
    if first is None:
        return CONVERTS_UNKNOWN
    if first[:1] in ("'", '"') or first.lower().rsplit(".", 1)[-1] in ("dev", "device") or \
            "device" in first.lower():
        return None  # `.to("cuda")`, `.to(device)`, `.to(self.device)`: placement only
    return CONVERTS_UNKNOWN


def is_float32_cast(shape: CallShape) -> bool:
    """`.float()`, `.double()`, `.to(torch.float32)`, `.to(dtype=torch.float32)`, `.type(torch.float64)`: shown to
    give float32 (or wider). A `.to(x)` whose `x` the code does not show is not one."""
    return conversion(shape) == CONVERTS_FLOAT32


def float32_dtype_keyword(shape: CallShape) -> bool:
    """`torch.sum(x, dtype=torch.float32)`: the op is given a float32 `dtype=` (it converts its input itself)."""
    return any(name == vocab.DTYPE and (value.dotted or "") in FLOAT32_DTYPES for name, value in shape.keywords)


def converts_to_half(shape: CallShape) -> bool:
    """`x.half()`, `x.to(torch.float16)`, `x.to(device, torch.half)`, `x.to(dtype=torch.float16)`,
    `x.type(torch.half)`: makes what it is called on float16 (the dtype resolved through the imports)."""
    if shape.method == HALF:
        return not shape.args and not shape.keywords
    if shape.method not in CONVERT_METHODS:
        return False
    dtype = shape.argument(None, vocab.DTYPE)
    candidates = [dtype] if dtype is not None else shape.args
    return any(name in HALF_DTYPES for value in candidates for name in value.qualified)


# --- gradient mode ----------------------------------------------------------------------------------------------

GRAD_MODE_CALLEES = NO_GRAD_CONTEXTS | ENABLE_GRAD_CONTEXTS | SET_GRAD_ENABLED_FUNCTIONS  # all `grad_mode` reads


def grad_mode(shape: CallShape) -> bool | None:
    """The gradient mode a context or decorator sets: False for `no_grad`, `inference_mode()`,
    `set_grad_enabled(False)`; True for `enable_grad`, `set_grad_enabled(True)`, `inference_mode(False)` (which
    turns gradients on: torch's InferenceMode(false)); None for anything else, or a mode known only at run time
    (`set_grad_enabled(flag)`)."""
    if shape.is_named(NO_GRAD_CONTEXTS):
        mode = shape.argument(0, "mode") if shape.called else None
        return True if mode is not None and mode.literal is False else False
    if shape.is_named(ENABLE_GRAD_CONTEXTS):
        return True
    if shape.is_named(SET_GRAD_ENABLED_FUNCTIONS) and shape.called:
        mode = shape.argument(0, "mode")
        return mode.literal if mode is not None and isinstance(mode.literal, bool) else None
    return None


def innermost_grad_mode(shapes) -> tuple[int, bool] | None:
    """(position, mode) of the context or decorator that decides the gradient mode among `shapes`, innermost
    first: the first that sets a known mode (`enable_grad()` inside `no_grad()` turns gradients back on), None
    when none does."""
    for position, shape in enumerate(shapes):
        mode = grad_mode(shape)
        if mode is not None:
            return position, mode
    return None
