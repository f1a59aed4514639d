"""Which local names hold tensors that autocast made low precision, and which uses of a name are casts.

A deliberately small dataflow: names assigned in an autocast region from an op autocast lowers (matmul, linear,
conv, a module call) or from another such name are low precision; casts, tensor factories and ops that CUDA
autocast runs in float32 (softmax, norms, losses...) are not. When unsure, a name is not low precision.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Callable

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts.model import Assignment, Frame
from amplint.facts.names import FLOAT32_DTYPES, dotted_name
from amplint.vocabulary import (AUTOCAST_DTYPE_QUERIES, DTYPE_KEEPING_CALLS, FLOAT32_OPS, FLOAT_ONLY_OPS, FLOAT_PRESERVING, INTEGER_OPS, LOW_OPS, NOT_TENSORS, NOT_TENSOR_METHODS, TENSOR_METHODS, TENSOR_MODULES)  # noqa: F401  (what torch ops do to dtypes)

CAST_METHODS = vocab.FLOAT32_CASTS
CONVERT_METHODS = frozenset({"to", "type"})
BUILTIN_NAMES = frozenset(dir(builtins))
UNCAST_SAFE_FUNCTIONS = frozenset({"isinstance", "len", "print", "type", "id", "hasattr", "getattr", "repr", "str"})
_FLOAT_FROM_FLOAT = FLOAT_PRESERVING | LOW_OPS
TORCH_NAMESPACES = ("torch.", "F.", "nn.functional.")
MODULE_PLACEMENT = frozenset({"to", "cuda", "cpu", "float", "double", "train", vocab.EVAL, "requires_grad_"})


def is_float32_cast(call: cst.Call) -> bool:
    """`.float()`, `.double()`, `.to(torch.float32)`, `.to(dtype=torch.float32)`, `.type(torch.float32)`.

    A `.to(x)`/`.type(x)` whose argument is not plainly a device counts as a cast: the argument may be a dtype.
    """
    if not isinstance(call.func, cst.Attribute):
        return False
    method = call.func.attr.value
    if method in CAST_METHODS:
        return True
    if method not in CONVERT_METHODS or not call.args:
        return False
    for arg in call.args:
        text = dotted_name(arg.value) or ""
        if text.startswith("torch.") and text in FLOAT32_DTYPES:
            return True
    first = call.args[0]
    if first.keyword is not None and first.keyword.value != vocab.DTYPE:
        return False
    if isinstance(first.value, (cst.SimpleString, cst.FormattedString)):
        return False  # .to("cuda")
    name = (dotted_name(first.value) or "").lower()
    return bool(name) and "device" not in name and "dev" != name.rsplit(".", 1)[-1] and not name.endswith(
        (vocab.BFLOAT16, vocab.FLOAT16, vocab.HALF))


def has_float32_dtype_keyword(call: cst.Call) -> bool:
    """`torch.sum(x, dtype=torch.float32)`: the op converts its input itself (deliberate, not autocast)."""
    return any(arg.keyword is not None and arg.keyword.value == vocab.DTYPE
               and (dotted_name(arg.value) or "") in FLOAT32_DTYPES for arg in call.args)


def _op_name(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    if isinstance(func, cst.Name):
        return func.value
    return ""


def written_tensor(call: cst.Call) -> cst.BaseExpression | None:
    """The tensor an `out=` call or an in-place method (`acc.add_(...)`) writes into and returns. Autocast does not
    apply to those ops (PyTorch's "Op Eligibility"), so the result has that tensor's dtype, whatever the op."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "out":
            return arg.value
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value.endswith("_") and not func.attr.value.startswith("_"):
        return func.value
    return None


@dataclass
class Lowering:
    """What a caller of `is_low_precision` knows beyond names: what autocast makes of a callee's output when it is
    a known torch.nn module (`module_output(func)`: "low", "float32", "keep" the input's dtype; None when not
    known, see `module_output` below), and
    which names surely hold Python numbers (`scalars`: sizes, lengths; with it, a user module or function
    counts as lowered only when handed something that may be a tensor: `self.rotary(n)` with `n = x.shape[1]`
    is not)."""

    module_output: Callable[[cst.BaseExpression], str | None] | None = None
    scalars: set[str] | None = None
    # Does the callee return its inputs' dtype: a project function that runs no op autocast lowers, or, where no
    # autocast region is in view, a library's function (`k2.get_rnnt_prune_ranges(...)` of float32 gradients
    # gives integer ranges; `einops.rearrange(h, ...)` keeps `h`'s)?
    # (A call -> the arguments whose dtype its result carries; None when not such a function.)
    library: Callable[[cst.Call], list[cst.BaseExpression] | None] | None = None


def is_low_precision(value: cst.BaseExpression, low: set[str], how: Lowering | None = None) -> bool:
    """Does evaluating `value` inside an autocast region yield a low-precision tensor?"""
    if isinstance(value, cst.Call):
        written = written_tensor(value)
        if written is not None:
            return is_low_precision(written, low, how)
        op = _op_name(value)
        if is_float32_cast(value) or op in NOT_TENSORS or op in FLOAT32_OPS or has_float32_dtype_keyword(value) \
                or op in INTEGER_OPS:
            return False
        if op in LOW_OPS:
            return True
        func = value.func
        receiver = dotted_name(func.value) if isinstance(func, cst.Attribute) else None
        arguments = [arg.value for arg in value.args]
        if receiver is not None and "." not in receiver and receiver != "self" and (
                receiver in low or op in TENSOR_METHODS):
            # A tensor method (h.view(...), x.relu()) keeps its receiver's dtype.
            return receiver in low or any(is_low_precision(a, low, how) for a in arguments)
        dotted = dotted_name(func) or ""
        if dotted in BUILTIN_NAMES:
            return False
        if dotted.startswith(("torch.", "F.", "nn.functional.", "np.", "math.")):
            return any(is_low_precision(a, low, how) for a in arguments)
        kind = how.module_output(func) if how is not None and how.module_output is not None else None
        if kind is not None:
            # A torch.nn module: lowered by autocast (nn.Linear), float32 (nn.LayerNorm on CUDA), or keeping its
            # input's dtype (nn.Embedding of token ids: float32).
            return kind == "low" or (kind == "keep" and any(is_low_precision(a, low, how) for a in arguments))
        carried = how.library(value) if how is not None and how.library is not None else None
        if carried is not None:
            return any(is_low_precision(a, low, how) for a in carried)
        # A module or function of the user's: model(x), self.encoder(x), head(h).
        if how is not None and how.scalars is not None:
            return bool(dotted) and any(not is_scalar(a, how.scalars) for a in arguments)
        return bool(dotted) and any(not isinstance(a, (cst.SimpleString, cst.Integer, cst.Float)) for a in arguments)
    if isinstance(value, cst.BinaryOperation):
        if isinstance(value.operator, cst.MatrixMultiply):
            return True
        return is_low_precision(value.left, low, how) or is_low_precision(value.right, low, how)
    if isinstance(value, cst.UnaryOperation):
        return is_low_precision(value.expression, low, how)
    if isinstance(value, cst.Subscript):
        return is_low_precision(value.value, low, how)
    if isinstance(value, (cst.List, cst.Tuple)):  # a list of such tensors
        return any(is_low_precision(element.value, low, how) for element in value.elements)
    if isinstance(value, (cst.ListComp, cst.GeneratorExp)):  # [f.permute(0, 2, 1) for f in feats]
        inner = set(low)
        clause = value.for_in
        while clause is not None:
            if is_low_precision(clause.iter, inner, how):
                inner |= {name.value for name in _target_names(clause.target)}
            clause = clause.inner_for_in
        return is_low_precision(value.elt, inner, how)
    if isinstance(value, cst.Name):
        return value.value in low
    return False


SIZE_ATTRIBUTES = frozenset({"shape", "ndim", vocab.DTYPE, "device", "is_cuda", "requires_grad"})


def is_scalar(value: cst.BaseExpression, scalars: set[str]) -> bool:
    """Is `value` surely no tensor: a literal, a size (`x.shape[1]`, `x.size(0)`, `len(x)`, `x.ndim`), a name in
    `scalars`, or arithmetic on those?"""
    if isinstance(value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString, cst.Integer, cst.Float,
                          cst.Imaginary)):
        return True
    if isinstance(value, cst.Name):
        return value.value in scalars or value.value in ("True", "False", "None")
    if isinstance(value, cst.Attribute):
        return value.attr.value in SIZE_ATTRIBUTES
    if isinstance(value, cst.Subscript):
        return isinstance(value.value, cst.Attribute) and value.value.attr.value == "shape"
    if isinstance(value, cst.Call):
        op = _op_name(value)
        return op in ("size", "numel", "dim", "len", "int", "item") and not (
            op == "size" and not isinstance(value.func, cst.Attribute))
    if isinstance(value, cst.BinaryOperation):
        return is_scalar(value.left, scalars) and is_scalar(value.right, scalars)
    if isinstance(value, cst.UnaryOperation):
        return is_scalar(value.expression, scalars)
    return False


