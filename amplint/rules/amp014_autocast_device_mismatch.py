"""AMP014 autocast-device-mismatch."""

from __future__ import annotations

import ast
import weakref
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts import ModuleFacts
from amplint.facts.model import Call
from amplint.facts.module import call_argument, literal_bool, literal_string
from amplint.facts.names import (
    AUTOCAST_LEGACY,
    AUTOCAST_NEW,
    FLOAT32_DTYPES,
    GRAD_SCALERS,
    LOW_DTYPES,
    PARTIAL,
    TORCH_DEVICE,
    dotted_name,
)
from amplint.index.summary import DTYPE_NAMES, PARTIAL_API, Summary, argument, dotted, is_float32_name, last_name
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet

CPU_LEGACY = [name for name, device in AUTOCAST_LEGACY.items() if device == vocab.CPU]  # legacy CPU autocast


def _equal() -> cst.AssignEqual:
    """`=` of a keyword argument, without spaces."""
    return cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def device_suspect_possible(summary, autocast, cpu_legacy) -> bool:
    """The screen's question: a call to `autocast` (torch.autocast's qualified names), or a `functools.partial` of
    it, whose device can be wrong: missing (no `*args`/`**kwargs` either), a bool, a dtype's name, a
    `<...>.device(...)` call, a name assigned one or a parameter annotated `<...>.device`; or `"cpu"` with a float32
    dtype; or a call to `cpu_legacy` with a float32 dtype."""
    def exact() -> bool:
        device_names = {name for targets, value in summary.assignments
                        if type(value) is ast.Call and last_name(value.func) == "device" for name in targets}
        suspects = (*summary.api_calls(autocast), *(
            ast.Call(func=call.args[0], args=call.args[1:], keywords=call.keywords)
            for call in summary.api_calls(PARTIAL_API) if call.args and summary.resolves(call.args[0], autocast)))
        for call in suspects:
            if device_suspect(call, device_names, summary.device_parameters):
                return True
        return any(is_float32_name(argument(call, 1, vocab.DTYPE)) for call in summary.api_calls(cpu_legacy))

    return summary.ask(summary.has_token(vocab.AUTOCAST), exact)


