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

from amplint import calls
from amplint import vocabulary as vocab
from amplint.facts.model import Assignment, Frame
from amplint.facts.names import dotted_name
from amplint.facts.shapes import call_shape
from amplint.index.shapes import call_shape as ast_call_shape
from amplint.index.summary import dotted as ast_dotted
from amplint.vocabulary import (AUTOCAST_DTYPE_QUERIES, DTYPE_KEEPING_CALLS, FLOAT32_OPS, FLOAT_ONLY_OPS, FLOAT_PRESERVING, INTEGER_OPS, LOW_OPS, NOT_TENSORS, NOT_TENSOR_METHODS, TENSOR_METHODS, TENSOR_MODULES)  # noqa: F401  (what torch ops do to dtypes)

BUILTIN_NAMES = frozenset(dir(builtins))
UNCAST_SAFE_FUNCTIONS = frozenset({"isinstance", "len", "print", "type", "id", "hasattr", "getattr", "repr", "str"})
_FLOAT_FROM_FLOAT = FLOAT_PRESERVING | LOW_OPS
TORCH_NAMESPACES = ("torch.", "F.", "nn.functional.")
MODULE_PLACEMENT = frozenset({"to", "cuda", "cpu", "float", "double", "train", vocab.EVAL, "requires_grad_"})


def conversion(call: cst.Call) -> str | None:
    """What a tensor method call makes of its receiver's dtype (`calls.conversion`, the index's definition too):
    "float32", "low", "unknown" (`.to(x)` with `x` not shown to be a device), None (no conversion)."""
    return calls.conversion(call_shape(call)) if isinstance(call.func, cst.Attribute) else None


def casts_away(call: cst.Call) -> bool:
    """Is the call a conversion whose result is not shown low precision: a float32 cast, or `.to(x)`/`.type(x)`
    with `x` unknown (perhaps a dtype: what it gives is unknown, never taken as low)? Its receiver is not computed
    with, as written. `.type_as(t)` converts to `t`'s dtype: it computes nothing with its receiver either (what it
    gives is `low_state`'s question)."""
    return conversion(call) in (vocab.CONVERTS_FLOAT32, vocab.CONVERTS_UNKNOWN) or (
        _op_name(call) == "type_as" and isinstance(call.func, cst.Attribute) and bool(call.args))


def has_float32_dtype_keyword(call: cst.Call) -> bool:
    """`torch.sum(x, dtype=torch.float32)`: the op converts its input itself (deliberate, not autocast)."""
    return calls.float32_dtype_keyword(call_shape(call))


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


LOW = "low"  # known low precision: made by an op autocast lowers, or from such a value by ops keeping its dtype
UNKNOWN = "unknown"  # perhaps low precision: what the code shows does not say (a user module's output...)
_RANK = {None: 0, UNKNOWN: 1, LOW: 2}


def strongest(states) -> str | None:
    """LOW if any is, else UNKNOWN if any is, else None."""
    found = None
    for state in states:
        if _RANK[state] > _RANK[found]:
            found = state
    return found


def _name_state(name: str, low) -> str | None:
    if isinstance(low, dict):
        return low.get(name)
    return LOW if name in low else None


def is_float32_value(value: cst.BaseExpression, float32: set[str] | frozenset = frozenset()) -> bool:
    """Is `value` shown to be float32: a float32 cast, an op given a float32 `dtype=`, a module's parameter or
    buffer read as `<module>.weight`/`.bias` (float32 unless the code converts the module), a name in `float32`?"""
    if isinstance(value, cst.Name):
        return value.value in float32
    if isinstance(value, cst.Attribute):
        return value.attr.value in MODULE_TENSORS and isinstance(value.value, (cst.Attribute, cst.Name))
    if isinstance(value, cst.Call):
        return calls.is_float32_cast(call_shape(value)) or has_float32_dtype_keyword(value)
    return False


MODULE_TENSORS = frozenset({"weight", "bias"})
# Elementwise arithmetic, whose operands take part in type promotion (a low tensor with a float32 one: float32).
PROMOTING = frozenset({"add", "sub", "mul", "div", "true_divide", "subtract", "multiply", "divide", "where", "lerp",
                       "addcmul", "addcdiv", "maximum", "minimum", "fmax", "fmin", "atan2", "hypot", "remainder"})