def is_floating_tensor(value: cst.BaseExpression, floats: set[str], facts=None, frame: Frame | None = None) -> bool:
    """Is `value` surely a floating-point tensor (so that `.float()` on it works and keeps its meaning)?

    True for the result of a torch op that only returns floating tensors, of a known torch.nn module that returns
    one tensor (`facts` resolves the callee's construction), and of dtype-preserving ops and arithmetic on such
    a value (`floats`: names known to hold one). False whenever that is not known: a user function or module
    may return a dict, a tuple or a number."""
    if isinstance(value, cst.Name):
        return value.value in floats
    if isinstance(value, cst.Subscript):
        return is_floating_tensor(value.value, floats, facts, frame)  # indexing a tensor gives a tensor
    if isinstance(value, cst.Attribute):
        return value.attr.value in ("T", "mT", "H", "data") and is_floating_tensor(value.value, floats, facts, frame)
    if isinstance(value, cst.UnaryOperation):
        return isinstance(value.operator, (cst.Minus, cst.Plus)) and is_floating_tensor(
            value.expression, floats, facts, frame)
    if isinstance(value, cst.BinaryOperation):
        # A floating tensor combined with anything that does not raise gives a floating tensor.
        return is_floating_tensor(value.left, floats, facts, frame) or is_floating_tensor(
            value.right, floats, facts, frame)
    if not isinstance(value, cst.Call):
        return False
    op = _op_name(value)
    if op in INTEGER_OPS:
        return False
    func = value.func
    arguments = [arg.value for arg in value.args if not arg.star]
    if isinstance(func, cst.Attribute):
        dotted = dotted_name(func) or ""
        if dotted.startswith(TORCH_NAMESPACES):
            return op in FLOAT_ONLY_OPS or (op in _FLOAT_FROM_FLOAT and any(
                is_floating_tensor(a, floats, facts, frame) for a in arguments))
        if op in FLOAT_PRESERVING and is_floating_tensor(func.value, floats, facts, frame):
            return True
    return facts is not None and tensor_module(facts, func, frame)


