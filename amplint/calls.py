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
  set_grad_enabled);
- `autocast_call`: what a call of torch's autocast opens (enabled, device, dtype, by its signature);
  `written_disabled`: an autocast opener written disabled; `scaler_enabled`: a GradScaler construction's flag;
- `effect`: what the call is in a training step (`Effect`: a backward, a clip, an unscale, a scaler's or an
  optimizer's step...), given what only the walker can know of the names involved (is the receiver a GradScaler,
  an optimizer, is the callee bound to a clip) as plain data; `function_effects`: what a function making the
  call does, in the project index's terms.

An object is known by what the code does with it, never by its spelling: a name an `import` statement binds is a
module (`CallShape.on_module`), so `hm.backward(scaler, loss)` of `import helpers as hm` is a call of the module's
function, never a tensor's `backward`, and `hm.step()` no optimizer's.

A walker decides only how its tree spells a call (`amplint/facts/shapes.py`, `amplint/index/shapes.py`). What
the code does not show stays unknown: `.to(x)` with `x` not shown is no float32 cast, `set_grad_enabled(flag)`
sets no known mode. This module imports the vocabulary only.
"""

from __future__ import annotations

from dataclasses import dataclass

from amplint import vocabulary as vocab
from amplint.vocabulary import (AUTOGRAD_BACKWARD, BFLOAT16, CLIP_FUNCTIONS, CONVERT_METHODS, CONVERTS_FLOAT32,
                                CONVERTS_LOW, CONVERTS_UNKNOWN, ENABLE_GRAD_CONTEXTS, FLOAT, FLOAT16, FLOAT32_CASTS,
                                FLOAT32_DTYPES, FLOAT32_WORDS, GRAD_SCALERS, HALF, HALF_CONVERTERS, HALF_DTYPES,
                                LOW_CASTS, NO_GRAD_CONTEXTS, SET_GRAD_ENABLED_FUNCTIONS, Effect)

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
    `called`: False for a callee named without a call;
    `on_module`: the receiver is a module, a name an `import` statement binds (`hm` of `import helpers as hm`,
    `a` or `a.b` of `import a.b`) and no `from` import binds: the method is a function of the module;
    `inner`: for a method called on the result of a call (`scaler.scale(loss).backward()`), that call's shape (one
    level: its own `inner` is not built)."""

    dotted: str | None = None
    qualified: tuple[str, ...] = ()
    method: str | None = None
    receiver: str | None = None
    args: tuple[Value, ...] = ()
    keywords: tuple[tuple[str | None, Value], ...] = ()
    called: bool = True
    on_module: bool = False
    inner: CallShape | None = None

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


# --- autocast and GradScaler flags -------------------------------------------------------------------------------

def _flag(value: Value | None) -> bool | None:
    """A flag argument: its literal True or False, True when it is not given (the default), None when the code
    does not show it (a name, an expression)."""
    if value is None:
        return True
    return value.literal if isinstance(value.literal, bool) else None


@dataclass(frozen=True)
class Autocast:
    """What a call of torch's autocast opens, as its arguments show it: `enabled` (`_flag`), `device` (the literal
    `device_type`, or the legacy spelling's own: `torch.cpu.amp.autocast`), `dtype` (the argument, None when not
    given), `low` (the low dtype it names: "bfloat16", "float16", else None), `kwargs` (`**kwargs` passed: any
    argument may be in it)."""

    enabled: bool | None
    device: str | None
    dtype: Value | None
    low: str | None
    kwargs: bool

    @property
    def runs_in(self) -> str | None:
        """The low dtype the region runs ops in: the one named, else (no dtype given, and none in `**kwargs`) the
        device's default (CPU's bfloat16, CUDA's float16); None when the code does not show it."""
        if self.dtype is not None:
            return self.low
        return None if self.kwargs else vocab.DEFAULT_LOW_DTYPE.get(self.device)


def torch_autocast(shape: CallShape) -> str | None:
    """The qualified name of torch's autocast the callee stands for, if it is one (`vocab.is_autocast`)."""
    return next((name for name in shape.qualified if vocab.is_autocast(name)), None)


