"""AMP014 autocast-device-mismatch."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts import ModuleFacts
from amplint.facts.devices import CPU_LEGACY, cpu_float32, device_suspect_possible, module_device, torch_device
from amplint.facts.model import Call
from amplint.facts.module import call_argument, literal_bool
from amplint.facts.names import AUTOCAST_LEGACY, AUTOCAST_NEW, FLOAT32_DTYPES, LOW_DTYPES, PARTIAL
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask, Summary
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet


def _equal() -> cst.AssignEqual:
    """`=` of a keyword argument, without spaces."""
    return cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


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
                finding = self._check_call(facts, call)
            elif call.qualified in AUTOCAST_LEGACY:
                finding = self._cpu_float32(facts, call)
            elif call.qualified in PARTIAL and call.node.args and call.node.args[0].keyword is None \
                    and facts.imports.qualify(call.node.args[0].value) in AUTOCAST_NEW:
                device = call_argument(list(call.node.args[1:]), 0, vocab.DEVICE_TYPE)
                finding = self._torch_device(facts, call, device) if device is not None else None
            else:
                continue
            if finding is not None:
                yield finding

    # the checks -------------------------------------------------------------------------------------
    def _check_call(self, facts: ModuleFacts, call: Call) -> Finding | None:
        node = call.node
        device = call_argument(node, 0, vocab.DEVICE_TYPE)
        if device is None:
            if any(arg.star for arg in node.args):
                return None
            fix = self._add_device(facts, call, None)
            message = f"`{snippet(facts, node, MESSAGE_SNIPPET)}` has no `device_type`: entering it raises TypeError"
            return Finding(node, message, fix, help=None if fix else (
                "Pass the device first, for example `torch.autocast(\"cuda\", ...)` or "
                "`torch.autocast(x.device.type, ...)`"))
        positional = node.args[0].keyword is None and not node.args[0].star
        qualified = facts.imports.qualify(device)
        if positional and (qualified in LOW_DTYPES or qualified in FLOAT32_DTYPES):
            fix = self._add_device(facts, call, vocab.DTYPE)
            return Finding(node, (
                f"`{snippet(facts, node, MESSAGE_SNIPPET)}` passes the dtype `{snippet(facts, device, 24)}` as the "
                f"device type: it raises ValueError"
            ), fix, help=None if fix else f"Write `torch.autocast(<device type>, dtype={snippet(facts, device)})`")
        if positional and literal_bool(device) is not None:
            fix = self._add_device(facts, call, vocab.ENABLED)
            return Finding(node, (
                f"`{snippet(facts, node, MESSAGE_SNIPPET)}` passes `{device.value}` as the device type (the legacy "
                f"`enabled` came first): it raises ValueError"
            ), fix, help=None if fix else f"Write `torch.autocast(<device type>, enabled={device.value})`")
        return self._torch_device(facts, call, device) or self._cpu_float32(facts, call)

    def _torch_device(self, facts: ModuleFacts, call: Call, device: cst.BaseExpression) -> Finding | None:
        found = torch_device(facts, call, device)
        if found is None:
            return None
        replacement = (cst.Attribute(value=device, attr=cst.Name("type")) if found.kind is None
                       else cst.SimpleString(f"{found.quote}{found.kind}{found.quote}"))
        origin = f" (line {found.line})" if found.line is not None else ""
        message = (f"`{snippet(facts, device, 32)}` is a `torch.device`{origin}, not a `device_type` string: "
                   f"it raises ValueError")
        fix = FixPlan(f"Pass `{facts.module.code_for_node(replacement)}`",
                      lambda: replace_nodes(facts.module, {device: replacement}))
        return Finding(device, message, fix)

    def _cpu_float32(self, facts: ModuleFacts, call: Call) -> Finding | None:
        found = cpu_float32(facts, call)
        if found is None:
            return None
        node = call.node
        message = (f"`{snippet(facts, node, MESSAGE_SNIPPET)}` asks CPU autocast for float32: it warns and runs "
                   f"without autocast")
        fix = self._disable(facts, node, *found)
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
        found = module_device(facts, call.node)
        node = call.node
        if found is None:
            return None
        device = found[1] if found[1] is not None else cst.SimpleString(f'"{found[0]}"')
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


def _append(args: list[cst.Arg], new: cst.Arg) -> list[cst.Arg]:
    if not args:
        return [new]
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        return [*args, new]
    return [*args[:-1], last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), new]