def nn_construction(facts, call: cst.Call) -> tuple[str | None, cst.Call]:
    """(the class's last name, the construction) when the call constructs a torch.nn module, placed or not
    (`nn.Linear(...)`, `nn.Linear(...).to(device)`); (None, the call) otherwise."""
    while isinstance(call.func, cst.Attribute) and call.func.attr.value in MODULE_PLACEMENT and isinstance(
            call.func.value, cst.Call):
        call = call.func.value
    qualified = facts.imports.qualify(call.func) or ""
    if not qualified.startswith("torch.nn.") or qualified.startswith("torch.nn.functional."):
        return None, call
    return qualified.rsplit(".", 1)[-1], call


def tensor_module(facts, func: cst.BaseExpression, frame: Frame | None, depth: int = 0) -> bool:
    """Is `func` (a callee) a torch.nn module known to return one floating tensor: every binding of its name is
    a construction of one (`nn.Linear(...)`, `nn.Sequential(nn.Linear(...), nn.ReLU())`, also `.to(device)`)?"""
    if depth > 3:
        return False
    if isinstance(func, cst.Call):
        last, func = nn_construction(facts, func)
        if last is None:
            return False
        if last == "Sequential":
            return bool(func.args) and all(
                arg.keyword is None and not arg.star and tensor_module(facts, arg.value, frame, depth + 1)
                for arg in func.args)
        return last in TENSOR_MODULES
    key = dotted_name(func)
    if key is None:
        return False
    bound = facts.bindings(key, frame)
    return bool(bound) and all(len(a.targets) == 1 and tensor_module(facts, a.value, a.frame, depth + 1)
                               for a in bound)