class LibraryArguments(list):
    """The arguments of a call to a library's function (`Lowering.library`): a low one makes the result perhaps
    low, never known low (what the library returns is not shown)."""


def is_low_precision(value: cst.BaseExpression, low, how: Lowering | None = None) -> bool:
    """Can evaluating `value` inside an autocast region yield a low-precision tensor (`low_state`, known or not)?"""
    return low_state(value, low, how) is not None


def low_state(value: cst.BaseExpression, low, how: Lowering | None = None) -> str | None:
    """Evaluated inside an enabled autocast region, is `value` low precision: LOW when the code shows it (an op
    autocast lowers: matmul, `@`, linear, conv, a torch.nn module the code builds from autocast's lower-precision
    list; or dtype-keeping ops on such a value, with Python numbers or other such values), UNKNOWN when it may be
    (a user module's or function's output; a low value combined with a tensor not shown float32), None when not
    (casts, integer and bool results, ops autocast runs in float32, a float32 `dtype=`, promotion with a float32
    tensor). `low`: the names known so far, a set (all LOW) or a dict name -> state."""
    if isinstance(value, cst.Call):
        written = written_tensor(value)
        if written is not None:
            return low_state(written, low, how)
        op = _op_name(value)
        converted = conversion(value)
        if converted == vocab.CONVERTS_LOW:
            return None  # cast to a low dtype on purpose: a deliberate low-precision path
        if converted is not None:
            first = value.args[0].value if value.args else None
            if converted == vocab.CONVERTS_UNKNOWN and isinstance(first, cst.Attribute) \
                    and first.attr.value == vocab.DTYPE:
                return LOW if low_state(first.value, low, how) == LOW else None  # `.to(x.dtype)`: `x`'s dtype
            return None  # float32, or a dtype not shown: not low as far as the code shows
        if op == "type_as" and isinstance(value.func, cst.Attribute) and value.args:
            return LOW if low_state(value.args[0].value, low, how) == LOW else None  # the other tensor's dtype
        if op in NOT_TENSORS or op in FLOAT32_OPS or has_float32_dtype_keyword(value) or op in INTEGER_OPS:
            return None
        if op in LOW_OPS:
            return LOW
        func = value.func
        receiver = dotted_name(func.value) if isinstance(func, cst.Attribute) else None
        arguments = [arg.value for arg in value.args]
        if receiver is not None and "." not in receiver and receiver != "self" and (
                _name_state(receiver, low) is not None or op in TENSOR_METHODS):
            # A tensor method (h.view(...), x.relu()) keeps its receiver's dtype; arithmetic promotes with its
            # operands (`h.mul(w)`).
            if op in PROMOTING:
                return _combined([func.value, *arguments], low, how)
            return strongest([low_state(func.value, low, how), *(low_state(a, low, how) for a in arguments)])
        dotted = dotted_name(func) or ""
        if dotted in BUILTIN_NAMES:
            return None
        if dotted.startswith(("torch.", "F.", "nn.functional.", "np.", "math.")):
            if op in PROMOTING:
                return _combined(arguments, low, how)
            return strongest(low_state(a, low, how) for a in arguments)
        kind = how.module_output(func) if how is not None and how.module_output is not None else None
        if kind is not None:
            # A torch.nn module: lowered by autocast (nn.Linear), float32 (nn.LayerNorm on CUDA), or keeping its
            # input's dtype (nn.Embedding of token ids: float32).
            if kind == "low":
                return LOW
            return strongest(low_state(a, low, how) for a in arguments) if kind == "keep" else None
        carried = how.library(value) if how is not None and how.library is not None else None
        if carried is not None:
            state = strongest(low_state(a, low, how) for a in carried)
            # A library's function: what it returns (integer indices, float32 results) is not shown.
            return UNKNOWN if state is not None and isinstance(carried, LibraryArguments) else state
        # A module or function of the user's (model(x), self.encoder(x), head(h)): what it returns is not shown.
        if how is not None and how.scalars is not None:
            return UNKNOWN if dotted and any(not is_scalar(a, how.scalars) for a in arguments) else None
        return UNKNOWN if dotted and any(not isinstance(a, (cst.SimpleString, cst.Integer, cst.Float))
                                         for a in arguments) else None
    if isinstance(value, cst.BinaryOperation):
        if isinstance(value.operator, cst.MatrixMultiply):
            return LOW
        if type(value.operator).__name__ in _NOT_ARITHMETIC:
            return None  # bit operations: integer or bool tensors
        return _combined([value.left, value.right], low, how)
    if isinstance(value, cst.UnaryOperation):
        return low_state(value.expression, low, how)
    if isinstance(value, cst.Subscript):
        return low_state(value.value, low, how)
    if isinstance(value, (cst.List, cst.Tuple)):  # a list of such tensors
        return strongest(low_state(element.value, low, how) for element in value.elements)
    if isinstance(value, (cst.ListComp, cst.GeneratorExp)):  # [f.permute(0, 2, 1) for f in feats]
        inner = dict(low) if isinstance(low, dict) else {name: LOW for name in low}
        clause = value.for_in
        while clause is not None:
            state = low_state(clause.iter, inner, how)
            if state is not None:
                inner.update({name.value: state for name in _target_names(clause.target)})
            clause = clause.inner_for_in
        return low_state(value.elt, inner, how)
    if isinstance(value, cst.Name):
        return _name_state(value.value, low)
    return None


