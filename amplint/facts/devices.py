"""The device a call of torch's autocast names as its `device_type`, and the device the module's other regions and
GradScalers name.

torch.autocast takes the device type as a string first (`"cuda"`, `device.type`). The questions: is what stands
there a `torch.device` (`torch_device`: built in place, or a name every assignment of binds one); does a CPU region
ask for float32, which CPU autocast ignores (`cpu_float32`, its flags read by `calls.autocast_call`); which one
device every other autocast region and GradScaler of the module names (`module_device`), for a region naming none.
The screen asks the same of an `ast` call (`device_suspect`, `device_suspect_possible`) before libcst parses.
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass

from amplint.lazy import libcst as cst

from amplint import calls
from amplint import vocabulary as vocab
from amplint.facts.collect import target_names
from amplint.facts.model import Call
from amplint.facts.module import ModuleFacts, call_argument, literal_bool, literal_string
from amplint.facts.names import AUTOCAST_LEGACY, AUTOCAST_NEW, FLOAT32_DTYPES, GRAD_SCALERS, LOW_DTYPES, \
    TORCH_DEVICE, dotted_name
from amplint.index.summary import DTYPE_NAMES, PARTIAL_API, argument, dotted, is_float32_name, last_name

CPU_LEGACY = [name for name, device in AUTOCAST_LEGACY.items() if device == vocab.CPU]  # legacy CPU autocast


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


def device_suspect(call: ast.Call, device_names: set[str], device_parameters: set[str]) -> bool:
    """Can this autocast call name a wrong device? (Conservative: see `device_suspect_possible`.)"""
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


@dataclass(frozen=True)
class TorchDevice:
    """A `device_type` argument that is a `torch.device`. Built in place: `kind`, the device type of
    `torch.device("cuda:0")` given only that string ("cuda", written with `quote`), else None (its `.type` is the
    string). Bound to a name every assignment of binds one: `line`, of the last assignment."""

    kind: str | None = None
    quote: str = '"'
    line: int | None = None


def torch_device(facts: ModuleFacts, call: Call, device: cst.BaseExpression) -> TorchDevice | None:
    """Is `device`, the `device_type` of the autocast `call`, a `torch.device`? None when it is not, or not known
    to be: a parameter, loop or `with ... as` name of the function holds what its callers pass (an annotation
    `device: torch.device` is no fact: callers passing "cuda" make `device.type` raise)."""
    if isinstance(device, cst.Call) and facts.imports.qualify(device.func) in TORCH_DEVICE:
        literal = literal_string(call_argument(device, 0, "type"))
        if literal is not None and len(device.args) == 1:
            quote = device.args[0].value.quote if isinstance(device.args[0].value, cst.SimpleString) else '"'
            return TorchDevice(literal.split(":", 1)[0], quote)
        return TorchDevice()
    key = dotted_name(device)
    if key is None or ("." not in key and key in _locally_bound(call)):
        return None
    bindings = facts.bindings(key, call.frame)
    if bindings and all(isinstance(a.value, cst.Call) and facts.imports.qualify(a.value.func) in TORCH_DEVICE
                        for a in bindings):
        return TorchDevice(line=facts.line_of(bindings[-1].value))
    return None


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
            names.update(target_names(loop.target))

        def visit_CompFor(self, comp: cst.CompFor) -> None:
            names.update(target_names(comp.target))

        def visit_WithItem(self, item: cst.WithItem) -> None:
            if item.asname is not None:
                names.update(target_names(item.asname.name))

        def visit_NamedExpr(self, named: cst.NamedExpr) -> None:
            names.update(target_names(named.target))

    node.visit(Binders())
    return frozenset(names)


def cpu_float32(facts: ModuleFacts, call: Call) -> tuple[cst.BaseExpression, cst.BaseExpression | None] | None:
    """For a call of torch's autocast on CPU (`device_type="cpu"`, `torch.cpu.amp.autocast`) asking for a float32
    dtype, not written disabled (`calls.autocast_call`): its `dtype` argument and its `enabled` one (None when not
    given); None for any other call."""
    opened = calls.autocast_call(facts.shape(call.node), call.qualified)
    if opened.device != vocab.CPU or opened.enabled is False or opened.dtype is None \
            or not any(name in FLOAT32_DTYPES for name in opened.dtype.qualified):
        return None
    enabled_position = 0 if call.qualified in AUTOCAST_LEGACY else 2  # the signatures `autocast_call` reads
    return call_argument(call.node, 1, vocab.DTYPE), call_argument(call.node, enabled_position, vocab.ENABLED)


def module_device(facts: ModuleFacts, exclude: cst.Call) -> tuple[str, cst.SimpleString | None] | None:
    """The one literal device every other autocast region and GradScaler of the module names, if any: (the device,
    the first string naming it, None when only a legacy spelling's module or a scaler's default names it)."""
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
    return next(iter(devices.items()))
