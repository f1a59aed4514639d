"""The AMP vocabulary: every name of torch's mixed-precision API that amplint knows, spelled once.

What a call means is decided from these names in every layer: the text screen (amplint/prefilter.py), the
slicer (amplint/facts/slicing.py), the project index (amplint/index/), the libcst facts (amplint/facts/), the
rules and their fixes. No other module of the linter spells one of them as a string literal
(tests/test_layering.py checks it); a name that means AMP is added here and imported where it is used.

This module knows no Python structure and imports nothing of amplint: names and predicates on names only.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- Short names: attributes, methods, functions and classes, as they appear after the last dot. ---

AMP = "amp"  # the modules torch.amp, torch.cuda.amp, torch.cpu.amp
AUTOGRAD = "autograd"
AUTOCAST = "autocast"
GRAD_SCALER = "GradScaler"
SHARDED_GRAD_SCALER = "ShardedGradScaler"
SCALER_CLASSES = (GRAD_SCALER, SHARDED_GRAD_SCALER)  # the last names of every GradScaler class
CUSTOM_FWD = "custom_fwd"
CUSTOM_BWD = "custom_bwd"
CUSTOM_DECORATORS = (CUSTOM_FWD, CUSTOM_BWD)

# GradScaler methods.
SCALE = "scale"
UNSCALE = "unscale_"
STEP = "step"  # also the optimizer's (and a scheduler's) step
UPDATE = "update"
GET_SCALE = "get_scale"
IS_ENABLED = "is_enabled"
LOAD_STATE_DICT = "load_state_dict"
SCALER_METHODS = (SCALE, UNSCALE, STEP, UPDATE)  # the methods a training step calls on a scaler

# Optimizer methods and attributes.
ZERO_GRAD = "zero_grad"
PARAM_GROUPS = "param_groups"
OPTIM = "optim"  # torch.optim

# Backward: `loss.backward()`, Lightning's `self.manual_backward(loss)`, `torch.autograd.grad`.
BACKWARD = "backward"
MANUAL_BACKWARD = "manual_backward"
GRAD = "grad"
BACKWARD_METHODS = (BACKWARD, MANUAL_BACKWARD)

# Gradient modes.
NO_GRAD = "no_grad"
INFERENCE_MODE = "inference_mode"
ENABLE_GRAD = "enable_grad"
SET_GRAD_ENABLED = "set_grad_enabled"
GRAD_OFF = (NO_GRAD, INFERENCE_MODE, SET_GRAD_ENABLED)  # what can turn gradients off (set_grad_enabled(False))

# Clipping.
CLIP_GRAD = "clip_grad"  # the common prefix of the clip functions (and their module torch.nn.utils.clip_grad)
CLIP_GRAD_NORM_ = "clip_grad_norm_"
CLIP_GRAD_NORM = "clip_grad_norm"
CLIP_GRAD_VALUE_ = "clip_grad_value_"
# torch 2.6+: clip_grad_norm_ in two halves, `total = get_total_norm(grads)` then
# `clip_grads_with_norm_(params, max_norm, total)`: the clip (its factor max_norm / total) is the second call.
CLIP_GRADS_WITH_NORM_ = "clip_grads_with_norm_"
GET_TOTAL_NORM = "get_total_norm"
CLIP_NAMES = (CLIP_GRAD_NORM_, CLIP_GRAD_NORM, CLIP_GRAD_VALUE_, CLIP_GRADS_WITH_NORM_)

# Module modes.
EVAL = "eval"

# Keyword names of the AMP constructors and decorators.
ENABLED = "enabled"
DTYPE = "dtype"
DEVICE_TYPE = "device_type"
CACHE_ENABLED = "cache_enabled"
CAST_INPUTS = "cast_inputs"

# Dtypes and the calls that convert to them.
FLOAT16 = "float16"
BFLOAT16 = "bfloat16"
HALF = "half"  # torch.half, `x.half()`
FLOAT32 = "float32"
FLOAT64 = "float64"
FLOAT = "float"  # torch.float, `x.float()` (also the builtin)
DOUBLE = "double"  # torch.double, `x.double()`
LOW_DTYPE_NAMES = (BFLOAT16, FLOAT16)  # the dtypes autocast runs ops in
FLOAT32_CASTS = frozenset({FLOAT, DOUBLE})  # `x.float()`, `x.double()`: a tensor in float32 (or wider) after
FLOAT32_WORDS = frozenset({FLOAT32, FLOAT, FLOAT64, DOUBLE})  # the last names of the float32-or-wider dtypes
DTYPE_WORDS = FLOAT32_WORDS | {FLOAT16, BFLOAT16, HALF}
CONVERT_METHODS = frozenset({"to", "type"})  # `x.to(...)`, `x.type(...)`: convert to the dtype an argument names
HALF_CONVERTERS = frozenset({HALF}) | CONVERT_METHODS  # the calls that can make a model half precision

# Devices autocast runs on, and the low dtype each one's autocast uses by default.
CUDA = "cuda"
CPU = "cpu"
DEFAULT_LOW_DTYPE = {CUDA: FLOAT16, CPU: BFLOAT16}

# --- Qualified names: canonical name -> every qualified spelling that means it. ---

AUTOCAST_NEW = frozenset({
    "torch.autocast",
    "torch.amp.autocast",
    "torch.amp.autocast_mode.autocast",
    "torch.autocast_mode.autocast",
})
# Legacy spellings whose FIRST positional argument is `enabled` (not the device).
AUTOCAST_LEGACY = {
    "torch.cuda.amp.autocast": CUDA,
    "torch.cuda.amp.autocast_mode.autocast": CUDA,
    "torch.cpu.amp.autocast": CPU,
    "torch.cpu.amp.autocast_mode.autocast": CPU,
}
GRAD_SCALERS = frozenset({
    "torch.GradScaler",
    "torch.amp.GradScaler",
    "torch.amp.grad_scaler.GradScaler",
    "torch.cuda.amp.GradScaler",
    "torch.cuda.amp.grad_scaler.GradScaler",
    "torch.cpu.amp.GradScaler",
    "torch.cpu.amp.grad_scaler.GradScaler",
    "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    "torch.distributed.fsdp.ShardedGradScaler",
})
CLIP_FUNCTIONS = frozenset({
    "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad_norm",
    "torch.nn.utils.clip_grad_value_",
    "torch.nn.utils.clip_grad.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_norm",
    "torch.nn.utils.clip_grad.clip_grad_value_",
    "torch.nn.utils.clip_grads_with_norm_",
    "torch.nn.utils.clip_grad._clip_grads_with_norm_",
})
# The norm `clip_grads_with_norm_` divides by: computed from the gradients as they are when it runs.
TOTAL_NORM_FUNCTIONS = frozenset({"torch.nn.utils.get_total_norm", "torch.nn.utils.clip_grad._get_total_norm"})
# torch's functions that run a backward pass -> (position, keyword) of the argument holding the tensors it starts
# from (the loss): `torch.distributed.autograd.backward(context_id, [loss])` is the distributed one.
AUTOGRAD_ROOTS = {"torch.autograd.backward": (0, "tensors"), "torch.autograd.grad": (0, "outputs"),
                  "torch.distributed.autograd.backward": (1, "roots")}
AUTOGRAD_BACKWARD = frozenset(AUTOGRAD_ROOTS)
NO_GRAD_CONTEXTS = frozenset({
    "torch.no_grad",
    "torch.inference_mode",
    "torch.autograd.no_grad",
    "torch.autograd.inference_mode",
    "torch.autograd.grad_mode.no_grad",
    "torch.autograd.grad_mode.inference_mode",
})
ENABLE_GRAD_CONTEXTS = frozenset({"torch.enable_grad", "torch.autograd.enable_grad",
                                  "torch.autograd.grad_mode.enable_grad"})
SET_GRAD_ENABLED_FUNCTIONS = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"})
NULL_CONTEXTS = frozenset({"contextlib.nullcontext", "contextlib.suppress", "contextlib.ExitStack"})
PARTIAL = frozenset({"functools.partial"})
TORCH = "torch"
TORCH_AMP = "torch.amp"
TORCH_AUTOCAST = "torch.autocast"
TORCH_DEVICE = frozenset({"torch.device"})
# `x.autocast()` opens a region when `x` is an accelerate `Accelerator` or a Lightning `Fabric`: the object
# arrives as a parameter in most training code, so its name is the convention that says which it is (the
# `.autocast()` method entered by a `with` is the use that goes with it). Matched at the end of the last name,
# any case (`self.accelerator`, `fabric`).
ACCELERATOR_NAMES = ("accelerator", "fabric")
# The classes whose instances' `.autocast()` opens a region: an object built from one is known by its construction.
ACCELERATOR_CLASSES = frozenset({
    "accelerate.Accelerator",
    "accelerate.accelerator.Accelerator",
    "lightning.Fabric",
    "lightning.fabric.Fabric",
    "lightning_fabric.Fabric",
})
AUTOCAST_METHOD = AUTOCAST
REGISTER_HOOK = "register_hook"  # `tensor.register_hook(fn)`: fn runs on the gradient during backward
CLAMP_METHODS = frozenset({"clamp", "clamp_", "clip", "clip_"})  # `g.clamp(-c, c)`: clips values
CLAMP_FUNCTIONS = frozenset({"torch.clamp", "torch.clip"})
PARAMETERS = "parameters"
NAMED_PARAMETERS = "named_parameters"
PARAMETERS_METHODS = frozenset({PARAMETERS})  # `for p in model.parameters()`: yields the parameters themselves
# The methods that read a module's parameters (`named_parameters()` yields (name, parameter) pairs).
PARAMETER_READING_METHODS = PARAMETERS_METHODS | {NAMED_PARAMETERS}
STEP_METHOD = STEP  # `optimizer.step()`, `scaler.step(optimizer)`
EVAL_METHOD = EVAL  # `model.eval()`: the module is put in evaluation mode
FLOAT32_DTYPES = frozenset({"torch.float32", "torch.float", "torch.float64", "torch.double"})
LOW_DTYPES = {"torch.bfloat16": BFLOAT16, "torch.float16": FLOAT16, "torch.half": FLOAT16}
HALF_DTYPES = frozenset(name for name, low in LOW_DTYPES.items() if low == FLOAT16)
BFLOAT16_DTYPES = frozenset(name for name, low in LOW_DTYPES.items() if low == BFLOAT16)

# What a conversion sets a tensor's dtype to (amplint/calls.py, `conversion`): float32 (or wider), low precision,
# or not shown.
CONVERTS_FLOAT32 = FLOAT32
CONVERTS_LOW = "low"
CONVERTS_UNKNOWN = "unknown"
LOW_CASTS = frozenset({HALF, BFLOAT16})  # `x.half()`, `x.bfloat16()`


# What `from <module> import *` binds, for the modules whose AMP names a rule asks about (their `__all__`, or
# their public names where they have none: torch 2.13). A star import from any other module binds names nobody
# here can list (a project module's `from common import *` is the project index's to follow).
STAR_EXPORTS = {
    "torch.cuda.amp": (AUTOCAST, CUSTOM_BWD, CUSTOM_FWD, GRAD_SCALER),
    "torch.cpu.amp": (AUTOCAST, GRAD_SCALER),
    "torch.amp": (AUTOCAST, CUSTOM_BWD, CUSTOM_FWD, GRAD_SCALER),
}

# === AMP007: the deprecated AMP spellings, as a table (amplint/rules/amp007_deprecated_amp_api.py reads it) ====
@dataclass(frozen=True)
class Deprecated:
    """One deprecated AMP API: the qualified spellings that name it, its replacement in `torch.amp`, and how a call
    of it migrates. `positional`/`keyword_only` are the legacy signature (torch 1.10 to 2.13, measured): a call that
    passes anything else, or one parameter twice, raises TypeError already, so it is reported, never rewritten."""

    spellings: tuple[str, ...]  # qualified names (the public one first)
    new_name: str  # its name in torch.amp
    device: str  # the device the legacy module implies
    positional: tuple[str, ...]  # the legacy parameters, by position
    keyword_only: tuple[str, ...] = ()
    device_first: bool = True  # the replacement takes the device first (autocast, GradScaler), else `device_type=`
    # The dtype a legacy autocast passes when the call names none. `torch.amp.autocast(device)` without a dtype
    # takes the current autocast dtype instead, which an enclosing region sets: inside `torch.autocast("cuda",
    # dtype=torch.bfloat16)` a legacy `torch.cuda.amp.autocast()` computes in float16, the bare new spelling in
    # bfloat16. The migration writes the legacy default so the region computes as before.
    default_dtype: str | None = None


_LEGACY_AUTOCAST = (ENABLED, DTYPE, CACHE_ENABLED)  # the legacy autocast takes `enabled` first, not the device
_LEGACY_SCALER = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", ENABLED)
DEPRECATIONS = (
    Deprecated(("torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast"), AUTOCAST, CUDA,
               _LEGACY_AUTOCAST, default_dtype=DEFAULT_LOW_DTYPE[CUDA]),
    Deprecated(("torch.cpu.amp.autocast", "torch.cpu.amp.autocast_mode.autocast"), AUTOCAST, CPU,
               _LEGACY_AUTOCAST, default_dtype=DEFAULT_LOW_DTYPE[CPU]),
    Deprecated(("torch.cuda.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler"), GRAD_SCALER, CUDA,
               _LEGACY_SCALER),
    Deprecated(("torch.cpu.amp.GradScaler", "torch.cpu.amp.grad_scaler.GradScaler"), GRAD_SCALER, CPU,
               _LEGACY_SCALER),
    Deprecated(("torch.cuda.amp.custom_fwd", "torch.cuda.amp.autocast_mode.custom_fwd"), CUSTOM_FWD, CUDA,
               ("fwd",), keyword_only=(CAST_INPUTS,), device_first=False),  # custom_fwd(fwd=None, *, cast_inputs=None)
    Deprecated(("torch.cuda.amp.custom_bwd", "torch.cuda.amp.autocast_mode.custom_bwd"), CUSTOM_BWD, CUDA,
               ("bwd",), device_first=False),
)
# Spellings deprecated in torch 2.4 (FutureWarning at every call): qualified name -> its row of the table, and
# (name in torch.amp, device) for the modules that ask only that.
DEPRECATED_BY_SPELLING = {spelling: row for row in DEPRECATIONS for spelling in row.spellings}
DEPRECATED_AMP = {spelling: (row.new_name, row.device) for spelling, row in DEPRECATED_BY_SPELLING.items()}
# The legacy modules whose AMP names all exist in torch.amp too (an alias of them can be rebound to torch.amp).
DEPRECATED_AMP_MODULES = {"torch.cuda.amp": CUDA, "torch.cpu.amp": CPU}
AMP_DEPRECATED_SINCE = "2.4"  # the first release where the legacy AMP spellings emit a FutureWarning
# The spellings AMP fixes write, and the first torch release that has each (with the keyword arguments the
# migration passes). `torch.autocast(device_type, dtype=..., enabled=..., cache_enabled=...)` arrived in 1.10;
# `torch.amp.autocast` is the same class under `torch.amp` (present in 2.0; reported from 1.12/1.13 on, so 2.0
# is the safe claim); `torch.amp.GradScaler(device, ...)` in 2.3; `torch.amp.custom_fwd`/`custom_bwd` with
# `device_type=` in 2.4, the release whose `torch.cuda.amp`/`torch.cpu.amp` spellings start to warn.
SPELLING_SINCE = {
    TORCH_AUTOCAST: "1.10",
    "torch.amp.autocast": "2.0",
    "torch.amp.GradScaler": "2.3",
    "torch.amp.custom_fwd": AMP_DEPRECATED_SINCE,
    "torch.amp.custom_bwd": AMP_DEPRECATED_SINCE,
}
# The first torch release that has each AMP module or name, for what a module's own use shows about the torch it
# runs on (amplint/facts/versions.py, `shown_floor`): a name not listed counts as its module (`torch.amp.x` as
# `torch.amp`). `torch.cuda.amp` arrived in 1.6, `torch.autocast` in 1.10, the `torch.amp` package (with
# `autocast`) in 1.12, `torch.amp.GradScaler` in 2.3, `torch.amp.custom_fwd`/`custom_bwd` in 2.4. A lower number
# than the truth only raises the floor less; `torch.cpu.amp` is not listed (its first release is not checked).
INTRODUCED = {
    "torch.cuda.amp": "1.6",
    TORCH_AUTOCAST: "1.10",
    TORCH_AMP: "1.12",
    "torch.amp.GradScaler": "2.3",
    "torch.amp.grad_scaler": "2.3",
    "torch.amp.custom_fwd": AMP_DEPRECATED_SINCE,
    "torch.amp.custom_bwd": AMP_DEPRECATED_SINCE,
}

# === end of AMP007's table ===========================================================================

# Where optimizer classes live, by qualified name (an import says which object a name is): torch's own and the
# optimizer packages training code commonly imports. Capitalised names there are optimizer classes; schedulers
# and weight averaging live in the excluded submodules.
OPTIMIZER_MODULES = ("torch.optim.", "torch.distributed.optim.", "apex.optimizers.", "bitsandbytes.optim.",
                     "torch_optimizer.", "deepspeed.ops.adam.", "deepspeed.ops.lamb.", "timm.optim.")
NOT_OPTIMIZER_MODULES = ("torch.optim.lr_scheduler", "torch.optim.swa_utils", "timm.optim.optim_factory.param")
OPTIMIZER_FUNCTIONS = frozenset({
    "timm.optim.create_optimizer_v2", "timm.optim.create_optimizer", "timm.optim.optim_factory.create_optimizer_v2",
    "transformers.AdamW", "transformers.Adafactor", "transformers.optimization.AdamW",
    "transformers.optimization.Adafactor",
})


class Effect:
    """What a call or a function does, in AMP terms: what a call is (amplint/calls.py: `effect`, the facts layer's
    events), and the names of the per-function facts the project index records (amplint/index/functions.py,
    `EFFECTS`) and the rules ask about."""

    BUILDS_SCALER = "builds_scaler"
    KEEPS_SCALER = "keeps_scaler"
    BACKWARD = BACKWARD
    MANUAL_BACKWARD = MANUAL_BACKWARD  # a call only: Lightning's `self.manual_backward(loss)`, a backward it scales
    SCALED_BACKWARD = "scaled_backward"
    UNSCALE = "unscale"
    CLIP = "clip"
    STEP = STEP  # an optimizer's step, or a step whose receiver is not known to be a scaler
    OPTIMIZER_STEP = "optimizer_step"
    SCALER_STEP = "scaler_step"
    SCALER_UPDATE = "scaler_update"
    SCALER_SCALE = "scaler_scale"  # a call only: `scaler.scale(loss)`
    SCALER_LOAD = "scaler_load"  # a call only: `scaler.load_state_dict(state)`
    ZERO_GRAD = ZERO_GRAD  # a call only: `optimizer.zero_grad()` (shows an optimizer, or a module)
    REGION = "region"
    DISABLED_REGION = "disabled_region"
    AUTOCAST_OFF = "autocast_off"
    RETURNS_FLOAT32 = "returns_float32"
    NO_GRAD = NO_GRAD
    ENABLE_GRAD = ENABLE_GRAD
    EVAL = EVAL
    LOOP = "loop"
    LOWERS_NOTHING = "lowers_nothing"  # runs no op autocast lowers: returns its inputs' dtype
    RETURNS_AUTOCAST_DTYPE = "returns_autocast_dtype"  # casts to the autocast dtype on purpose
    HALF_MODEL = "half_model"  # converts something to float16 (`x.half()`, `x.to(torch.float16)`)
    BFLOAT16_REGION = "bfloat16_region"  # opens an enabled region whose dtype is bfloat16 (CPU's default included)
    OTHER_REGION = "other_region"  # opens an enabled region whose dtype is float16 or not known
    RETURNS_AUTOCAST = "returns_autocast"  # a factory: returns (or, a generator, yields in) an enabled region


EFFECTS = (Effect.BUILDS_SCALER, Effect.KEEPS_SCALER, Effect.BACKWARD, Effect.SCALED_BACKWARD, Effect.UNSCALE,
           Effect.CLIP, Effect.STEP, Effect.OPTIMIZER_STEP, Effect.SCALER_STEP, Effect.SCALER_UPDATE, Effect.REGION,
           Effect.DISABLED_REGION, Effect.AUTOCAST_OFF, Effect.RETURNS_FLOAT32, Effect.NO_GRAD, Effect.ENABLE_GRAD,
           Effect.EVAL, Effect.LOOP, Effect.LOWERS_NOTHING, Effect.RETURNS_AUTOCAST_DTYPE,
           Effect.HALF_MODEL, Effect.BFLOAT16_REGION, Effect.OTHER_REGION, Effect.RETURNS_AUTOCAST)
# nn.Module methods that return the module itself: `model = Net().cuda()` holds a Net.
MODULE_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "float", HALF, BFLOAT16, "double", "train", EVAL,
                                 "requires_grad_"})

# The names that mean AMP wherever the linter spells them as a code word (a string that is an identifier or a
# dotted name): tests/test_layering.py fails when one appears as a literal outside this module. `float`,
# `double`, `cuda`, `cpu`, `to`, `type` are left out: Python and torch use them for much else (the builtin
# `float`, a tensor's `.cuda()`).
API_WORDS = frozenset({
    AMP, AUTOGRAD, AUTOCAST, GRAD_SCALER, SHARDED_GRAD_SCALER, CUSTOM_FWD, CUSTOM_BWD,
    SCALE, UNSCALE, STEP, UPDATE, GET_SCALE, IS_ENABLED, LOAD_STATE_DICT, ZERO_GRAD, PARAM_GROUPS,
    BACKWARD, MANUAL_BACKWARD, GRAD, NO_GRAD, INFERENCE_MODE, ENABLE_GRAD, SET_GRAD_ENABLED,
    CLIP_GRAD, CLIP_GRAD_NORM_, CLIP_GRAD_NORM, CLIP_GRAD_VALUE_, CLIP_GRADS_WITH_NORM_, GET_TOTAL_NORM, EVAL,
    ENABLED, DTYPE, DEVICE_TYPE, CACHE_ENABLED, CAST_INPUTS,
    FLOAT16, BFLOAT16, HALF, FLOAT32, FLOAT64,
})


def last_name(qualified: str) -> str:
    """`torch.nn.utils.clip_grad_norm_` -> `clip_grad_norm_`."""
    return qualified.rsplit(".", 1)[-1]


def last_names(qualified: frozenset[str] | dict[str, object]) -> frozenset[str]:
    """The last names of a set of qualified names."""
    return frozenset(last_name(name) for name in qualified)


def is_autocast(qualified: str | None) -> bool:
    """Is `qualified` autocast under one of its spellings (new or legacy)?"""
    return qualified in AUTOCAST_NEW or qualified in AUTOCAST_LEGACY


def is_grad_scaler(qualified: str | None) -> bool:
    """Is `qualified` one of the GradScaler classes?"""
    return qualified in GRAD_SCALERS


def is_known_optimizer_class(qualified: str | None) -> bool:
    """Is `qualified` (a name resolved through the imports) a class or factory that builds an optimizer?

    Identity comes from where the name is imported from, never from how it is spelled: a local class
    `LambOptimizer` or a factory `get_optimizer_and_scheduler` is unknown (a factory may return a scheduler
    too)."""
    if not qualified:
        return False
    if qualified in OPTIMIZER_FUNCTIONS:
        return True
    if not qualified.startswith(OPTIMIZER_MODULES) or qualified.startswith(NOT_OPTIMIZER_MODULES):
        return False
    last = last_name(qualified)
    return last[:1].isupper() and "Scheduler" not in last and "LR" not in last


_OPTIMIZER_FUNCTION_NAMES = last_names(OPTIMIZER_FUNCTIONS)


def may_build_optimizer(last: str) -> bool:
    """Can a callee whose last name (or what an import alias of it stands for) is `last` be a known optimizer
    class or factory? The prefilter's screen: an upper bound of `is_known_optimizer_class` read from the same
    lists (a class is capitalised; the factories are named in `OPTIMIZER_FUNCTIONS`)."""
    return last[:1].isupper() or last in _OPTIMIZER_FUNCTION_NAMES


# What torch ops do to dtypes under autocast (the facts layer's dtype questions and the index's
# `lowers_nothing`, `returns_autocast_dtype` ask these).
LOW_OPS = frozenset({
    "mm", "matmul", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "addr", "mv", "linear", "bilinear", "einsum",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "chain_matmul",
    "multi_dot", "prelu", "scaled_dot_product_attention", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
})
FLOAT32_OPS = frozenset({
    "softmax", "log_softmax", "layer_norm", "group_norm", "norm", "normalize", "exp", "log", "log1p", "log10",
    "log2", "pow", "sum", "mean", "cumsum", "cumprod", "prod", "mse_loss", "cross_entropy", "nll_loss",
    "binary_cross_entropy_with_logits", "kl_div", "l1_loss", "smooth_l1_loss", "cosine_similarity", "dist",
    "pdist", "cdist", "rsqrt", "reciprocal", "acos", "asin", "cosh", "erfinv", "sinh", "tan", "softplus",
    "logsumexp", "var", "std", "renorm", "topk", "sort", "argmax", "argmin", "max", "min", "allclose",
})
NOT_TENSORS = frozenset({
    "item", "tolist", "size", "dim", "numel", "len", "int", "float", "bool", "str", "range", "list", "tuple",
    "dict", "isinstance", "zeros", "ones", "empty", "full", "randn", "rand", "randint", "arange", "linspace",
    "tensor", "as_tensor", "from_numpy", "zeros_like", "ones_like", "empty_like", "full_like", "eye", "numpy",
    "cpu", "detach_", "stride", "data_ptr", GET_SCALE, PARAMETERS, NAMED_PARAMETERS, "state_dict",
})
# Methods that make a plain name a tensor; any other method on a plain name (`model.encoder(x)`) is taken to
# be a module or function of the user's, whose output autocast lowers.
TENSOR_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "contiguous", "flatten", "unflatten",
    "squeeze", "unsqueeze", "expand", "expand_as", "repeat", "repeat_interleave", "to", "cuda", HALF,
    BFLOAT16, "detach", "clone", "chunk", "split", "narrow", "masked_fill", "masked_fill_", "relu", "sigmoid",
    "tanh", "gelu", "abs", "neg", "add", "sub", "mul", "div", "clamp", "clamp_", "roll", "flip", "gather",
    "index_select", "select", "unbind", "type_as", "new_zeros", "new_ones", "new_full", "new_empty", "mm", "matmul",
    "bmm", "square", "sqrt", "pow", "exp", "log", "sum", "mean", "max", "min", "norm", "softmax", "log_softmax",
    "argmax", "topk", "sort", "where", "fill_", "zero_", "add_", "mul_", "div_", "sub_", "copy_", "requires_grad_",
    "pin_memory", "numpy", "tolist", "item", "size", "dim", "float", "double", "long", "int", "bool", "type",
})
# Methods of objects that are not tensors (optimizers, scalers, modules): their receiver is not a tensor use.
NOT_TENSOR_METHODS = frozenset({
    *SCALER_METHODS, ZERO_GRAD, LOAD_STATE_DICT, "train", EVAL, "apply",
    "add_param_group", "register_buffer", "register_parameter", "modules", "children", "get", "items", "keys",
    "values", "append", "extend", "pop", "format", "join", "split", "replace", "startswith", "endswith",
})
# Ops whose result is an integer or bool tensor (or a Python number) whatever their input: never low precision.
INTEGER_OPS = frozenset({
    "long", "int", "bool", "short", "byte", "char", "argmax", "argmin", "argsort", "nonzero", "eq", "ne", "lt",
    "le", "gt", "ge", "greater", "less", "equal", "isnan", "isinf", "isfinite", "isposinf", "isneginf",
    "logical_and", "logical_or", "logical_not", "logical_xor", "any", "all", "count_nonzero", "bincount",
    "searchsorted", "bucketize", "numel", "size", "dim", "item", "tolist", "len", "multinomial",
})
# Tensor methods (and torch functions) whose result is a tensor of the input's floating dtype: a floating input
# gives a floating tensor. Not here: methods that return tuples (`chunk`, `split`, `unbind`, `max(dim)`, `sort`,
# `topk`) or a dtype of their own.
FLOAT_PRESERVING = frozenset({
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "contiguous", "flatten", "unflatten",
    "squeeze", "unsqueeze", "expand", "expand_as", "repeat", "repeat_interleave", "cuda", "cpu", "detach",
    "clone", "narrow", "masked_fill", "relu", "sigmoid", "tanh", "gelu", "silu", "abs", "neg", "add", "sub",
    "mul", "div", "clamp", "roll", "flip", "index_select", "select", "square", "sqrt", "pow", "exp", "log",
    "sum", "mean", "norm", "softmax", "log_softmax", HALF, BFLOAT16, "float", "double", "mm", "matmul",
    "bmm", "dropout", "layer_norm", "group_norm", "normalize", "cat", "stack", "where", "einsum", "baddbmm", "addmm",
    "lerp", "rsqrt", "reciprocal", "tril", "triu", "diagonal", "type_as", "mish", "softplus", "elu",
    "leaky_relu", "hardtanh", "logsumexp", "cumsum", "var", "std",
})
# Functional ops that only take floating inputs: their result is a floating tensor.
FLOAT_ONLY_OPS = frozenset({
    "linear", "bilinear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "scaled_dot_product_attention", "prelu", "layer_norm", "group_norm", "softmax",
    "log_softmax", "gelu", "silu", "sigmoid", "tanh", "dropout",
})
# torch.nn modules whose forward returns one floating tensor (not LSTM/GRU/MultiheadAttention: tuples; not
# MaxPool: `return_indices=True` gives a tuple). `Sequential` counts when each of its modules does.
TENSOR_MODULES = frozenset({
    "Linear", "Bilinear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "Embedding", "LayerNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "RMSNorm", "Dropout", "Dropout1d", "Dropout2d",
    "Dropout3d", "ReLU", "ReLU6", "GELU", "SiLU", "Mish", "ELU", "SELU", "CELU", "LeakyReLU", "PReLU", "Sigmoid",
    "Tanh", "Softplus", "Softsign", "Hardtanh", "Hardswish", "Hardsigmoid", "Softmax", "LogSoftmax", "Identity",
    "Flatten", "Unflatten", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d", "Upsample", "PixelShuffle", "TransformerEncoderLayer", "TransformerEncoder",
})
# Tensor methods and torch functions that autocast never runs in a low dtype: a function calling only these (and
# builtins) returns its inputs' dtype under autocast (the index's `lowers_nothing`).
DTYPE_KEEPING_CALLS = (FLOAT_PRESERVING | NOT_TENSORS | INTEGER_OPS | TENSOR_METHODS | frozenset({
    "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor", "copy_", "index_put_", "scatter", "scatter_",
    "masked_scatter", "masked_select", "take_along_dim", "pad", "interpolate"})) - LOW_OPS - frozenset({
    HALF, BFLOAT16, "type_as", "cuda"}) - CONVERT_METHODS
# Tensor methods that only move, select or copy data: the result has the receiver's dtype, whatever it is (an
# integer tensor stays integer, a float32 one float32), autocast or not (the index's `items`).
LAYOUT_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "contiguous", "flatten", "unflatten",
    "squeeze", "unsqueeze", "expand", "expand_as", "repeat", "repeat_interleave", "detach", "clone", "narrow",
    "roll", "flip", "index_select", "select", "gather", "masked_select", "tril", "triu", "diagonal", "cpu", "cuda",
})
AUTOCAST_DTYPE_QUERIES = frozenset({"get_autocast_gpu_dtype", "get_autocast_cpu_dtype", "get_autocast_dtype",
                                    "get_autocast_xpu_dtype"})


# === Frameworks: where Lightning, accelerate and the HF Trainer open autocast, scale, unscale and step ============
# Data only: no framework is imported by the linter (amplint/facts/frameworks.py reads this, AMP003 reports).
# Measured with pytorch-lightning 2.6.6, accelerate 1.16.0 and transformers 5.25.0 on CPU (float16 autocast or
# loss scaling by a CPU GradScaler handed to the framework where it builds its own on CUDA). A precision counts only as the code shows it: a literal keyword of the framework's
# constructor, in the module or in a module importing it. A value not listed, an expression, or none: unknown.
class Framework:
    """One framework's contract: the classes that set its precision (`constructors`, their `precision` keyword),
    the values of that keyword with which it scales the loss by a GradScaler (`scaled`), the keyword that puts it
    on the CPU, where it builds no scaler (`cpu`), the classes a user subclasses (`bases`), and its hooks."""

    def __init__(self, name: str, constructors: frozenset[str], precision: str, scaled: frozenset,
                 cpu: tuple[str, object] | None, bases: frozenset[str] = frozenset()) -> None:
        self.name, self.constructors, self.precision, self.scaled = name, constructors, precision, scaled
        self.cpu, self.bases = cpu, bases

    def scales(self, keywords: dict[str, object]) -> bool:
        """Do these literal keywords of a constructor (name -> value; a value not a literal is absent) show that
        the framework scales the loss?"""
        if self.cpu is not None and keywords.get(self.cpu[0]) == self.cpu[1]:
            return False  # `Trainer(accelerator="cpu", precision="16-mixed")` trains bfloat16, no scaler (measured)
        return self.precision in keywords and keywords[self.precision] in self.scaled

    def autocasts(self, keywords: dict[str, object], values: frozenset) -> bool:
        """Do these literal keywords of a constructor show one of the precisions `values` (with which it opens
        autocast; on the CPU too, where 16-mixed becomes bf16-mixed)?"""
        return self.precision in keywords and keywords[self.precision] in values


# Lightning: the Trainer opens autocast around `training_step`; with automatic optimization it runs the scaled
# backward, then `on_after_backward`, THEN unscales (a clip there saw 57288.5 for a true norm of 0.874, and left
# 1.5e-5), then `on_before_optimizer_step`, its own clip (`gradient_clip_val`, `configure_gradient_clipping`) and
# the step. In manual optimization the unscale is inside `opt.step()`: a clip after `self.manual_backward(loss)`
# and before it saw 60046.8 (true 0.916), `self.clip_gradients(opt, gradient_clip_val=1.0)` there left an update
# of 1.4e-6 instead of 0.085; in `on_before_optimizer_step` it saw 0.916. Legacy `precision=16`/"16" = "16-mixed".
LIGHTNING = Framework(
    "Lightning",
    constructors=frozenset({"lightning.Trainer", "lightning.pytorch.Trainer", "lightning.pytorch.trainer.Trainer",
                            "lightning.pytorch.trainer.trainer.Trainer", "pytorch_lightning.Trainer",
                            "pytorch_lightning.trainer.Trainer", "pytorch_lightning.trainer.trainer.Trainer"}),
    precision="precision", scaled=frozenset({"16-mixed", "16", 16}), cpu=("accelerator", "cpu"),
    bases=frozenset({"lightning.LightningModule", "lightning.pytorch.LightningModule",
                     "lightning.pytorch.core.LightningModule", "lightning.pytorch.core.module.LightningModule",
                     "pytorch_lightning.LightningModule", "pytorch_lightning.core.LightningModule",
                     "pytorch_lightning.core.module.LightningModule",
                     "pytorch_lightning.core.lightning.LightningModule"}))
LIGHTNING_SCALED_HOOK = "on_after_backward"  # runs after the scaled backward, before the unscale
LIGHTNING_UNSCALED_HOOK = "on_before_optimizer_step"  # runs after the unscale: a clip there sees true gradients
LIGHTNING_CLIP = "clip_gradients"  # `self.clip_gradients(optimizer, ...)`: clips as it finds them, unscales nothing
# Lightning manual optimization (`self.automatic_optimization = False`): `self.manual_backward(loss)` and
# `opt.step()` inside `training_step` run UNDER the Trainer's autocast (bf16-mixed and 16-mixed alike): a backward
# there computed an fp32 island's weight gradient with error 3.6e-3 instead of 3e-7 (bf16; the watch test
# tests/test_watch_frameworks.py measures it). Wrapped in `torch.autocast(device_type, enabled=False)` it measured
# clean. The precisions with which the Trainer opens autocast around `training_step` (legacy "bf16" = "bf16-mixed";
# the "-true" ones cast the model and open none):
LIGHTNING_AUTOCASTS = frozenset({"16-mixed", "16", 16, "bf16-mixed", "bf16"})
LIGHTNING_TRAINING_STEP = "training_step"
LIGHTNING_MANUAL_SWITCH = "automatic_optimization"  # `self.automatic_optimization = False`: manual optimization

# accelerate: `accelerator.backward(loss)` scales the loss (mixed_precision="fp16"); torch's clip after it saw
# 60073.8 for a true norm of 0.917 (update 1.4e-6 instead of 8.4e-2); `accelerator.clip_grad_norm_` (and
# `clip_grad_value_`) unscales first, as `unscale_gradients()` does. `cpu=True` with "fp16" trains float32.
ACCELERATE = Framework(
    "accelerate",
    constructors=frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"}),
    precision="mixed_precision", scaled=frozenset({"fp16"}), cpu=("cpu", True))
ACCELERATE_BACKWARD = BACKWARD  # `accelerator.backward(loss)`
ACCELERATE_UNSCALES = frozenset({CLIP_GRAD_NORM_, CLIP_GRAD_VALUE_, "unscale_gradients"})

# The HF Trainer: opens no autocast of its own (the prepared model's forward does, through accelerate); its
# `training_step` runs the scaled backward (`self.accelerator.backward`; the gradients after it had norms
# 64408..84125 for true ones about 1), and after it returns the Trainer unscales and clips (`max_grad_norm`, 1.0
# by default), then steps. A `training_step` override that unscales (`self.accelerator.clip_grad_norm_`) makes
# that second unscale raise "unscale_() has already been called on this optimizer since the last update()";
# torch's clip there sees scaled gradients. With `max_grad_norm=0` 5.25 still unscales (to log the norm: it
# raised too) where older releases clipped nothing: a version not known, such a case is left silent.
HF_TRAINER = Framework(
    "the HF Trainer",
    constructors=frozenset({"transformers.TrainingArguments", "transformers.training_args.TrainingArguments",
                            "transformers.Seq2SeqTrainingArguments",
                            "transformers.training_args_seq2seq.Seq2SeqTrainingArguments"}),
    precision="fp16", scaled=frozenset({True}), cpu=("use_cpu", True),
    bases=frozenset({"transformers.Trainer", "transformers.trainer.Trainer", "transformers.Seq2SeqTrainer",
                     "transformers.trainer_seq2seq.Seq2SeqTrainer"}))
HF_TRAINING_STEP = "training_step"
HF_ACCELERATOR = "accelerator"  # `self.accelerator`: the Trainer's Accelerator
HF_MAX_GRAD_NORM = "max_grad_norm"
HF_NO_CLIP = frozenset({0, 0.0, None})  # `max_grad_norm` values with which some releases do not unscale
FRAMEWORKS = (LIGHTNING, ACCELERATE, HF_TRAINER)
# A module where one of the contracts can be broken names one of these (the rules' screen), or writes the
# keyword accelerate's precision is shown by.
FRAMEWORK_WORDS = (LIGHTNING_SCALED_HOOK, MANUAL_BACKWARD, HF_TRAINING_STEP)
FRAMEWORK_CLIPS = (*sorted(ACCELERATE_UNSCALES), LIGHTNING_CLIP)  # the frameworks' clips and unscales
# === end of the frameworks =========================================================================================