def _combined(operands: list[cst.BaseExpression], low, how: Lowering | None) -> str | None:
    """The state of what an elementwise op computes of these operands under torch's type promotion: a low operand
    with Python numbers or other low operands stays LOW; with a tensor shown float32 the op computes in float32
    (None); with an operand of unknown dtype, UNKNOWN."""
    states = [low_state(operand, low, how) for operand in operands]
    found = strongest(states)
    if found != LOW:
        return found
    scalars = how.scalars if how is not None and how.scalars is not None else set()
    for operand, state in zip(operands, states):
        if state == LOW or is_scalar(operand, scalars) or isinstance(operand, (cst.Lambda,)):
            continue
        if is_float32_value(operand):
            return None  # promotion: the result is float32
        if _tensor_like(operand):
            return UNKNOWN
    return LOW


def _tensor_like(operand: cst.BaseExpression) -> bool:
    """May the operand be a tensor whose dtype takes part in promotion (not a string, slice, keyword flag)?"""
    return not isinstance(operand, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString, cst.Integer,
                                    cst.Float, cst.Imaginary, cst.Lambda))


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
            return _project_module_output(facts, func, depth)
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


def _project_module_output(facts, call: cst.Call, depth: int) -> str | None:
    """What autocast makes of the output of a module class this module defines (`Encoder()`): "low" or "float32"
    when every `return` of its `forward` returns the output of a torch.nn module that autocast makes so
    (`return self.fc(x)` with `self.fc = nn.Linear(...)`); None otherwise (another return, no `forward` here)."""
    name = dotted_name(call.func)
    if name is None:
        return None
    if facts.imports.qualify(call.func) is not None or "." in name:
        return _imported_module_output(facts, name)
    forward = next((info for info in facts.functions if info.qualname == f"{name}.forward"), None)
    if forward is None or forward.node.decorators:
        return None  # a decorator may open or switch off autocast around it
    kinds = set()
    pending: list[cst.CSTNode] = [forward.node.body]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.With):
            return None  # a region of its own may compute the output in float32
        if isinstance(node, cst.Return):
            value = node.value
            kinds.add(module_output(facts, value.func, forward.frame, depth + 1)
                      if isinstance(value, cst.Call) else None)
            continue
        pending.extend(node.children)
    kind = kinds.pop() if len(kinds) == 1 else None
    return kind if kind in ("low", vocab.FLOAT32) else None