class AutocastDeviceMismatch(Rule):
    """## What it does
    Checks for a `device_type` that `torch.autocast` rejects, or a CPU dtype it ignores. That is:
    - no `device_type` at all (`torch.autocast()`, `torch.autocast(dtype=torch.bfloat16)`), or a dtype or a
      bool in its place (`torch.autocast(torch.bfloat16)`, `torch.autocast(True)`, the legacy
      `torch.cuda.amp.autocast` habit);
    - a `torch.device` object as `device_type` (`torch.device("cuda")`, a name bound only to `torch.device(...)`,
      a parameter annotated `torch.device`), also through `functools.partial(torch.autocast, ...)`;
    - `device_type="cpu"` (or `torch.cpu.amp.autocast`) with `dtype=torch.float32`/`float64`.

    Applies to torch >= 1.10 (`torch.autocast`); the messages below were measured with torch 2.13.

    ## Why is this bad?
    The first two fail when the region is entered: `torch.autocast()` raises
    `TypeError: autocast.__init__() missing 1 required positional argument: 'device_type'`, and anything but a
    string raises `ValueError: Expected `device_type` of type `str`, got: `<class 'torch.device'>``
    (`torch.dtype`, `bool` likewise). The third silently turns mixed precision off: CPU autocast supports only
    bfloat16 and float16, so torch warns `UserWarning: In CPU autocast, but the target dtype is not supported.
    Disabling autocast.` every time the region opens and runs it in float32.

    ## Example
    ```python
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(x)
    with torch.autocast("cpu", dtype=torch.float32):
        head = classifier(h)
    ```

    ## Use instead
    ```python
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        loss = model(x)
    with torch.autocast("cpu", enabled=False):
        head = classifier(h)
    ```

    ## Fix safety
    Safe where the fix is sound: a `torch.device` becomes its `.type` (`torch.device("cuda:0")` becomes
    `"cuda"`); `dtype=torch.float32` on CPU becomes `enabled=False`, which is what torch already did, minus the
    warning; a missing device, a dtype or a bool in its place is fixed only when every other autocast region and
    GradScaler of the module names the same device (then the dtype becomes `dtype=` and the bool `enabled=`).
    Otherwise no fix.

    ## Limits
    A name is taken as a `torch.device` only when every assignment to it is `torch.device(...)`; a parameter is
    not, whatever its annotation says (`device: torch.device` called with `"cuda"` has no `.type`): silent.
    `device.type`, strings and unknown values are trusted.
    """

    code = "AMP014"
    name = "autocast-device-mismatch"
    words = (vocab.AUTOCAST,)
    # a call resolving to torch's autocast (through the imports), or a partial of it, with a device that can be
    # wrong; or the legacy CPU autocast with a float32 dtype
    requires = Ask(Summary.imports_module, vocab.TORCH) & Ask(device_suspect_possible, AUTOCAST_NEW, CPU_LEGACY)
    min_torch = "1.10"
    fix = "safe"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for call in facts.calls:
            if call.qualified in AUTOCAST_NEW:
                yield from self._check_call(facts, call, list(call.node.args), legacy=None)
            elif call.qualified in AUTOCAST_LEGACY and AUTOCAST_LEGACY[call.qualified] == "cpu":
                finding = self._cpu_float32(facts, call, list(call.node.args), legacy=True)
                if finding is not None:
                    yield finding
            elif call.qualified in PARTIAL and call.node.args and call.node.args[0].keyword is None \
                    and facts.imports.qualify(call.node.args[0].value) in AUTOCAST_NEW:
                device = call_argument(cst.Call(func=call.node.func, args=call.node.args[1:]), 0, vocab.DEVICE_TYPE)
                if device is not None:
                    finding = self._torch_device(facts, call, device)
                    if finding is not None:
                        yield finding

    # the checks -------------------------------------------------------------------------------------
    def _check_call(self, facts: ModuleFacts, call: Call, args: list[cst.Arg], legacy) -> Iterator[Finding]:
        node = call.node
        device = call_argument(node, 0, vocab.DEVICE_TYPE)
        starred = any(arg.star for arg in args)
        if device is None:
            if not starred:
                fix = self._add_device(facts, call, None)
                message = f"`{snippet(facts, node, MESSAGE_SNIPPET)}` has no `device_type`: entering it raises TypeError"
                yield Finding(node, message, fix, help=None if fix else (
                    "Pass the device first, for example `torch.autocast(\"cuda\", ...)` or "
                    "`torch.autocast(x.device.type, ...)`"))
            return
        positional = args[0].keyword is None and not args[0].star
        qualified = facts.imports.qualify(device)
        if positional and (qualified in LOW_DTYPES or qualified in FLOAT32_DTYPES):
            fix = self._add_device(facts, call, vocab.DTYPE)
            yield Finding(node, (
                f"`{snippet(facts, node, MESSAGE_SNIPPET)}` passes the dtype `{snippet(facts, device, 24)}` as the "
                f"device type: it raises ValueError"
            ), fix, help=None if fix else f"Write `torch.autocast(<device type>, dtype={snippet(facts, device)})`")
            return
        if positional and literal_bool(device) is not None:
            fix = self._add_device(facts, call, vocab.ENABLED)
            yield Finding(node, (
                f"`{snippet(facts, node, MESSAGE_SNIPPET)}` passes `{device.value}` as the device type (the legacy "
                f"`enabled` came first): it raises ValueError"
            ), fix, help=None if fix else f"Write `torch.autocast(<device type>, enabled={device.value})`")
            return
        finding = self._torch_device(facts, call, device)
        if finding is not None:
            yield finding
            return
        finding = self._cpu_float32(facts, call, args, legacy=False)
        if finding is not None:
            yield finding

    def _torch_device(self, facts: ModuleFacts, call: Call, device: cst.BaseExpression) -> Finding | None:
        replacement, origin = self._device_type_of(facts, call, device)
        if replacement is None:
            return None
        message = (f"`{snippet(facts, device, 32)}` is a `torch.device`{origin}, not a `device_type` string: "
                   f"it raises ValueError")
        fix = FixPlan(f"Pass `{facts.module.code_for_node(replacement)}`",
                      lambda: replace_nodes(facts.module, {device: replacement}))
        return Finding(device, message, fix)

    def _device_type_of(self, facts: ModuleFacts, call: Call, device: cst.BaseExpression):
        """(the string expression to pass instead, where the torch.device comes from), or (None, "")."""
        if isinstance(device, cst.Call) and facts.imports.qualify(device.func) in TORCH_DEVICE:
            literal = literal_string(call_argument(device, 0, "type"))
            if literal is not None and len(device.args) == 1:
                quote = device.args[0].value.quote if isinstance(device.args[0].value, cst.SimpleString) else '"'
                return cst.SimpleString(f"{quote}{literal.split(':', 1)[0]}{quote}"), ""
            return cst.Attribute(value=device, attr=cst.Name("type")), ""
        key = dotted_name(device)
        if key is None:
            return None, ""
        if "." not in key and key in _locally_bound(call):
            # A parameter, loop or `with ... as` name of this function: what it holds is up to its callers. An
            # annotation (`device: torch.device`) is no fact: callers passing "cuda" make `device.type` raise.
            return None, ""
        bindings = facts.bindings(key, call.frame)
        if bindings and all(isinstance(a.value, cst.Call) and facts.imports.qualify(a.value.func) in TORCH_DEVICE
                            for a in bindings):
            line = facts.line_of(bindings[-1].value)
            return cst.Attribute(value=device, attr=cst.Name("type")), f" (line {line})"
        return None, ""

    def _cpu_float32(self, facts: ModuleFacts, call: Call, args: list[cst.Arg], legacy: bool) -> Finding | None:
        node = call.node
        if not legacy and literal_string(call_argument(node, 0, vocab.DEVICE_TYPE)) != "cpu":
            return None
        dtype_position, enabled_position = (1, 0) if legacy else (1, 2)
        dtype = call_argument(node, dtype_position, vocab.DTYPE)
        if dtype is None or facts.imports.qualify(dtype) not in FLOAT32_DTYPES:
            return None
        enabled = call_argument(node, enabled_position, vocab.ENABLED)
        if enabled is not None and literal_bool(enabled) is False:
            return None
        message = (f"`{snippet(facts, node, MESSAGE_SNIPPET)}` asks CPU autocast for float32: it warns and runs "
                   f"without autocast")
        fix = self._disable(facts, node, dtype, enabled)
        return Finding(node, message, fix, help=None if fix else (
            "Write `enabled=False` to disable autocast here, or `dtype=torch.bfloat16` for mixed precision"))

    # fixes ------------------------------------------------------------------------------------------
    @staticmethod
    def _disable(facts: ModuleFacts, node: cst.Call, dtype, enabled) -> FixPlan | None:
        """`dtype=torch.float32` -> `enabled=False` (what torch does anyway, without the warning)."""
        drop = {id(dtype), id(enabled)}
        kept, dropped_positional = [], False
        for arg in node.args:
            if id(arg.value) in drop:
                dropped_positional = dropped_positional or arg.keyword is None
                continue
            if dropped_positional and arg.keyword is None:
                return None  # a later positional argument would shift
            kept.append(arg)
        flag = cst.Arg(cst.Name("False"), keyword=cst.Name(vocab.ENABLED), equal=_equal())
        new = node.with_changes(args=_append(kept, flag))
        return FixPlan("Replace the unsupported float32 dtype with `enabled=False`",
                       lambda: replace_nodes(facts.module, {node: new}))

    def _add_device(self, facts: ModuleFacts, call: Call, first_as: str | None) -> FixPlan | None:
        device = _module_device(facts, call.node)
        node = call.node
        if device is None:
            return None
        args = list(node.args)
        if first_as is not None:
            if call_argument(node, None, first_as) is not None:
                return None
            args[0] = args[0].with_changes(keyword=cst.Name(first_as), equal=_equal())
        new_arg = cst.Arg(device)
        if args:
            new_arg = new_arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        new = node.with_changes(args=[new_arg, *args])
        return FixPlan(f"Pass the module's device, `{device.value}`", lambda: replace_nodes(facts.module, {node: new}))


