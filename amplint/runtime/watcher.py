"""The run-time watcher: cheap hooks on torch that see the AMP mistakes a program makes as it runs.

What it patches while at least one `watch()` is open (and restores when the last one closes):

- `torch.Tensor.backward`, `torch.autograd.backward`, `torch.autograd.grad`: AMP001 (and the autocast dtype a
  backward of scaled gradients ran under, for AMP013);
- global optimizer step pre- and post-hooks (`torch.optim.optimizer.register_optimizer_step_pre_hook`,
  `..._post_hook`): AMP002, and which steps are running (their own ops are no island's computation);
- `torch.amp.GradScaler.__init__/scale/unscale_/step/update`: AMP002, AMP003's scaler state, AMP004, AMP005,
  AMP013;
- `torch.nn.utils.clip_grad_norm_/clip_grad_value_/clip_grads_with_norm_/get_total_norm` (in `torch.nn.utils`
  and `torch.nn.utils.clip_grad`): AMP003;
- `torch.autocast.__enter__/__exit__`: which regions are open, and whether installed code (a framework) opened
  them; only while an `enabled=False` region opened inside an enabled one is open, a `TorchFunctionMode` looks at
  every op's arguments (AMP006).

Every hook asks torch's autocast state with a few C calls and walks the stack only when it has a finding (and
when an enabled region opens, to tell whose code opened it). A finding is the user's line: the first frame of the
user's own code, outside torch, amplint, the standard library and installed packages; the installed code it ran
in, if any, is its context (`RuntimeFinding.via_*`).

The watch never changes what the program does. Inside code that TorchDynamo traces or compiled (`torch.compile`)
every hook only calls the original, and no mode is pushed there; the island mode is pushed only on the thread
that opened the watch (torch's mode stack and autocast state are per thread). Where it steps aside, each report
says so once (`WatchReport.notes`).
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import sysconfig
import threading
import warnings
import weakref
from contextlib import contextmanager

import torch
import torch.nn.utils
import torch.nn.utils.clip_grad
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode

import amplint
from amplint import vocabulary as vocab
from amplint.runtime import INSTALLED_FOLDERS, AmpRuntimeError, AmpRuntimeWarning, RuntimeFinding

__all__ = ["WatchReport", "watch"]

_HALF = (torch.float16, torch.bfloat16)
_DEVICES = tuple(device for device in ("cpu", "cuda", "xpu", "mps", "hpu")
                 if getattr(torch.amp, "is_autocast_available", lambda _: device in ("cpu", "cuda"))(device))


class WatchReport:
    """What one `watch()` block saw: `findings`, in the order they happened, each site (code, file, line) once."""

    def __init__(self, ignore=()):
        self.ignore = frozenset(code.upper() for code in ignore)
        self.findings: list[RuntimeFinding] = []
        self.notes: list[str] = []  # where the watch stepped aside (compiled code, another thread), each once
        self._sites: set[tuple[str, str, int]] = set()

    def _add(self, finding: RuntimeFinding) -> bool:
        if finding.code in self.ignore or finding.site in self._sites:
            return False
        self._sites.add(finding.site)
        self.findings.append(finding)
        return True

    def __bool__(self) -> bool:  # `with watch() as report:` is always true as a value; the findings decide
        return True

    def __repr__(self) -> str:
        return f"WatchReport({self.findings!r})"


# --- where the user is ------------------------------------------------------------------------------------------

def _folder(path: str) -> str:
    return os.path.join(os.path.abspath(path), "")


def _installed_folders() -> tuple[str, ...]:
    import site

    folders = [*getattr(site, "getsitepackages", list)(), getattr(site, "getusersitepackages", str)()]
    folders += [sysconfig.get_paths().get(key) for key in ("purelib", "platlib", "scripts")]  # and console scripts
    return tuple({_folder(folder) for folder in folders if folder})


# Whose a frame is (_owner): torch's and amplint's own files (not the tests beside amplint), never anyone's line;
# installed packages (a framework); the standard library; and the rest, the user's own code.
_SKIPPED = tuple(_folder(os.path.dirname(module.__file__)) for module in (torch, amplint))
_INSTALLED = _installed_folders()
_STDLIB = tuple({_folder(folder) for folder in (os.path.dirname(os.__file__), *(
    sysconfig.get_paths().get(key) or os.path.dirname(os.__file__) for key in ("stdlib", "platstdlib")))})


@functools.lru_cache(maxsize=4096)
def _owner(filename: str) -> str:
    """Whose code a file is: `torch` (torch, amplint, Python's frozen modules), `installed` (in a site-packages or
    dist-packages folder), `stdlib`, or `user` (anything else: a script, a project's modules, `<string>`)."""
    if filename.startswith(_SKIPPED) or filename.startswith("<frozen"):
        return "torch"
    if filename.startswith(_INSTALLED) or any(part in INSTALLED_FOLDERS
                                              for part in filename.replace(os.sep, "/").split("/")):
        return "installed"
    if filename.startswith(_STDLIB):
        return "stdlib"
    return "user"


def _walk() -> tuple:
    """(user, via, first) frames of the stack: the user's frame, the first of the user's own code (outside torch,
    amplint, the standard library and installed packages), or None; `via`, the innermost frame of installed code
    before it (a framework's call into torch), or None; `first`, the first frame outside torch and amplint."""
    frame = sys._getframe(1)
    first = via = None
    while frame is not None:
        owner = _owner(frame.f_code.co_filename)
        if owner == "user":
            return frame, via, first
        if owner != "torch":
            first = first or frame
            if owner == "installed" and via is None:
                via = frame
        frame = frame.f_back
    return None, None, first


def _site(user, via, first) -> tuple:
    """(filename, line, span, via) of a finding: the user's frame, the span (column, end line, end column; 1-based
    columns) of the expression running there (the call, the operator) or None, and `via`, (filename, line,
    column) of the installed code it ran in, or None. Where no frame is the user's (installed code all the way):
    the first frame outside torch and amplint, without `via`."""
    if user is None:
        if first is None:
            return "<unknown>", 0, None, None
        return first.f_code.co_filename, first.f_lineno, _span(first), None
    if via is not None:
        span = _span(via)
        via = (via.f_code.co_filename, via.f_lineno, span[0] if span else None)
    return user.f_code.co_filename, user.f_lineno, _span(user), via


def _user_frame() -> tuple:
    """The site of a finding here (_site)."""
    return _site(*_walk())


def _span(frame) -> tuple[int, int, int] | None:
    """Where in the source the frame's current instruction is (Python 3.11+ records it per instruction)."""
    try:
        line, end_line, column, end_column = next(itertools.islice(frame.f_code.co_positions(),
                                                                   frame.f_lasti // 2, None))
    except (StopIteration, AttributeError, ValueError):
        return None
    if line != frame.f_lineno or None in (end_line, column, end_column):
        return None
    import linecache

    def characters(number: int, offset: int) -> int:  # the positions count UTF-8 bytes
        text = linecache.getline(frame.f_code.co_filename, number).encode("utf-8")
        return len(text[:offset].decode("utf-8", errors="replace")) + 1

    return characters(line, column), end_line, characters(end_line, end_column)


_compiling = getattr(torch.compiler, "is_compiling", None) or getattr(torch._dynamo, "is_compiling", lambda: False)
_local = threading.local()  # per thread: `hooks`, how many of the watch's hooks are running torch's own code


def _hooked(original, *args, **kwargs):
    """Run torch's own code of a hooked function (a backward, a scaler method, a clip): the ops it runs are not
    the user's computations, which the island mode looks at."""
    _local.hooks = getattr(_local, "hooks", 0) + 1
    try:
        return original(*args, **kwargs)
    finally:
        _local.hooks -= 1


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
        self.reports: list[WatchReport] = []
        self.restore: list = []
        self.scalers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.built_at: dict[tuple[str, int], weakref.ref] = {}  # construction site -> the last scaler built there
        self.last_region: dict[str, object] = {}  # device -> dtype of the last enabled autocast region entered
        # Enabled regions open on the watched thread that installed code (a framework) entered: per region, the id
        # of the user's frame that code ran under (0: none).
        self.framework_regions: list[int] = []
        # get_total_norm's results measured while some scaler's gradients were scaled: id -> (weak reference,
        # site, {scaler state: the optimizers unscaled then}).
        self.norms: dict[int, tuple] = {}
        self.island: _IslandMode | None = None  # the island mode pushed (on the watched thread), if any
        self.thread = threading.get_ident()  # the thread that opened the watch
        self.noted: set[str] = set()

    def scaler(self, scaler) -> _ScalerState:
        state = self.scalers.get(scaler)
        if state is None:
            state = self.scalers[scaler] = _ScalerState()
        return state


_state = _State()


def _report(code: str, message: str, site: tuple | None = None) -> None:
    filename, line, span, via = site or _user_frame()
    finding = RuntimeFinding(code, message, filename, line, *(span or (None, None, None)), *(via or ()))
    new = [report._add(finding) for report in _state.reports]
    if any(new):
        text = f"{code} {message}" + (f" (via {finding.via})" if finding.via else "")
        warnings.warn_explicit(text, AmpRuntimeWarning, filename, line)


_NOTES = {
    "compile": "code that torch.compile traces or compiled is not watched: the watch steps aside there (its hooks "
               "only call torch's own functions and report nothing); watch an eager run (without torch.compile) to "
               "check that code",
    "thread": "an fp32 island (autocast(enabled=False) inside an enabled region) ran on another thread than the "
              "one that opened the watch: AMP006 is checked on the watching thread only (the other codes are "
              "seen on every thread)",
}


def _note(kind: str) -> None:
    """Say once per report where the watch stepped aside."""
    for report in _state.reports:
        if _NOTES[kind] not in report.notes:
            report.notes.append(_NOTES[kind])


# --- the hooks ---------------------------------------------------------------------------------------------------

def _leave_region(device: str, user, closing: str, what: str) -> str:
    """How to run `what` outside the enabled region: `closing` (close it first), unless installed code (a framework:
    a trainer around training_step) opened it outside the user's frame, which then cannot close it and disables
    autocast around the call instead. A region the user's frame opened through a framework's context manager
    (`with accelerator.autocast():`) is the user's to close."""
    if any(opener != id(user) for opener in _state.framework_regions):
        return (f"installed code (a framework) opened the region: run {what} inside `with torch.autocast("
                f"\"{device}\", enabled=False):`")
    return closing


def _check_backward(what: str) -> None:
    active = _enabled_autocast()
    if active is not None:
        frames = _walk()
        _report("AMP001", f"{what} runs while autocast is enabled ({active[0]}, {_dtype_name(active[1])}): the "
                          "backward pass runs in the autocast dtype; "
                          + _leave_region(active[0], frames[0], "close the autocast region before it", "it"),
                _site(*frames))
    for state in list(_state.scalers.values()):
        if state.scaled:
            state.backward = True
            if active is not None and state.dtype is None:
                state.dtype = active[1]


def _wrap_backward(original, what):
    def backward(*args, **kwargs):
        if _compiling():
            return original(*args, **kwargs)
        _check_backward(what)
        return _hooked(original, *args, **kwargs)

    backward.__wrapped__ = original
    return backward


def _optimizer_pre_hook(optimizer, args, kwargs):
    if _compiling():
        return None
    steps = getattr(_local, "steps", None)  # a step running already (an optimizer wrapping another), or a stale one
    _local.steps = [*(_live(steps) if steps else ()), sys._getframe(1)]  # the frame running this step (_in_step)
    active = _enabled_autocast()
    if active is not None:
        frames = _walk()
        _report("AMP002", f"{type(optimizer).__name__}.step() runs while autocast is enabled ({active[0]}): "
                          + _leave_region(active[0], frames[0], "step the optimizer after the autocast region closes",
                                          "the step"), _site(*frames))
    return None


def _optimizer_post_hook(optimizer, args, kwargs):
    steps = getattr(_local, "steps", None)
    if steps and steps[-1] is sys._getframe(1):
        steps.pop()


def _in_step() -> bool:
    """Is the op an optimizer's own (its update of its parameters and state), not the island's computation? An
    optimizer's step runs further up the stack (a frame that ran a step pre-hook and no post hook yet) with no frame
    of the user's own code between (a closure the step calls, Lightning's training_step, is the user's code again).
    A frame that a step which raised left behind is dropped here. Asked only before a finding."""
    steps = getattr(_local, "steps", None)
    if not steps:
        return False
    pending = {id(step) for step in steps}
    own, user = False, False
    frame = sys._getframe(1)
    while frame is not None:
        if id(frame) in pending:
            own = own or not user
        elif _owner(frame.f_code.co_filename) == "user":
            user = True
        frame = frame.f_back
    _local.steps = _live(steps)
    return own


def _live(steps: list) -> list:
    """The step frames still on this thread's stack: a step that raised ran no post hook, and its frame (and the
    tensors it holds) is let go here."""
    running = set()
    frame = sys._getframe(1)
    while frame is not None:
        running.add(id(frame))
        frame = frame.f_back
    return [step for step in steps if id(step) in running]


def _scaler_init(original):
    def __init__(self, *args, **kwargs):
        if _compiling():
            return original(self, *args, **kwargs)
        _hooked(original, self, *args, **kwargs)
        site = _user_frame()
        if torch.is_inference_mode_enabled() or not torch.is_grad_enabled():
            where = "inference_mode" if torch.is_inference_mode_enabled() else "no_grad"
            _report("AMP005", f"a GradScaler is built under {where}, where no backward runs: build it for "
                              "training only", site)
        previous = _state.built_at.get(site[:2])
        previous = previous() if previous is not None else None
        # A scaler that installed code builds (a trainer's, an accelerator's: `via`) is one per run it is given;
        # whether two runs are one training's is not known, and so not reported.
        if previous is not None and previous is not self and _state.scaler(previous).stepped and site[3] is None:
            _report("AMP004", "a GradScaler is built again here after the previous one built here stepped: each "
                              "new scaler starts from the initial scale; build it once, before the loop", site)
        _state.built_at[site[:2]] = weakref.ref(self)
        _state.scaler(self)

    __init__.__wrapped__ = original
    return __init__


def _scaler_scale(original):
    def scale(self, outputs):
        if _compiling():
            return original(self, outputs)
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
        return _hooked(original, self, outputs)

    scale.__wrapped__ = original
    return scale


def _scaler_unscale(original):
    def unscale_(self, optimizer):
        if _compiling():
            return original(self, optimizer)
        _state.scaler(self).unscaled.add(id(optimizer))
        return _hooked(original, self, optimizer)

    unscale_.__wrapped__ = original
    return unscale_


def _scaler_step(original):
    def step(self, optimizer, *args, **kwargs):
        if _compiling():
            return original(self, optimizer, *args, **kwargs)
        active = _enabled_autocast()
        if active is not None:
            frames = _walk()
            _report("AMP002", f"scaler.step() runs while autocast is enabled ({active[0]}): "
                              + _leave_region(active[0], frames[0], "step after the autocast region closes",
                                              "the step"), _site(*frames))
        state = _state.scaler(self)
        if self.is_enabled():
            if state.dtype == torch.bfloat16:
                _report("AMP013", "a GradScaler steps gradients of a bfloat16 autocast region: bfloat16 has "
                                  "float32's range and needs no loss scaling; drop the scaler")
            if state.clips:
                owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
                # Installed code (a framework) steps the scaler: it unscales too, and the user has no unscale_ to
                # call (a second one raises); the clip belongs after the framework's unscale_.
                advice = ("installed code (a framework) unscales and steps them: clip where it has unscaled them "
                          "(its own clip, or a hook that runs after its unscale_)" if _walk()[1] is not None
                          else "call scaler.unscale_(optimizer) before clipping")
                for site, name, parameters, unscaled in state.clips:
                    if id(optimizer) not in unscaled and owned & parameters and name == vocab.GET_TOTAL_NORM:
                        _report("AMP003", f"{name} measures gradients still multiplied by the GradScaler's scale, "
                                          f"and {_CLIP_WITH_NORM} clips with that norm: "
                                          + advice.replace("before clipping", "before measuring"), site)
                    elif id(optimizer) not in unscaled and owned & parameters:
                        _report("AMP003", f"{name} clips gradients still multiplied by the GradScaler's scale: "
                                          + advice, site)
                state.clips = [clip for clip in state.clips if not (owned & clip[2])]
        state.stepped = True
        return _hooked(original, self, optimizer, *args, **kwargs)

    step.__wrapped__ = original
    return step


def _scaler_update(original):
    def update(self, *args, **kwargs):
        if _compiling():
            return original(self, *args, **kwargs)
        active = _enabled_autocast()
        if active is not None:
            frames = _walk()
            _report("AMP002", f"scaler.update() runs while autocast is enabled ({active[0]}): "
                              + _leave_region(active[0], frames[0], "update after the autocast region closes",
                                              "the update"), _site(*frames))
        state = _state.scaler(self)
        state.scaled = state.backward = False
        state.unscaled.clear()
        state.clips.clear()
        return _hooked(original, self, *args, **kwargs)

    update.__wrapped__ = original
    return update


# torch >= 2.6: `clip_grads_with_norm_(parameters, max_norm, total_norm)`, the clipping half of clip_grad_norm_
# (after `get_total_norm(grads)`): it scales the gradients it is given, as clip_grad_norm_ does.
_CLIP_WITH_NORM = vocab.CLIP_GRADS_WITH_NORM_


def _wrap_clip(original, name: str):
    def clip(parameters, *args, **kwargs):
        if _compiling():
            return original(parameters, *args, **kwargs)
        pending = [state for state in _state.scalers.values() if state.scaled and state.backward]
        if pending:
            parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            ids = {id(p) for p in parameters}
            site = _user_frame()
            # clip_grads_with_norm_(parameters, max_norm, total_norm): a total norm get_total_norm measured while
            # the gradients were still scaled makes the clip coefficient 1/scale too small, whatever unscale_ ran
            # since; the optimizers unscaled when the norm was measured are what counts, reported at its line.
            total = kwargs.get("total_norm", args[1] if len(args) > 1 else None)
            measured = _state.norms.get(id(total)) if name == _CLIP_WITH_NORM else None
            if measured is not None and measured[0]() is not total:
                measured = None
            for state in pending:
                unscaled = frozenset(state.unscaled)
                if measured is not None and state in measured[2]:
                    state.clips.append((measured[1], vocab.GET_TOTAL_NORM, ids, measured[2][state]))
                else:
                    state.clips.append((site, name, ids, unscaled))
        return _hooked(original, parameters, *args, **kwargs)

    clip.__wrapped__ = original
    clip.__name__ = name
    return clip


def _wrap_total_norm(original):
    """torch >= 2.6's `get_total_norm(tensors, ...)`: a norm measured between a scaled backward and the step is
    remembered (the tensor, weakly), with its site and, per scaler, the optimizers unscaled then."""

    def get_total_norm(tensors, *args, **kwargs):
        norm = _hooked(original, tensors, *args, **kwargs)
        if _compiling() or getattr(_local, "hooks", 0):  # (torch's own clip_grad_norm_ measuring, not the user)
            return norm
        pending = [state for state in _state.scalers.values() if state.scaled and state.backward]
        if pending and isinstance(norm, torch.Tensor):
            _state.norms = {key: value for key, value in _state.norms.items() if value[0]() is not None}
            _state.norms[id(norm)] = (weakref.ref(norm), _user_frame(),
                                      {state: frozenset(state.unscaled) for state in pending})
        return norm

    get_total_norm.__wrapped__ = original
    get_total_norm.__name__ = vocab.GET_TOTAL_NORM
    return get_total_norm


# AMP006: ops that only move, cast, view or describe a tensor; a half tensor reaching them is no computation. The
# vocabulary's lists (shared with the static rules), and the names of Python's protocol and of tensor metadata that
# only a run meets (`__getitem__`, `is_floating_point`...).
_NOT_COMPUTE = vocab.LAYOUT_METHODS | vocab.FLOAT32_CASTS | vocab.HALF_CONVERTERS | vocab.NOT_TENSORS | frozenset({
    vocab.BFLOAT16, "type_as"}) | frozenset("""
__get__ __set__ __repr__ __format__ __len__ __bool__ __getitem__ __setitem__ __iter__ __hash__ __reduce_ex__
__deepcopy__ detach_ is_floating_point element_size requires_grad_ copy_ split chunk unbind is_contiguous
storage_offset untyped_storage is_complex new_empty new_zeros new_ones
""".split())


def _casts_to_float32(args, kwargs) -> bool:
    """Does the op's dtype argument (`dtype=`, as the static model reads it, or a torch.dtype given by position)
    name float32 or wider (the vocabulary's FLOAT32_DTYPES)? Then the op converts its input and computes there,
    as it would after `.float()`."""
    dtype = kwargs.get(vocab.DTYPE)
    if dtype is None:
        dtype = next((value for value in args if isinstance(value, torch.dtype)), None)
    return isinstance(dtype, torch.dtype) and str(dtype) in vocab.FLOAT32_DTYPES


class _IslandMode(TorchFunctionMode):
    """Pushed while an autocast(enabled=False) region opened inside an enabled one is open: an op given a
    float16/bfloat16 floating tensor there computes in half precision, which the island meant to avoid. Ops
    that the watch's own hooks run (a backward, the scaler's multiply, a clip) are torch's, not the island's.
    An op whose floating results are all float32 or wider computed there: torch promoted the half tensor with a
    float32 one (`h - labels`, `torch.cat([h, w])`), as `.float()` would have; an op that raises on it (an fp32
    weight's matmul) is reported as it raises."""

    inert = False  # set when the mode could not be popped where its region closed: it then only calls through

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        half = None
        if not (self.inert or _compiling() or getattr(_local, "hooks", 0)):
            name = getattr(func, "__name__", "")
            if name not in _NOT_COMPUTE and _enabled_autocast() is None and not _casts_to_float32(args, kwargs):
                half = _half_argument(args) or _half_argument(kwargs.values())
        if half is None:
            return func(*args, **kwargs)
        try:
            result = func(*args, **kwargs)
        except BaseException:
            _half_op(name, half)
            raise
        if not _promoted(result):
            _half_op(name, half)
        return result


def _half_op(name: str, half) -> None:
    """An island op that computed in (or raised on) a half tensor: AMP006, unless it is an optimizer's own update
    or torch's compiled code."""
    if _in_step():
        return  # the optimizer's own update of a half parameter or state
    if _in_compiled_call():
        _note("compile")  # torch's compiled code, run inside the user's island
        return
    _report("AMP006", f"`{name}` receives a {_dtype_name(half)} tensor inside autocast(enabled=False), so it "
                      "computes in half precision: cast its inputs with .float() first")


def _promoted(result) -> bool:
    """Are the op's floating results (a tensor, or those of a tuple or list) all float32 or wider? Then torch
    computed it in float32, promoting its half input (type promotion: a float32 tensor of at least as many
    dimensions), or wrote it into a float32 tensor."""
    results = result if isinstance(result, (tuple, list)) else (result,)
    floating = [value.dtype for value in results if isinstance(value, torch.Tensor) and value.is_floating_point()]
    return bool(floating) and not any(dtype in _HALF for dtype in floating)


def _in_compiled_call() -> bool:
    """Does a function compiled by torch.compile run further up the stack (its graphs, AOT autograd's wrappers)?
    Its call goes through the compiling context's wrapper in torch._dynamo.eval_frame; a `torch.compiler.disable`
    wrapper (code that runs eagerly) does not count. Asked only before a finding, so the walk is rare."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # not imported: nothing was compiled
    context, disabled = (getattr(eval_frame, "_TorchDynamoContext", None),
                         getattr(eval_frame, "DisableContext", None))
    if context is None:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == eval_frame.__file__:
            owner = frame.f_locals.get("self")
            if isinstance(owner, context) and not (disabled is not None and isinstance(owner, disabled)):
                return True
        frame = frame.f_back
    return False


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


# A region entered by code that TorchDynamo compiled (its graphs enter autocast through this class).
_GRAPH_AUTOCAST = getattr(torch.amp.autocast_mode, "_UnmanagedAutocast", ())
# On an autocast object: per entry of it, (the island mode that entry pushed or None, the region's opener: see
# _framework_opener).
_ISLANDS = "_amplint_islands"


def _framework_opener() -> int | None:
    """Where installed code (a framework) enters an enabled region, the id of the user's frame it runs under (0:
    none); None where the user's own code enters it. The first frame outside torch, amplint and the standard
    library (a `with` statement, a contextmanager's generator) says whose code enters it."""
    user, via, first = _walk()
    if via is None and user is not None:
        return None
    return id(user) if user is not None else 0


def _top_mode():
    depth = torch._C._len_torch_function_stack()
    return torch._C._get_function_stack_at(depth - 1) if depth else None


def _close_island(island: _IslandMode) -> None:
    """Pop the island mode where it is on top of this thread's mode stack; elsewhere (another thread, or a mode
    pushed above it and still open) leave it there, inert, rather than pop someone else's."""
    if island is _state.island:
        _state.island = None
    if threading.get_ident() == _state.thread and _top_mode() is island:
        island.__exit__(None, None, None)
    else:
        island.inert = True


def _autocast_enter(original):
    def __enter__(self):
        enabled = getattr(self, "_enabled", True)
        if _compiling() or isinstance(self, _GRAPH_AUTOCAST):
            _note("compile")
            return original(self)
        if threading.get_ident() != _state.thread:  # no bookkeeping here: the state is the watched thread's
            if not enabled and torch.is_autocast_enabled(self.device):
                _note("thread")
            return original(self)
        island = None
        if not enabled and _state.island is None and torch.is_autocast_enabled(self.device):
            island = _IslandMode()
        result = original(self)
        opener = None
        if enabled:
            _state.last_region[self.device] = self.fast_dtype
            opener = _framework_opener()
            if opener is not None:
                _state.framework_regions.append(opener)
        if island is not None:
            island.__enter__()
            _state.island = island
        self.__dict__.setdefault(_ISLANDS, []).append((island, opener))
        return result

    __enter__.__wrapped__ = original
    return __enter__


def _autocast_exit(original):
    def __exit__(self, *exc):
        entries = self.__dict__.get(_ISLANDS)
        if entries and threading.get_ident() == _state.thread and not _compiling():
            island, opener = entries.pop()
            if opener is not None and opener in _state.framework_regions:  # (not an entry of an earlier watch)
                _state.framework_regions.remove(opener)
            if island is not None:
                _close_island(island)
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
    for register, hook in ((register_optimizer_step_pre_hook, _optimizer_pre_hook),
                           (register_optimizer_step_post_hook, _optimizer_post_hook)):
        _state.restore.append(register(hook).remove)
    scaler = torch.amp.GradScaler
    for name, wrap in (("__init__", _scaler_init), (vocab.SCALE, _scaler_scale), (vocab.UNSCALE, _scaler_unscale),
                       (vocab.STEP, _scaler_step), (vocab.UPDATE, _scaler_update)):
        _patch(scaler, name, wrap(scaler.__dict__[name]))
    for module in (torch.nn.utils, torch.nn.utils.clip_grad):
        for name in (vocab.CLIP_GRAD_NORM_, vocab.CLIP_GRAD_VALUE_, _CLIP_WITH_NORM):
            if hasattr(module, name):
                _patch(module, name, _wrap_clip(getattr(module, name), name))  # (torch 2.13 names it _clip_...)
        if hasattr(module, vocab.GET_TOTAL_NORM):
            _patch(module, vocab.GET_TOTAL_NORM, _wrap_total_norm(getattr(module, vocab.GET_TOTAL_NORM)))
    autocast = torch.amp.autocast_mode.autocast
    _patch(autocast, "__enter__", _autocast_enter(autocast.__dict__["__enter__"]))
    _patch(autocast, "__exit__", _autocast_exit(autocast.__dict__["__exit__"]))


def _uninstall() -> None:
    while _state.restore:
        _state.restore.pop()()
    if _state.island is not None:  # a region left open at the end of the watch
        _close_island(_state.island)
    _local.steps = []
    _state.__init__()


@contextmanager
def watch(strict: bool = False, ignore=()):
    """Watch the code in the block for AMP mistakes; yields the WatchReport. Each finding is also issued as an
    `AmpRuntimeWarning` at the user's line. `strict=True` raises `AmpRuntimeError` at the end of a block that
    has findings (and ended without an exception of its own); `ignore` takes codes never to report.

    Blocks nest (each report sees what happens inside it); torch is restored when the outermost one ends."""
    report = WatchReport(ignore)
    if not _state.reports:
        _state.thread = threading.get_ident()
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


def _leave(report: WatchReport) -> None:
    if report in _state.reports:
        _state.reports.remove(report)
    if not _state.reports:
        _uninstall()