def _imported_module_output(facts, written: str) -> str | None:
    """What autocast makes of the output of a module class another module of the project defines (`Encoder()`
    after `from encoder import Encoder`), read from that module's code as `_project_module_output` reads this
    module's: "low" when its `forward` (undecorated, opening no region) returns only the output of attributes its
    class builds as torch.nn modules on autocast's lower-precision list (`return self.fc(x)` with
    `self.fc = nn.Linear(...)`); None otherwise, or when the project index cannot tell where the class is."""
    import ast

    view = facts.project
    found = view.class_at(view.path, written) if view is not None else None
    if found is None or found[0] == view.path:
        return None
    path, class_name = found
    tree = tree_of(facts, view, path)
    forward = ast_function(tree, f"{class_name}.forward") if tree is not None else None
    if forward is None or forward.decorator_list:
        return None  # a decorator may open or switch off autocast around it
    returns = []
    pending = list(forward.body)
    while pending:
        node = pending.pop()
        kind = type(node)
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda):
            continue
        if kind in (ast.With, ast.AsyncWith):
            return None  # a region of its own may compute the output in float32
        if kind is ast.Return:
            returns.append(node.value)
            continue
        pending.extend(ast.iter_child_nodes(node))
    attributes = [ast_dotted(value.func) if type(value) is ast.Call else None for value in returns]
    if not attributes or any(a is None or not a.startswith("self.") or a.count(".") != 1 for a in attributes):
        return None
    return "low" if all(_ast_builds_lowering(tree, class_name, a[len("self."):]) for a in attributes) else None


def tree_of(facts, view, path: str):
    """The `ast` tree of a project file: this module's from its source, another's from its text (a dependency of
    the cached result), parsed once per module's facts."""
    import ast

    cache = facts.__dict__.setdefault("_caller_trees", {})
    if path not in cache:
        text = facts.source if path == view.path else view.text(path)
        try:
            cache[path] = ast.parse(text) if text is not None else None
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            cache[path] = None
    return cache[path]


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
        # ids of the uses only handed to a function, module or callable of the user's (what it computes is its
        # definition's), and of those an in-place op writes into (`h.mul_(2)`, `torch.relu_(h)`, `inplace=True`)
        self.handed: set[int] = set()
        # id of a handed use -> (the call, the argument's position or None, its keyword or None): which parameter
        # of the callee receives it, for a caller that follows the callee's definition
        self.handed_at: dict[int, tuple[cst.Call, int | None, str | None]] = {}
        self.in_place: set[int] = set()
        self.under_cast: set[int] = set()  # ids of layout calls a cast is applied to
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

    def _use(self, node: cst.BaseExpression, evidence: bool = False, handed: bool = False,
             in_place: bool = False) -> None:
        if evidence:
            self._evidence(node)
        node = viewed_name(node)
        if not isinstance(node, cst.Name):
            return
        if handed:
            self.handed.add(id(node))
        if in_place:
            self.in_place.add(id(node))
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
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and not casts_away(node) \
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

    @property
    def handed_parameters(self) -> list[cst.Name]:
        """The uses of a parameter only handed to a function, module or callable of the user's (not in `uses`
        unless the block shows the parameter floating elsewhere): a caller may follow the callee's definition."""
        return [node for node in self._param_uses if id(node) in self.handed_at]

    def _argument_use(self, node: cst.BaseExpression, call: cst.Call, position: int | None,
                      keyword: str | None = None) -> None:
        func = call.func
        dotted = dotted_name(func) or ""
        op = _op_name(call)
        torch_op = dotted.startswith(TORCH_NAMESPACES)
        if position is not None and ((torch_op and op in FLOAT_COMPUTING and (position == 0 or op in FLOAT_OPERANDS))
                                     or (self.float_module is not None and self.float_module(func))):
            self._use(node, evidence=True, in_place=position == 0 and _in_place(call))
            return
        if torch_op or (self.tensor_callee is not None and self.tensor_callee(func)):
            # `out=h` writes into h as an in-place op does: `.float()` there would write into a copy
            self._use(node, in_place=torch_op and (position == 0 and _in_place(call) or keyword == "out"))
        elif id(call) not in self.dropped and not (isinstance(func, cst.Attribute) and op in CONTAINER_METHODS) \
                and not (self.callee_casts is not None and self.callee_casts(call, position, keyword)) \
                and not (isinstance(func, cst.Subscript) and isinstance(viewed_name(node), cst.Name)
                         and viewed_name(node).value in self.inferred):
            self._use(node, handed=True)  # a function, module or callable of the user's computes with it
            if isinstance(viewed_name(node), cst.Name):
                self.handed_at[id(viewed_name(node))] = (call, position, keyword)

    def visit_Expr(self, node: cst.Expr) -> None:
        if isinstance(node.value, cst.Call):
            self.dropped.add(id(node.value))

    def visit_Call(self, node: cst.Call) -> None:
        op = _op_name(node)
        if casts_away(node):  # `h.flatten(2).float()`: the layout methods under a cast compute nothing
            inner = node.func.value
            while isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) \
                    and inner.func.attr.value in LAYOUT_ONLY:
                self.under_cast.add(id(inner))
                inner = inner.func.value
        if id(node) in self.under_cast:
            return
        if has_float32_dtype_keyword(node):
            return
        if op in INTEGER_OPS:
            return  # `h.long()`, `torch.argmax(h)`, `h.gt(0)`: an integer or bool result, no float32 math lost
        if isinstance(node.func, cst.Attribute):
            if not casts_away(node) and op not in NOT_TENSORS and op not in NOT_TENSOR_METHODS:
                self._use(node.func.value, evidence=op in FLOAT_COMPUTING,
                          in_place=op.endswith("_") and not op.startswith("_"))
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