# function frame -> the names it binds without an assignment: each function is read once, however many of its
# autocast calls ask (a frame lives as long as its module's facts).
_BOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _locally_bound(call: Call) -> frozenset[str]:
    """Names the function around `call` binds without an assignment: parameters, loop targets, `with ... as`,
    comprehension variables, `:=`."""
    function = call.frame.function()
    node = function.node if function is not None else None
    if not isinstance(node, (cst.FunctionDef, cst.Lambda)):
        return frozenset()
    if function not in _BOUND:
        _BOUND[function] = _binders(node)
    return _BOUND[function]


def _binders(node: cst.FunctionDef | cst.Lambda) -> frozenset[str]:
    names: set[str] = set()

    class Binders(cst.CSTVisitor):
        def visit_Param(self, param: cst.Param) -> None:
            names.add(param.name.value)

        def visit_For(self, loop: cst.For) -> None:
            names.update(_target_names(loop.target))

        def visit_CompFor(self, comp: cst.CompFor) -> None:
            names.update(_target_names(comp.target))

        def visit_WithItem(self, item: cst.WithItem) -> None:
            if item.asname is not None:
                names.update(_target_names(item.asname.name))

        def visit_NamedExpr(self, named: cst.NamedExpr) -> None:
            names.update(_target_names(named.target))

    node.visit(Binders())
    return frozenset(names)


