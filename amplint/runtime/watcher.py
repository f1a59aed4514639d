"""The run-time watcher: cheap hooks on torch that see the AMP mistakes a program makes as it runs.

What it patches while at least one `watch()` is open (and restores when the last one closes):

- `torch.Tensor.backward`, `torch.autograd.backward`, `torch.autograd.grad`: AMP001 (and the autocast dtype a
  backward of scaled gradients ran under, for AMP013);
- a global optimizer step pre-hook (`torch.optim.optimizer.register_optimizer_step_pre_hook`): AMP002;
- `torch.amp.GradScaler.__init__/scale/unscale_/step/update`: AMP002, AMP003's scaler state, AMP004, AMP005,
  AMP013;
- `torch.nn.utils.clip_grad_norm_/clip_grad_value_` (in `torch.nn.utils` and `torch.nn.utils.clip_grad`):
  AMP003;
- `torch.autocast.__enter__/__exit__`: which regions are open; only while an `enabled=False` region opened
  inside an enabled one is open, a `TorchFunctionMode` looks at every op's arguments (AMP006).

Every hook asks torch's autocast state with a few C calls and walks the stack only when it has a finding.
"""

from __future__ import annotations

import os
import sys
import warnings
import weakref
from contextlib import contextmanager

import torch
import torch.nn.utils
import torch.nn.utils.clip_grad
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode

import amplint
from amplint import vocabulary as vocab
from amplint.runtime import AmpRuntimeError, AmpRuntimeWarning, Finding

__all__ = ["Report", "watch"]

_HALF = (torch.float16, torch.bfloat16)
_DEVICES = tuple(device for device in ("cpu", "cuda", "xpu", "mps", "hpu")
                 if getattr(torch.amp, "is_autocast_available", lambda _: device in ("cpu", "cuda"))(device))
# The frames that are not the user's: torch's and amplint's own files (not the tests beside amplint).
_SKIPPED = tuple(os.path.dirname(os.path.abspath(module.__file__)) + os.sep for module in (torch, amplint))


class Report:
    """What one `watch()` block saw: `findings`, in the order they happened, each site (code, file, line) once."""

    def __init__(self, ignore=()):
        self.ignore = frozenset(code.upper() for code in ignore)
        self.findings: list[Finding] = []
        self._sites: set[tuple[str, str, int]] = set()

    def _add(self, finding: Finding) -> bool:
        if finding.code in self.ignore or finding.site in self._sites:
            return False
        self._sites.add(finding.site)
        self.findings.append(finding)
        return True

    def __bool__(self) -> bool:  # `with watch() as report:` is always true as a value; the findings decide
        return True

    def __repr__(self) -> str:
        return f"Report({self.findings!r})"


# --- where the user is ------------------------------------------------------------------------------------------

def _user_frame() -> tuple[str, int]:
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_SKIPPED) or filename.startswith("<frozen")):
            return filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


# One C call answers "is autocast on anywhere" (torch >= 2.4 has it); the per-device queries run only when it is.
_any_enabled = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def _enabled_autocast():
    """(device, dtype) of the first device whose autocast is on, else None."""
    if not _any_enabled():
        return None
    for device in _DEVICES:
        if torch.is_autocast_enabled(device):
            return device, torch.get_autocast_dtype(device)
    return None


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


# --- the state shared by every open watch() --------------------------------------------------------------------

class _ScalerState:
    __slots__ = ("scaled", "backward", "unscaled", "stepped", "dtype", "clips")

    def __init__(self):
        self.scaled = False  # scale() since the last update()
        self.backward = False  # a backward after that scale()
        self.unscaled: set[int] = set()  # id() of the optimizers unscale_() was called for since the last update()
        self.stepped = False  # step() at least once
        self.dtype = None  # the autocast dtype of the region this scaler's scaled loss came from
        self.clips: list = []  # (site, parameter ids, unscaled ids then) of clips while scaled, checked at step()


class _State:
    def __init__(self):
        self.reports: list[Report] = []
        self.restore: list = []
        self.scalers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.built_at: dict[tuple[str, int], weakref.ref] = {}  # construction site -> the last scaler built there
        self.last_region: dict[str, object] = {}  # device -> dtype of the last enabled autocast region entered
        self.regions: list = []  # per open autocast region: the island mode it pushed, or None
        self.island: _IslandMode | None = None

    def scaler(self, scaler) -> _ScalerState:
        state = self.scalers.get(scaler)
        if state is None:
            state = self.scalers[scaler] = _ScalerState()
        return state


_state = _State()


def _report(code: str, message: str, site: tuple[str, int] | None = None) -> None:
    filename, line = site or _user_frame()
    finding = Finding(code, message, filename, line)
    new = [report._add(finding) for report in _state.reports]
    if any(new):
        warnings.warn_explicit(f"{code} {message}", AmpRuntimeWarning, filename, line)