# Methods that only change a tensor's layout or place, never compute with its values.
LAYOUT_ONLY = frozenset({"view", "reshape", "flatten", "unflatten", "permute", "transpose", "t", "contiguous",
                         "squeeze", "unsqueeze", "expand", "expand_as", "view_as", "reshape_as", "narrow", "select",
                         "detach", "clone", "cuda", "cpu", "movedim", "swapaxes"})


def _in_place(call: cst.Call) -> bool:
    """Does the call write into its first argument: a torch function named in place (`torch.relu_(h)`,
    `torch.clamp_(h, 0)`), or given `inplace=True` (`F.dropout(h, inplace=True)`)?"""
    op = _op_name(call)
    return (op.endswith("_") and not op.startswith("_")) or any(
        arg.keyword is not None and arg.keyword.value == "inplace" and not (
            isinstance(arg.value, cst.Name) and arg.value.value in ("False", "None")) for arg in call.args)


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
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and not casts_away(value) \
        and _op_name(value) not in INTEGER_OPS and isinstance(viewed_name(value.func.value), cst.Name) \
        and viewed_name(value.func.value).value == name


def _target_names(target: cst.BaseExpression) -> list[cst.Name]:
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _target_names(element.value)]
    return []


# --- the same questions of another function's code, read with `ast` (a caller's call site) -----------------------

_AST_DEPTH = 8  # names followed through one another


def ast_function(tree, qualname: str):
    """The def named `qualname` ("Class.method", "function") at the top of the module `tree`, or the module itself
    for "<module>"; None when absent."""
    import ast

    if qualname == "<module>":
        return tree
    node = tree
    for part in qualname.split("."):
        node = next((child for child in getattr(node, "body", ()) if type(child) in (
            ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef) and child.name == part), None)
        if node is None:
            return None
    return node