# torch.nn modules by what autocast does to their output: lowered to bfloat16/float16 (their op is on autocast's
# lower-precision list), run in float32 on CUDA (on its float32 list), or the input's dtype (not on either list:
# an nn.Embedding of token ids gives float32, a dropout of a bfloat16 tensor gives bfloat16).
LOWERING_MODULES = frozenset({
    "Linear", "Bilinear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d", "PReLU", "MultiheadAttention", "LSTM", "GRU",
    "RNN", "LSTMCell", "GRUCell", "RNNCell", "TransformerEncoderLayer", "TransformerEncoder",
    "TransformerDecoderLayer", "TransformerDecoder", "Transformer",
})
FLOAT32_MODULES = frozenset({
    "LayerNorm", "GroupNorm", "Softmax", "LogSoftmax", "Softmin", "RMSNorm", "CrossEntropyLoss", "MSELoss",
    "NLLLoss", "L1Loss", "SmoothL1Loss", "BCEWithLogitsLoss", "KLDivLoss", "CosineSimilarity",
})
DTYPE_KEEPING_MODULES = frozenset({
    "Embedding", "EmbeddingBag", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d",
    "InstanceNorm3d", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "ReLU", "ReLU6", "GELU", "SiLU", "Mish",
    "ELU", "SELU", "CELU", "LeakyReLU", "Sigmoid", "Tanh", "Softsign", "Hardtanh", "Hardswish", "Hardsigmoid",
    "Identity", "Flatten", "Unflatten", "AvgPool1d", "AvgPool2d", "AvgPool3d", "MaxPool1d", "MaxPool2d",
    "MaxPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "Upsample", "PixelShuffle", "PixelUnshuffle", "ZeroPad2d",
})


def module_output(facts, func: cst.BaseExpression, frame: Frame | None, depth: int = 0) -> str | None:
    """What autocast makes of the output of `func` when it is a torch.nn module every binding of its name
    constructs: "low" (`nn.Linear`), "float32" (`nn.LayerNorm`, on CUDA), "keep" (the input's dtype:
    `nn.Embedding`, `nn.Dropout`); an `nn.Sequential` is what its last module that decides makes it. None when
    it is not known (a user module or function)."""
    if depth > 3:
        return None
    if isinstance(func, cst.Call):
        last, func = nn_construction(facts, func)
        if last is None:
            return None
        if last == "Sequential":
            state = "keep"
            for arg in func.args:
                inner = module_output(facts, arg.value, frame, depth + 1) if arg.keyword is None and not arg.star \
                    else None
                if inner is None:
                    return None
                state = state if inner == "keep" else inner
            return state if func.args else None
        if last in LOWERING_MODULES:
            return "low"
        if last in FLOAT32_MODULES:
            return vocab.FLOAT32
        return "keep" if last in DTYPE_KEEPING_MODULES else None
    key = dotted_name(func)
    if key is None:
        return None
    bound = facts.bindings(key, frame)
    kinds = {module_output(facts, a.value, a.frame, depth + 1) if len(a.targets) == 1 else None for a in bound}
    return kinds.pop() if len(kinds) == 1 else None


def lowering(facts, frame: Frame | None, scalars: set[str] | None = None) -> Lowering:
    """The `Lowering` of a module's code: torch.nn modules resolved through `facts` (`module_output`)."""
    return Lowering(lambda func: module_output(facts, func, frame), scalars)


def floating_names(assignments: list[Assignment], region_frame: Frame, before: int, function: Frame | None,
                   facts=None) -> set[str]:
    """Names whose latest assignment before index `before`, inside `region_frame`, is surely a floating tensor
    (`is_floating_tensor`)."""
    relevant = [a for a in assignments
                if a.index < before and a.frame.function() is function and a.frame.is_within(region_frame)]
    floats: set[str] = set()
    for assignment in sorted(relevant, key=lambda a: a.index):
        floating = len(assignment.targets) == 1 and is_floating_tensor(
            assignment.value, floats, facts, assignment.frame)
        for name in assignment.targets:
            if floating and "." not in name:
                floats.add(name)
            else:
                floats.discard(name)
    return floats