# --- the hooks ---------------------------------------------------------------------------------------------------

def _check_backward(what: str) -> None:
    active = _enabled_autocast()
    if active is not None:
        _report("AMP001", f"{what} runs while autocast is enabled ({active[0]}, {_dtype_name(active[1])}): the "
                          "backward pass runs in the autocast dtype; close the autocast region before it")
    for state in list(_state.scalers.values()):
        if state.scaled:
            state.backward = True
            if active is not None and state.dtype is None:
                state.dtype = active[1]


def _wrap_backward(original, what):
    def backward(*args, **kwargs):
        _check_backward(what)
        return original(*args, **kwargs)

    backward.__wrapped__ = original
    return backward


def _optimizer_pre_hook(optimizer, args, kwargs):
    active = _enabled_autocast()
    if active is not None:
        _report("AMP002", f"{type(optimizer).__name__}.step() runs while autocast is enabled ({active[0]}): step "
                          "the optimizer after the autocast region closes")
    return None


def _scaler_init(original):
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        site = _user_frame()
        if torch.is_inference_mode_enabled() or not torch.is_grad_enabled():
            where = "inference_mode" if torch.is_inference_mode_enabled() else "no_grad"
            _report("AMP005", f"a GradScaler is built under {where}, where no backward runs: build it for "
                              "training only", site)
        previous = _state.built_at.get(site)
        previous = previous() if previous is not None else None
        if previous is not None and previous is not self and _state.scaler(previous).stepped:
            _report("AMP004", "a GradScaler is built again here after the previous one built here stepped: each "
                              "new scaler starts from the initial scale; build it once, before the loop", site)
        _state.built_at[site] = weakref.ref(self)
        _state.scaler(self)

    __init__.__wrapped__ = original
    return __init__


def _scaler_scale(original):
    def scale(self, outputs):
        if torch.is_inference_mode_enabled() or not torch.is_grad_enabled():
            where = "inference_mode" if torch.is_inference_mode_enabled() else "no_grad"
            _report("AMP005", f"scaler.scale() is called under {where}, where no backward runs: scale the loss "
                              "in training only")
        state = _state.scaler(self)
        active = _enabled_autocast()
        if active is not None:
            state.dtype = active[1]
        else:
            state.dtype = _state.last_region.get(getattr(self, "_device", "cuda"))
        state.scaled = True
        state.backward = False
        return original(self, outputs)

    scale.__wrapped__ = original
    return scale


def _scaler_unscale(original):
    def unscale_(self, optimizer):
        _state.scaler(self).unscaled.add(id(optimizer))
        return original(self, optimizer)

    unscale_.__wrapped__ = original
    return unscale_


def _scaler_step(original):
    def step(self, optimizer, *args, **kwargs):
        active = _enabled_autocast()
        if active is not None:
            _report("AMP002", f"scaler.step() runs while autocast is enabled ({active[0]}): step after the "
                              "autocast region closes")
        state = _state.scaler(self)
        if self.is_enabled():
            if state.dtype == torch.bfloat16:
                _report("AMP013", "a GradScaler steps gradients of a bfloat16 autocast region: bfloat16 has "
                                  "float32's range and needs no loss scaling; drop the scaler")
            if state.clips:
                owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
                for site, name, parameters, unscaled in state.clips:
                    if id(optimizer) not in unscaled and owned & parameters:
                        _report("AMP003", f"{name} clips gradients still multiplied by the GradScaler's scale: "
                                          "call scaler.unscale_(optimizer) before clipping", site)
                state.clips = [clip for clip in state.clips if not (owned & clip[2])]
        state.stepped = True
        return original(self, optimizer, *args, **kwargs)

    step.__wrapped__ = original
    return step


def _scaler_update(original):
    def update(self, *args, **kwargs):
        active = _enabled_autocast()
        if active is not None:
            _report("AMP002", f"scaler.update() runs while autocast is enabled ({active[0]}): update after the "
                              "autocast region closes")
        state = _state.scaler(self)
        state.scaled = state.backward = False
        state.unscaled.clear()
        state.clips.clear()
        return original(self, *args, **kwargs)

    update.__wrapped__ = original
    return update


def _wrap_clip(original):
    name = original.__name__

    def clip(parameters, *args, **kwargs):
        pending = [state for state in _state.scalers.values() if state.scaled and state.backward]
        if pending:
            parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            ids = {id(p) for p in parameters}
            site = _user_frame()
            for state in pending:
                state.clips.append((site, name, ids, frozenset(state.unscaled)))
        return original(parameters, *args, **kwargs)

    clip.__wrapped__ = original
    clip.__name__ = name
    return clip


