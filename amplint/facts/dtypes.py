"""Which local names hold tensors that autocast made low precision, and which uses of a name are casts.

A deliberately small dataflow: names assigned in an autocast region from an op autocast lowers (matmul, linear,
conv, a module call) or from another such name are low precision; casts, tensor factories and ops that CUDA
autocast runs in float32 (softmax, norms, losses...) are not. When unsure, a name is not low precision.
"""

from __future__ import annotations

import builtins

from amplint.lazy import libcst as cst

from amplint.facts.model import Assignment, Frame
from amplint.facts.names import FLOAT32_DTYPES, dotted_name

CAST_METHODS = frozenset({"float", "double"})
CONVERT_METHODS = frozenset({"to", "type"})
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
    "cpu", "detach_", "stride", "data_ptr", "get_scale", "parameters", "named_parameters", "state_dict",
})
BUILTIN_NAMES = frozenset(dir(builtins))
# Methods that make a plain name a tensor; any other method on a plain name (`model.encoder(x)`) is taken to
# be a module or function of the user's, whose output autocast lowers.
TENSOR_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "contiguous", "flatten", "unflatten",
    "squeeze", "unsqueeze", "expand", "expand_as", "repeat", "repeat_interleave", "to", "cuda", "half", "bfloat16",
    "detach", "clone", "chunk", "split", "narrow", "masked_fill", "masked_fill_", "relu", "sigmoid", "tanh",
    "gelu", "abs", "neg", "add", "sub", "mul", "div", "clamp", "clamp_", "roll", "flip", "gather", "index_select",
    "select", "unbind", "type_as", "new_zeros", "new_ones", "new_full", "new_empty", "mm", "matmul", "bmm",
    "square", "sqrt", "pow", "exp", "log", "sum", "mean", "max", "min", "norm", "softmax", "log_softmax",
    "argmax", "topk", "sort", "where", "fill_", "zero_", "add_", "mul_", "div_", "sub_", "copy_", "requires_grad_",
    "pin_memory", "numpy", "tolist", "item", "size", "dim", "float", "double", "long", "int", "bool", "type",
})
# Methods of objects that are not tensors (optimizers, scalers, modules): their receiver is not a tensor use.
NOT_TENSOR_METHODS = frozenset({
    "step", "update", "zero_grad", "unscale_", "scale", "load_state_dict", "train", "eval", "apply",
    "add_param_group", "register_buffer", "register_parameter", "modules", "children", "get", "items", "keys",
    "values", "append", "extend", "pop", "format", "join", "split", "replace", "startswith", "endswith",
})
UNCAST_SAFE_FUNCTIONS = frozenset({"isinstance", "len", "print", "type", "id", "hasattr", "getattr", "repr", "str"})


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
    if first.keyword is not None and first.keyword.value != "dtype":
        return False
    if isinstance(first.value, (cst.SimpleString, cst.FormattedString)):
        return False  # .to("cuda")
    name = (dotted_name(first.value) or "").lower()
    return bool(name) and "device" not in name and "dev" != name.rsplit(".", 1)[-1] and not name.endswith(
        ("bfloat16", "float16", "half"))


def has_float32_dtype_keyword(call: cst.Call) -> bool:
    """`torch.sum(x, dtype=torch.float32)`: the op converts its input itself (deliberate, not autocast)."""
    return any(arg.keyword is not None and arg.keyword.value == "dtype"
               and (dotted_name(arg.value) or "") in FLOAT32_DTYPES for arg in call.args)


def _op_name(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    if isinstance(func, cst.Name):
        return func.value
    return ""


def is_low_precision(value: cst.BaseExpression, low: set[str]) -> bool:
    """Does evaluating `value` inside an autocast region yield a low-precision tensor?"""
    if isinstance(value, cst.Call):
        op = _op_name(value)
        if is_float32_cast(value) or op in NOT_TENSORS or op in FLOAT32_OPS or has_float32_dtype_keyword(value):
            return False
        if op in LOW_OPS:
            return True
        func = value.func
        receiver = dotted_name(func.value) if isinstance(func, cst.Attribute) else None
        arguments = [arg.value for arg in value.args]
        if receiver is not None and "." not in receiver and receiver != "self" and (
                receiver in low or op in TENSOR_METHODS):
            # A tensor method (h.view(...), x.relu()) keeps its receiver's dtype.
            return receiver in low or any(is_low_precision(a, low) for a in arguments)
        dotted = dotted_name(func) or ""
        if dotted in BUILTIN_NAMES:
            return False
        if dotted.startswith(("torch.", "F.", "nn.functional.", "np.", "math.")):
            return any(is_low_precision(a, low) for a in arguments)
        # A module or function of the user's: model(x), self.encoder(x), head(h).
        return bool(dotted) and any(not isinstance(a, (cst.SimpleString, cst.Integer, cst.Float)) for a in arguments)
    if isinstance(value, cst.BinaryOperation):
        if isinstance(value.operator, cst.MatrixMultiply):
            return True
        return is_low_precision(value.left, low) or is_low_precision(value.right, low)
    if isinstance(value, cst.UnaryOperation):
        return is_low_precision(value.expression, low)
    if isinstance(value, cst.Subscript):
        return is_low_precision(value.value, low)
    if isinstance(value, cst.Name):
        return value.value in low
    return False


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


class UncastUses:  # a libcst visitor once made one with amplint.lazy.visitor_class
    """Uses of the watched names inside a block as computation inputs without a float32 cast, in order.

    A use is a method receiver, a call argument or an operand; metadata (`h.shape`, `h.size()`), casts and names
    rebound inside the block before the use do not count.
    """

    def __init__(self, watched: set[str]) -> None:
        self.watched = set(watched)
        self.uses: list[cst.Name] = []

    def _use(self, node: cst.BaseExpression) -> None:
        if isinstance(node, cst.Name) and node.value in self.watched:
            self.uses.append(node)

    def visit_Call(self, node: cst.Call) -> None:
        op = _op_name(node)
        if has_float32_dtype_keyword(node):
            return
        if isinstance(node.func, cst.Attribute):
            if not is_float32_cast(node) and op not in NOT_TENSORS and op not in NOT_TENSOR_METHODS:
                self._use(node.func.value)
        if op in UNCAST_SAFE_FUNCTIONS or op in NOT_TENSORS or (
                isinstance(node.func, cst.Name) and op in BUILTIN_NAMES):
            return
        for arg in node.args:
            self._use(arg.value)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        self._use(node.left)
        self._use(node.right)

    def leave_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self.watched.discard(target.target.value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False