def low_precision_names(assignments: list[Assignment], region_frame: Frame, before: int,
                        function: Frame | None) -> dict[str, Assignment]:
    """Names whose latest assignment before index `before`, inside `region_frame`, is low precision."""
    relevant = [a for a in assignments
                if a.index < before and a.frame.function() is function and a.frame.is_within(region_frame)]
    low: dict[str, Assignment] = {}
    for assignment in sorted(relevant, key=lambda a: a.index):
        produces_low = is_low_precision(assignment.value, set(low))
        for name in assignment.targets:
            if "." in name:
                continue
            if produces_low and (len(assignment.targets) == 1 or isinstance(assignment.value, cst.Call)):
                low[name] = assignment
            else:
                low.pop(name, None)
    return low


VIEW_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "data"})


def viewed_name(node: cst.BaseExpression) -> cst.BaseExpression:
    """The name under a view of it that keeps its dtype (`h.T`, `h.mT`, `h.data`, `h[0]`, `h[:, None].T`; not an
    item of a mapping, `h["key"]`): used
    as an operand or argument, that view computes with the name's dtype, so casting only the plain uses of the
    name would leave `h.float() @ h.T` mixing float32 and bfloat16 (`expected m1 and m2 to have the same
    dtype`). Anything else is returned as is."""
    while True:
        if isinstance(node, cst.Attribute) and node.attr.value in VIEW_ATTRIBUTES:
            node = node.value
        elif isinstance(node, cst.Subscript) and not _keyed_by_string(node):
            node = node.value
        else:
            return node


def _keyed_by_string(node: cst.Subscript) -> bool:
    """`outputs["logits"]`: an item of a mapping (a tensor is indexed by numbers, slices, None or tensors), which
    need not share the dtype of anything: not a view."""
    return any(isinstance(element.slice, cst.Index)
               and isinstance(element.slice.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString))
               for element in node.slice)


# Methods of a container that take a value to keep, not to compute with (`outputs.append(h)`).
CONTAINER_METHODS = frozenset({"append", "extend", "insert", "add", vocab.UPDATE, "setdefault", "put", "put_nowait",
                               "push", "appendleft", "__setitem__"})
# What shows a parameter (whose type no caller tells) to be a floating tensor where it is used: methods and torch
# functions that compute in floating point (not those an integer tensor or a bool mask is given too: `sum`,
# `max`, `unsqueeze`, `gather`, `masked_fill`, `where`).
FLOAT_COMPUTING = (LOW_OPS | FLOAT_ONLY_OPS | FLOAT32_OPS | frozenset({
    "sqrt", "rsqrt", "square", "reciprocal", "sigmoid", "tanh", "relu", "gelu", "silu", "softplus", "erf",
    "exp2", "expm1", "sin", "cos", "atan2", "lerp", "addcmul", "addcdiv", "baddbmm", "layer_norm", "rms_norm",
    "batch_norm", "instance_norm", "interpolate", "grid_sample", "avg_pool1d", "avg_pool2d", "avg_pool3d",
})) - frozenset({"sum", "cumsum", "prod", "cumprod", "max", "min", "argmax", "argmin", "topk", "sort",
                 "allclose", "norm", "dist"})
# Torch functions each of whose tensor arguments is a floating operand (not a loss's class-index target).
FLOAT_OPERANDS = LOW_OPS | frozenset({
    "cdist", "cosine_similarity", "pairwise_distance", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits", "atan2", "lerp", "addcmul", "addcdiv",
})
_NOT_ARITHMETIC = ("BitAnd", "BitOr", "BitXor", "LeftShift", "RightShift")


def deliberately_low(value: cst.BaseExpression) -> bool:
    """Is `value` cast on purpose to the autocast dtype (`cast(args, torch.get_autocast_gpu_dtype())`,
    `x.to(torch.get_autocast_dtype("cuda"))`), for a kernel that wants it so?"""
    if isinstance(value, cst.Call) and _op_name(value) in AUTOCAST_DTYPE_QUERIES:
        return True
    return any(deliberately_low(child) for child in value.children if isinstance(child, cst.BaseExpression)) or \
        any(deliberately_low(child.value) for child in value.children if isinstance(child, cst.Arg))