def ast_calls_at(function, line: int, callee: str) -> list:
    """The calls written `callee(...)` on `line` of the function's own code."""
    import ast

    found = []
    pending = list(ast.iter_child_nodes(function))
    while pending:
        node = pending.pop()
        if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef):
            continue
        if type(node) is ast.Call and node.lineno == line and ast_dotted(node.func) == callee:
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def ast_low_origin(expr, function, tree, class_name: str | None, depth: int = 0):
    """Where `expr`, evaluated in `function` under an enabled autocast, is shown low precision: the `ast` node of
    the op autocast lowers that made it (`a @ b`, `torch.mm(...)`, `F.linear(...)`, a torch.nn module of autocast's
    lower-precision list that the class builds, `self.proj = nn.Linear(...)`), through names bound before it and
    dtype-keeping methods; None when the code does not show it (the libcst facts' `low_state`, LOW only)."""
    import ast

    if depth > _AST_DEPTH:
        return None
    kind = type(expr)
    if kind is ast.BinOp:
        if type(expr.op) is ast.MatMult:
            return expr
        if type(expr.op).__name__ in ("BitAnd", "BitOr", "BitXor", "LShift", "RShift"):
            return None
        left = ast_low_origin(expr.left, function, tree, class_name, depth + 1)
        right = ast_low_origin(expr.right, function, tree, class_name, depth + 1)
        other = expr.right if left is not None else expr.left
        if left is not None and right is not None:
            return left
        if (left or right) is not None and type(other) is ast.Constant:
            return left or right  # with a Python number: the low operand's dtype
        return None  # with a tensor not shown low: promotion may make it float32
    if kind is ast.UnaryOp:
        return ast_low_origin(expr.operand, function, tree, class_name, depth + 1)
    if kind in (ast.List, ast.Tuple):  # a list or tuple of values each shown low: itself (its items are)
        return expr if expr.elts and all(
            type(e) is not ast.Starred and ast_low_origin(e, function, tree, class_name, depth + 1) is not None
            for e in expr.elts) else None
    if kind is ast.Subscript:
        return ast_low_origin(expr.value, function, tree, class_name, depth + 1)
    if kind is ast.Name:
        value = _ast_binding(function, expr.id, expr.lineno)
        return ast_low_origin(value, function, tree, class_name, depth + 1) if value is not None else None
    if kind is not ast.Call:
        return None
    func = expr.func
    dotted = ast_dotted(func) or ""
    last = dotted.rsplit(".", 1)[-1]
    if type(func) is ast.Attribute:
        if calls.conversion(ast_call_shape(expr)) is not None or func.attr in INTEGER_OPS or func.attr in FLOAT32_OPS:
            return None
        if func.attr in LOW_OPS:
            return expr
        if dotted.startswith("self.") and dotted.count(".") == 1 and class_name is not None \
                and _ast_builds_lowering(tree, class_name, func.attr):
            return expr  # `self.proj(x)`, the class's `self.proj = nn.Linear(...)`
        if func.attr in FLOAT_PRESERVING and func.attr not in PROMOTING and not dotted.startswith(("torch.", "F.", "nn.")):
            return ast_low_origin(func.value, function, tree, class_name, depth + 1)  # `h.view(...)`: h's dtype
        if func.attr in FLOAT_PRESERVING and func.attr not in PROMOTING and expr.args \
                and dotted.startswith(("torch.", "F.", "nn.functional.")):
            return ast_low_origin(expr.args[0], function, tree, class_name, depth + 1)  # `torch.relu(h)`
        return None
    if type(func) is ast.Name and last in LOW_OPS:
        return expr
    return None


def _ast_binding(function, name: str, line: int):
    """The value of the last plain assignment `name = ...` in the function's own code before `line`, when the
    function binds the name no other way before it (a loop target, a tuple target, an augmented assignment);
    None otherwise."""
    import ast

    found, latest, other = None, -1, False
    pending = list(ast.iter_child_nodes(function))
    while pending:
        node = pending.pop()
        if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef):
            continue
        plain = type(node) is ast.Assign and len(node.targets) == 1 and type(node.targets[0]) is ast.Name
        pending.extend([node.value] if plain else ast.iter_child_nodes(node))
        if getattr(node, "lineno", line) >= line:
            continue
        if plain and node.targets[0].id == name:
            if node.lineno > latest:
                found, latest = node.value, node.lineno
        elif type(node) is ast.Name and type(node.ctx) is ast.Store and node.id == name:
            other = True  # bound another way too (`for h in ...`, `a, h = ...`): not followed
    return None if other else found


def _ast_builds_lowering(tree, class_name: str, attribute: str) -> bool:
    """Does every assignment `self.<attribute> = ...` in the class build a torch.nn module of autocast's
    lower-precision list (`nn.Linear(...)`, `torch.nn.Conv2d(...)`)?"""
    import ast

    cls = ast_function(tree, class_name)
    if cls is None:
        return False
    values = [node.value for node in ast.walk(cls) if type(node) is ast.Assign and len(node.targets) == 1
              and ast_dotted(node.targets[0]) == f"self.{attribute}"]
    return bool(values) and all(type(v) is ast.Call and (ast_dotted(v.func) or "").startswith(("nn.", "torch.nn."))
                                and (ast_dotted(v.func) or "").rsplit(".", 1)[-1] in LOWERING_MODULES
                                for v in values)