# AMP006: ops that only move, cast, view or describe a tensor; a half tensor reaching them is no computation.
_NOT_COMPUTE = frozenset("""
__get__ __set__ __repr__ __format__ __len__ __bool__ __getitem__ __setitem__ __iter__ __hash__ __reduce_ex__
__deepcopy__ float double to type type_as half bfloat16 cpu cuda detach detach_ clone contiguous view view_as
reshape reshape_as size dim numel is_floating_point element_size data_ptr requires_grad_ copy_ item tolist numpy
unsqueeze squeeze flatten permute transpose t expand expand_as split chunk narrow select is_contiguous stride
storage_offset untyped_storage is_complex new_empty new_zeros new_ones empty_like zeros_like ones_like
""".split())


class _IslandMode(TorchFunctionMode):
    """Pushed while an autocast(enabled=False) region opened inside an enabled one is open: an op given a
    float16/bfloat16 floating tensor there computes in half precision, which the island meant to avoid."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name not in _NOT_COMPUTE and _enabled_autocast() is None:
            half = _half_argument(args) or _half_argument(kwargs.values())
            if half is not None:
                _report("AMP006", f"`{name}` receives a {_dtype_name(half)} tensor inside autocast(enabled=False), "
                                  "so it computes in half precision: cast its inputs with .float() first")
        return func(*args, **kwargs)


def _half_argument(values):
    for value in values:
        if isinstance(value, torch.Tensor):
            if value.dtype in _HALF:
                return value.dtype
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor) and item.dtype in _HALF:
                    return item.dtype
    return None


def _autocast_enter(original):
    def __enter__(self):
        device = self.device
        enabled = getattr(self, "_enabled", True)
        island = None
        if not enabled and _state.island is None and torch.is_autocast_enabled(device):
            island = _IslandMode()
        result = original(self)
        if enabled:
            _state.last_region[device] = self.fast_dtype
        if island is not None:
            island.__enter__()
            _state.island = island
        _state.regions.append(island)
        return result

    __enter__.__wrapped__ = original
    return __enter__


def _autocast_exit(original):
    def __exit__(self, *exc):
        island = _state.regions.pop() if _state.regions else None
        if island is not None:
            _state.island = None
            island.__exit__(None, None, None)
        return original(self, *exc)

    __exit__.__wrapped__ = original
    return __exit__


# --- installing and removing -------------------------------------------------------------------------------------

def _patch(owner, name, replacement) -> None:
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, replacement)
    _state.restore.append(lambda: setattr(owner, name, original))


def _install() -> None:
    import torch.autograd

    _patch(torch.Tensor, "backward", _wrap_backward(torch.Tensor.backward, "backward()"))
    _patch(torch.autograd, "backward", _wrap_backward(torch.autograd.backward, "torch.autograd.backward()"))
    _patch(torch.autograd, "grad", _wrap_backward(torch.autograd.grad, "torch.autograd.grad()"))
    handle = register_optimizer_step_pre_hook(_optimizer_pre_hook)
    _state.restore.append(handle.remove)
    scaler = torch.amp.GradScaler
    for name, wrap in (("__init__", _scaler_init), (vocab.SCALE, _scaler_scale), (vocab.UNSCALE, _scaler_unscale),
                       (vocab.STEP, _scaler_step), (vocab.UPDATE, _scaler_update)):
        _patch(scaler, name, wrap(scaler.__dict__[name]))
    for module in (torch.nn.utils, torch.nn.utils.clip_grad):
        for name in (vocab.CLIP_GRAD_NORM_, vocab.CLIP_GRAD_VALUE_):
            if hasattr(module, name):
                _patch(module, name, _wrap_clip(getattr(module, name)))
    autocast = torch.amp.autocast_mode.autocast
    _patch(autocast, "__enter__", _autocast_enter(autocast.__dict__["__enter__"]))
    _patch(autocast, "__exit__", _autocast_exit(autocast.__dict__["__exit__"]))


def _uninstall() -> None:
    while _state.restore:
        _state.restore.pop()()
    if _state.island is not None:  # a region left open at the end of the watch
        _state.island.__exit__(None, None, None)
    _state.__init__()


@contextmanager
def watch(strict: bool = False, ignore=()):
    """Watch the code in the block for AMP mistakes; yields the Report. Each finding is also issued as an
    `AmpRuntimeWarning` at the user's line. `strict=True` raises `AmpRuntimeError` at the end of a block that
    has findings (and ended without an exception of its own); `ignore` takes codes never to report.

    Blocks nest (each report sees what happens inside it); torch is restored when the outermost one ends."""
    report = Report(ignore)
    if not _state.reports:
        try:
            _install()
        except BaseException:
            _uninstall()
            raise
    _state.reports.append(report)
    try:
        yield report
    except BaseException:
        _leave(report)
        raise
    _leave(report)
    if strict and report.findings:
        raise AmpRuntimeError(report.findings)


def _leave(report: Report) -> None:
    if report in _state.reports:
        _state.reports.remove(report)
    if not _state.reports:
        _uninstall()