class UncastUses:  # a libcst visitor once made one with amplint.lazy.visitor_class
    """Uses of the watched names inside a block as computation inputs without a float32 cast, in order.

    A use is a method receiver, a call argument or an operand; metadata (`h.shape`, `h.size()`), casts and names
    rebound inside the block before the use do not count, nor a value handed to a container's method
    (`outputs.append(h)`) or to a call whose result is dropped (`log(h)`). With `floats` (names known to hold
    floating tensors), a name of unknown type counts as an argument of any call but a builtin.

    `params` (a function's parameters) count only where used as a floating tensor: an arithmetic operand, the
    receiver of a floating-point method (`x.pow(2)`), the input of a torch function that computes in floating
    point, or an argument of a torch.nn module whose output is floating (`float_module`): never as an index,
    a mask or what is handed to a user function. A value handed to a project function that casts that
    parameter to float32 first thing (`callee_casts`) is not used uncast. A name in `inferred` (low only by the
    callers' autocast) handed to a callable picked out of a container (`criterion[idx](h)`, `self.losses[k](h)`),
    which no definition tells, is not reported: neither its dtype nor what the callee does with it is shown.
    """

    def __init__(self, watched: set[str], floats: set[str] | None = None, tensor_callee=None,
                 params: set[str] | None = None, float_module=None, callee_casts=None,
                 handed_on: set[str] | None = None, inferred: set[str] | None = None) -> None:
        self.watched = set(watched)
        self.inferred = set(inferred or ())
        # Names whose star-unpacking into a call (`kernel(*args)`) hands an argument list on as it came: not a use.
        self.handed_on = set(handed_on or ())
        self.starred: set[int] = set()  # ids of the uses unpacked by `*`/`**` into a call
        self.complex: set[str] = set()  # names bound in the block to a complex tensor (`torch.view_as_complex`)
        self.params = set(params or ())
        self.floats = floats
        self.tensor_callee = tensor_callee
        self.float_module = float_module
        self.callee_casts = callee_casts  # (call, position, keyword) -> does the callee cast that argument itself?
        self.dropped: set[int] = set()  # ids of calls whose result is not used (expression statements)
        self._uses: list[cst.Name] = []
        self._param_uses: list[cst.Name] = []
        self._evidenced: set[str] = set()
        self._rebound: set[str] = set()  # parameters rebound to a method of themselves: evidence, no more uses

    def _use(self, node: cst.BaseExpression, evidence: bool = False) -> None:
        if evidence:
            self._evidence(node)
        node = viewed_name(node)
        if not isinstance(node, cst.Name):
            return
        if node.value in self.watched:
            self._uses.append(node)
        elif node.value in self.params:
            if node.value not in self._rebound:
                self._param_uses.append(node)
            if evidence:
                self._evidenced.add(node.value)

    def _evidence(self, node: cst.BaseExpression) -> None:
        """A floating use of what `node` computes shows the parameter under its dtype-preserving methods to be a
        floating tensor (`torch.matmul(q, k.transpose(-1, -2))`: `k`); the method's own use is recorded apart."""
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and not is_float32_cast(node) \
                and _op_name(node) in FLOAT_PRESERVING:
            node = viewed_name(node.func.value)
        node = viewed_name(node)
        if isinstance(node, cst.Name) and node.value in self.params:
            self._evidenced.add(node.value)

    @property
    def uses(self) -> list[cst.Name]:
        """The uses, in the order met: every use of a watched name, and of a parameter shown somewhere in the
        block to be a floating tensor."""
        return self._uses + [node for node in self._param_uses if node.value in self._evidenced]

    def _argument_use(self, node: cst.BaseExpression, call: cst.Call, position: int | None,
                      keyword: str | None = None) -> None:
        func = call.func
        dotted = dotted_name(func) or ""
        op = _op_name(call)
        torch_op = dotted.startswith(TORCH_NAMESPACES)
        if position is not None and ((torch_op and op in FLOAT_COMPUTING and (position == 0 or op in FLOAT_OPERANDS))
                                     or (self.float_module is not None and self.float_module(func))):
            self._use(node, evidence=True)
            return
        if torch_op or (self.tensor_callee is not None and self.tensor_callee(func)):
            self._use(node)
        elif id(call) not in self.dropped and not (isinstance(func, cst.Attribute) and op in CONTAINER_METHODS) \
                and not (self.callee_casts is not None and self.callee_casts(call, position, keyword)) \
                and not (isinstance(func, cst.Subscript) and isinstance(viewed_name(node), cst.Name)
                         and viewed_name(node).value in self.inferred):
            self._use(node)  # a function, module or callable of the user's computes with it

    def visit_Expr(self, node: cst.Expr) -> None:
        if isinstance(node.value, cst.Call):
            self.dropped.add(id(node.value))

    def visit_Call(self, node: cst.Call) -> None:
        op = _op_name(node)
        if has_float32_dtype_keyword(node):
            return
        if op in INTEGER_OPS:
            return  # `h.long()`, `torch.argmax(h)`, `h.gt(0)`: an integer or bool result, no float32 math lost
        if isinstance(node.func, cst.Attribute):
            if not is_float32_cast(node) and op not in NOT_TENSORS and op not in NOT_TENSOR_METHODS:
                self._use(node.func.value, evidence=op in FLOAT_COMPUTING)
        if op in UNCAST_SAFE_FUNCTIONS or op in NOT_TENSORS or (
                isinstance(node.func, cst.Name) and op in BUILTIN_NAMES):
            return
        position = 0
        for arg in node.args:
            if arg.star and isinstance(viewed_name(arg.value), cst.Name):
                if viewed_name(arg.value).value in self.handed_on:
                    continue
                self.starred.add(id(viewed_name(arg.value)))  # a sequence or mapping unpacked: no `.float()` on it
            positional = arg.keyword is None and not arg.star
            self._argument_use(arg.value, node, position if positional else None,
                               arg.keyword.value if arg.keyword is not None else None)
            position += positional

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if self._complex(node.left) or self._complex(node.right):
            return  # complex arithmetic: a real operand is promoted to complex64, no low-precision math
        arithmetic = type(node.operator).__name__ not in _NOT_ARITHMETIC
        self._use(node.left, evidence=arithmetic and not isinstance(node.right, cst.Integer))
        self._use(node.right, evidence=arithmetic and not isinstance(node.left, cst.Integer))

    def _complex(self, node: cst.BaseExpression) -> bool:
        node = viewed_name(node)
        if isinstance(node, cst.Name):
            return node.value in self.complex
        return isinstance(node, cst.Call) and _op_name(node) in COMPLEX_OPS

    def leave_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            for name, value in _assigned_pairs(target.target, node.value):
                self.watched.discard(name)
                if value is not None and self._complex(value):
                    self.complex.add(name)
                else:
                    self.complex.discard(name)
                if value is not None and _rebinds_itself(value, name):
                    self._rebound.add(name)
                else:
                    self.params.discard(name)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