def autocast_call(shape: CallShape, qualified: str | None = None) -> Autocast:
    """The call read by torch's autocast signature: the legacy one (`torch.cuda.amp.autocast(enabled, dtype)`)
    when `qualified` (by default the callee's own name, `torch_autocast`) is a legacy spelling, else
    `torch.autocast(device_type, dtype, enabled)` (also for an opener of another name: a partial of torch's
    autocast, its arguments first in `shape` (`bound`), a framework's or the project's opener)."""
    qualified = qualified if qualified is not None else torch_autocast(shape)
    legacy = vocab.AUTOCAST_LEGACY.get(qualified) if qualified is not None else None
    if legacy is not None:
        enabled, device = shape.argument(0, vocab.ENABLED), legacy
    else:
        enabled = shape.argument(2, vocab.ENABLED)
        given = shape.argument(0, vocab.DEVICE_TYPE)
        device = given.literal if given is not None and given.string and isinstance(given.literal, str) else None
    dtype = shape.argument(1, vocab.DTYPE)
    low = next((vocab.LOW_DTYPES[name] for name in dtype.qualified if name in vocab.LOW_DTYPES), None) \
        if dtype is not None else None
    kwargs = any(name is None for name, _ in shape.keywords)
    return Autocast(_flag(enabled), device, dtype, low, kwargs)


def bound(partial: CallShape, call: CallShape) -> CallShape:
    """The call of `functools.partial(f, *args, **kwargs)` (`partial`) as a call of `f`: the partial's arguments
    after `f`, then the call's own (keywords in that order too)."""
    return CallShape(call.dotted, call.qualified, call.method, call.receiver, partial.args[1:] + call.args,
                     partial.keywords + call.keywords, call.called, call.on_module, call.inner)


def written_disabled(shape: CallShape) -> bool:
    """An autocast opener written disabled: torch's autocast given a literal `enabled=False` (where its signature
    takes it, `autocast_call`); any other opener (a partial of it, a framework's, a factory of the project: where
    its arguments land is not shown) given a literal False, as `enabled=` or positionally."""
    if torch_autocast(shape) is not None:
        return autocast_call(shape).enabled is False
    return any(name == vocab.ENABLED and value.literal is False for name, value in shape.keywords) or any(
        value.literal is False for value in shape.args)


def scaler_enabled(shape: CallShape) -> bool | None:
    """The `enabled` flag of a GradScaler construction (`_flag`): the sixth positional argument (the fifth of the
    deprecated `torch.cuda.amp.GradScaler`, which takes no device) or `enabled=`."""
    deprecated = any(name.startswith(tuple(vocab.DEPRECATED_AMP_MODULES)) for name in shape.qualified)
    return _flag(shape.argument(4 if deprecated else 5, vocab.ENABLED))


# --- what a call is in a training step --------------------------------------------------------------------------

# A GradScaler's methods (other than `unscale_`, which only a scaler has) and what a call of one is: the methods
# whose receiver a walker asks about (is it a GradScaler?) before `effect`.
SCALER_METHOD_EFFECTS = {vocab.STEP: Effect.SCALER_STEP, vocab.UPDATE: Effect.SCALER_UPDATE,
                         vocab.SCALE: Effect.SCALER_SCALE, vocab.LOAD_STATE_DICT: Effect.SCALER_LOAD}
# The methods and the callees (qualified) `effect` may classify: a walker builds no shape for any other call.
EFFECT_METHODS = frozenset({vocab.BACKWARD, vocab.MANUAL_BACKWARD, vocab.UNSCALE, vocab.ZERO_GRAD, vocab.EVAL,
                            *SCALER_METHOD_EFFECTS, *HALF_CONVERTERS})
EFFECT_CALLEES = CLIP_FUNCTIONS | GRAD_SCALERS | AUTOGRAD_BACKWARD | GRAD_MODE_CALLEES