def _target_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {name for element in target.elements for name in _target_names(element.value)}
    return set()


def _module_device(facts: ModuleFacts, exclude: cst.Call) -> cst.SimpleString | None:
    """The one literal device every other autocast region and GradScaler of the module names, if any."""
    devices: dict[str, cst.SimpleString | None] = {}
    for call in facts.calls:
        node = call.node
        if node is exclude:
            continue
        if call.qualified in AUTOCAST_NEW:
            value = call_argument(node, 0, vocab.DEVICE_TYPE)
            if value is None or (node.args[0].keyword is None and (
                    literal_bool(value) is not None or facts.imports.qualify(value) in {*LOW_DTYPES, *FLOAT32_DTYPES})):
                continue  # another region with the same mistake says nothing about the device
        elif call.qualified in AUTOCAST_LEGACY:
            devices.setdefault(AUTOCAST_LEGACY[call.qualified], None)
            continue
        elif call.qualified in GRAD_SCALERS:
            if call.qualified.startswith(tuple(vocab.DEPRECATED_AMP_MODULES)):
                devices.setdefault(call.qualified.split(".")[1], None)
                continue
            value = call_argument(node, 0, "device")
            if value is None:
                devices.setdefault("cuda", None)
                continue
        else:
            continue
        literal = literal_string(value)
        if literal is None:
            return None  # a device only known at run time: no guess
        devices[literal] = value if devices.get(literal) is None else devices[literal]
    if len(devices) != 1:
        return None
    name, node = next(iter(devices.items()))
    return node if node is not None else cst.SimpleString(f'"{name}"')


def _append(args: list[cst.Arg], new: cst.Arg) -> list[cst.Arg]:
    if not args:
        return [new]
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        return [*args, new]
    return [*args[:-1], last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), new]


def device_suspect(call: ast.Call, device_names: set[str], device_parameters: set[str]) -> bool:
    """Can AMP014 see a wrong device in this autocast call? (Conservative: see `device_suspect_possible`.)"""
    device = argument(call, 0, vocab.DEVICE_TYPE)
    if device is None:
        starred = any(type(arg) is ast.Starred for arg in call.args) or any(k.arg is None for k in call.keywords)
        return not starred
    if type(device) is ast.Constant:
        if device.value == "cpu":
            return is_float32_name(argument(call, 1, vocab.DTYPE))
        return type(device.value) is bool
    if type(device) is ast.Call:
        return last_name(device.func) == "device"
    name = dotted(device)
    return name is not None and (name.rsplit(".", 1)[-1] in DTYPE_NAMES or name in device_names
                                 or name in device_parameters)