# Ops whose result is a complex tensor: what is multiplied with it computes in complex64, whatever its dtype.
COMPLEX_OPS = frozenset({"view_as_complex", "polar", "complex"})


def _assigned_pairs(target: cst.BaseExpression, value: cst.BaseExpression) -> list[tuple[str, cst.BaseExpression | None]]:
    """The plain names an assignment target binds, each with the expression it gets when that is known
    (`a, b = x.to(d), y.to(d)`: element by element), else None."""
    if isinstance(target, cst.Name):
        return [(target.value, value)]
    if isinstance(target, (cst.Tuple, cst.List)):
        elements = [e for e in target.elements]
        if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(elements) and not any(
                isinstance(e, (cst.StarredElement,)) for e in (*elements, *value.elements)):
            return [pair for e, v in zip(elements, value.elements) for pair in _assigned_pairs(e.value, v.value)]
        return [(name.value, None) for name in _target_names(target)]
    return []


def _rebinds_itself(value: cst.BaseExpression, name: str) -> bool:
    """`x = x.masked_fill(...)`, `x = x.view(...)`: a method of the name on itself, not a cast (the same tensor's
    dtype, so what is shown of one is shown of the other)."""
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and not is_float32_cast(value) \
        and _op_name(value) not in INTEGER_OPS and isinstance(viewed_name(value.func.value), cst.Name) \
        and viewed_name(value.func.value).value == name


def _target_names(target: cst.BaseExpression) -> list[cst.Name]:
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _target_names(element.value)]
    return []