def effect(shape: CallShape, scaler: bool = False, optimizer: bool = False, clip: bool = False) -> str | None:
    """What the call is in a training step (an `Effect`), None when it is none of these:

    - `CLIP`: torch's clip function (`clip_grad_norm_`, ...) under any spelling, or a callee the walker knows is
      bound to one (`clip`: `self.clip_fn = partial(clip_grad_norm_, max_norm=1)`, then `self.clip_fn(params)`);
    - `BUILDS_SCALER`: a GradScaler constructed (`enabled=False` too: `scaler_disabled` tells);
    - `BACKWARD`: `torch.autograd.backward(...)`, `torch.autograd.grad(...)`,
      `torch.distributed.autograd.backward(...)` (`AUTOGRAD_BACKWARD`), a method `x.backward()` (not
      `torch.backward`, `autograd.backward` spelled as a method of the module); `MANUAL_BACKWARD`:
      `self.manual_backward(loss)` (Lightning's, which scales the loss itself);
    - `UNSCALE`: `x.unscale_(...)` (only a GradScaler has the method);
    - on a receiver the walker knows holds a GradScaler (`scaler`): `SCALER_STEP`, `SCALER_UPDATE`, `SCALER_SCALE`,
      `SCALER_LOAD` (`load_state_dict`); any other `x.step(...)`: `OPTIMIZER_STEP` on a receiver the walker knows is
      an optimizer (`optimizer`), else `STEP` (a scheduler's, or an optimizer's not shown to be one);
    - `ZERO_GRAD`: `x.zero_grad()` (an optimizer's, or a module's: what shows an optimizer by its use);
    - `HALF_MODEL`: `converts_to_half`; `EVAL`: `x.eval()`; `ENABLE_GRAD`: a call setting gradients on
      (`grad_mode`).

    A method of a module (`on_module`: `hm.backward(scaler, loss)`, `hm.step()` of `import helpers as hm`) is a
    function the module defines: none of the methods above, whatever its name; torch's functions are known by
    their qualified names (`torch.autograd.backward(...)` of `import torch.autograd`)."""
    if clip or shape.is_named(CLIP_FUNCTIONS):
        return Effect.CLIP
    if shape.is_named(GRAD_SCALERS):
        return Effect.BUILDS_SCALER
    if shape.is_named(AUTOGRAD_BACKWARD):
        return Effect.BACKWARD
    method = shape.method
    if method is not None and not shape.on_module:
        if method == vocab.BACKWARD:
            if (shape.receiver or "").rsplit(".", 1)[-1] not in (vocab.TORCH, vocab.AUTOGRAD):
                return Effect.BACKWARD
        elif method == vocab.MANUAL_BACKWARD:
            return Effect.MANUAL_BACKWARD
        elif method == vocab.UNSCALE:
            return Effect.UNSCALE
        elif method == vocab.ZERO_GRAD:
            return Effect.ZERO_GRAD
        elif scaler and method in SCALER_METHOD_EFFECTS:
            return SCALER_METHOD_EFFECTS[method]
        elif method == vocab.STEP:
            return Effect.OPTIMIZER_STEP if optimizer else Effect.STEP
        elif method in HALF_CONVERTERS:
            if converts_to_half(shape):
                return Effect.HALF_MODEL
        elif method == vocab.EVAL:
            if not shape.args:
                return Effect.EVAL
    return Effect.ENABLE_GRAD if grad_mode(shape) is True else None


def may_have_effect(method: str | None, qualified) -> bool:
    """Can `effect` classify a call of this method (None: a plain function) or callee (its qualified names)? A
    walker asks before it builds a shape; a callee bound to a clip is the walker's to know."""
    return method in EFFECT_METHODS or any(name in EFFECT_CALLEES for name in qualified)


# What a function making a call of the effect does, in the project index's terms (`Effect`, amplint/index/): an
# optimizer's step is a step; Lightning's `manual_backward` runs a backward; a scaler's `scale`, `load_state_dict`
# its construction (the index's `builds_scaler` is its own: not written disabled) and a `zero_grad()` are no fact of
# a function.
_FUNCTION_EFFECTS = {Effect.OPTIMIZER_STEP: (Effect.STEP, Effect.OPTIMIZER_STEP),
                     Effect.MANUAL_BACKWARD: (Effect.BACKWARD,), Effect.SCALER_SCALE: (), Effect.SCALER_LOAD: (),
                     Effect.BUILDS_SCALER: (), Effect.ZERO_GRAD: (), None: ()}


def function_effects(kind: str | None) -> tuple[str, ...]:
    """What a function does by making a call that is `kind` (an `effect`): the facts the project index records of
    it and the facts layer's helpers read (amplint/facts/reach.py)."""
    return _FUNCTION_EFFECTS.get(kind, (kind,))


def scale_call(shape: CallShape | None) -> bool:
    """`scaler.scale(loss)`: a call of a method `scale` (a GradScaler's when its receiver is one), not a module's
    function; what a backward's receiver (`shape.inner`) is for the backward to be scaled."""
    return shape is not None and shape.called and shape.method == vocab.SCALE and not shape.on_module
