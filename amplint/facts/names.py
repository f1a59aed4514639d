"""Qualified names of the torch AMP API under every spelling, with our own light import tracking.

libcst's QualifiedNameProvider resolves every name in the module through full scope analysis; we only need
to know what a handful of dotted expressions refer to, so we record the import statements and resolve the
head of a dotted expression through them.
"""

from __future__ import annotations

from dataclasses import dataclass

from amplint.lazy import libcst as cst

# Canonical name -> every qualified spelling that means it.
AUTOCAST_NEW = frozenset({
    "torch.autocast",
    "torch.amp.autocast",
    "torch.amp.autocast_mode.autocast",
    "torch.autocast_mode.autocast",
})
# Legacy spellings whose FIRST positional argument is `enabled` (not the device).
AUTOCAST_LEGACY = {
    "torch.cuda.amp.autocast": "cuda",
    "torch.cuda.amp.autocast_mode.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
    "torch.cpu.amp.autocast_mode.autocast": "cpu",
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
})
AUTOGRAD_BACKWARD = frozenset({"torch.autograd.backward", "torch.autograd.grad"})
NO_GRAD_CONTEXTS = frozenset({
    "torch.no_grad",
    "torch.inference_mode",
    "torch.autograd.no_grad",
    "torch.autograd.inference_mode",
    "torch.autograd.grad_mode.no_grad",
    "torch.autograd.grad_mode.inference_mode",
})
ENABLE_GRAD = frozenset({"torch.enable_grad", "torch.autograd.enable_grad", "torch.autograd.grad_mode.enable_grad"})
SET_GRAD_ENABLED = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"})
NULL_CONTEXTS = frozenset({"contextlib.nullcontext", "contextlib.suppress", "contextlib.ExitStack"})
PARTIAL = frozenset({"functools.partial"})
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
AUTOCAST_METHOD = "autocast"
REGISTER_HOOK = "register_hook"  # `tensor.register_hook(fn)`: fn runs on the gradient during backward
CLAMP_METHODS = frozenset({"clamp", "clamp_", "clip", "clip_"})  # `g.clamp(-c, c)`: clips values
CLAMP_FUNCTIONS = frozenset({"torch.clamp", "torch.clip"})
PARAMETERS_METHODS = frozenset({"parameters"})
LOAD_STATE_DICT = "load_state_dict"  # a scaler restored at resume
ZERO_GRAD = "zero_grad"  # only an optimizer (or a module) has it with a `step`
STEP_METHOD = "step"  # `optimizer.step()`, `scaler.step(optimizer)`
EVAL_METHOD = "eval"  # `model.eval()`: the module is put in evaluation mode
FLOAT32_DTYPES = frozenset({"torch.float32", "torch.float", "torch.float64", "torch.double"})
LOW_DTYPES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.half": "float16"}


def dotted_name(node: cst.CSTNode) -> str | None:
    """`a.b.c` for a Name/Attribute chain, None for anything else (calls, subscripts...)."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def code_words(node: cst.CSTNode) -> list[str]:
    """What a piece of code says, without its comments and layout: each dotted name (`torch.cuda.amp`), each
    string's value and each number, in source order. A string that is a statement of its
    own (a docstring) says nothing to the program and is left out. Rules that weigh words of code (a test naming
    a version, an AMP switch, a float16 dtype) read these, never the text, where a comment would count as code."""
    words: list[str] = []
    pending = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Expr) and isinstance(current.value, (cst.SimpleString, cst.ConcatenatedString,
                                                                         cst.FormattedString)):
            continue
        if isinstance(current, (cst.Name, cst.Attribute)):
            dotted = dotted_name(current)
            if dotted is not None:
                words.append(dotted)
                continue
        elif isinstance(current, cst.SimpleString):
            value = current.evaluated_value
            words.append(value if isinstance(value, str) else value.decode("latin-1"))
            continue
        elif isinstance(current, cst.FormattedStringText):
            words.append(current.value)
            continue
        elif isinstance(current, (cst.Integer, cst.Float, cst.Imaginary)):
            words.append(current.value)
            continue
        elif isinstance(current, (cst.Comment, cst.TrailingWhitespace, cst.EmptyLine)):
            continue
        pending.extend(reversed(current.children))
    return words


@dataclass(eq=False)
class ImportBinding:
    """One local name bound by one import statement: `from torch.cuda.amp import autocast as ac` binds `ac` to
    `torch.cuda.amp.autocast`. `alias` is None for a name a star import binds (`from torch.cuda.amp import *`)."""

    local: str
    qualified: str
    statement: cst.Import | cst.ImportFrom
    alias: cst.ImportAlias | None
    line: cst.SimpleStatementLine | None  # the line holding the statement, when it is a line of its own kind
    module_level: bool  # outside every function and class body


# What `from <module> import *` binds, for the modules whose AMP names a rule asks about (their `__all__`, or
# their public names where they have none: torch 2.13). A star import from any other module binds names nobody
# here can list (a project module's `from common import *` is the project index's to follow).
STAR_EXPORTS = {
    "torch.cuda.amp": ("autocast", "custom_bwd", "custom_fwd", "GradScaler"),
    "torch.cpu.amp": ("autocast", "GradScaler"),
    "torch.amp": ("autocast", "custom_bwd", "custom_fwd", "GradScaler"),
}


class ImportMap:
    """Local names bound by import statements -> the qualified names they stand for: the one import model of
    the facts layer. `bindings` holds what each name stands for after the last import of it (what `qualify`
    reads); `records` holds every binding of each name with the statement that made it, in source order."""

    def __init__(self) -> None:
        self.bindings: dict[str, str] = {}
        self.records: dict[str, list[ImportBinding]] = {}

    def add(self, node: cst.Import | cst.ImportFrom, line: cst.SimpleStatementLine | None = None,
            module_level: bool = True) -> None:
        for local, qualified, alias in _bound_names(node):
            self.bindings[local] = qualified
            self.records.setdefault(local, []).append(
                ImportBinding(local, qualified, node, alias, line, module_level))
        if isinstance(node, cst.ImportFrom) and isinstance(node.names, cst.ImportStar) and \
                _star_module(node) not in STAR_EXPORTS:
            # An unknown module's `*` may rebind any name: what an earlier star import bound is no longer known.
            for local, records in self.records.items():
                if records[-1].alias is None:
                    self.bindings.pop(local, None)

    def qualify(self, node: cst.CSTNode) -> str | None:
        """The qualified name of a dotted expression whose head was imported, else None."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        target = self.bindings.get(head)
        if target is None:
            return None
        return f"{target}.{rest}" if rest else target

    def star_imports(self) -> list[cst.ImportFrom]:
        """The `from <module> import *` statements whose names are known (STAR_EXPORTS), in source order."""
        found = {id(r.statement): r.statement for records in self.records.values() for r in records
                 if r.alias is None}
        return list(found.values())


def _star_module(node: cst.ImportFrom) -> str | None:
    return None if node.relative or node.module is None else dotted_name(node.module)


def _bound_names(node: cst.Import | cst.ImportFrom) -> list[tuple[str, str, cst.ImportAlias | None]]:
    """(local name, qualified name, its alias) for each name an import statement binds (relative imports and
    star imports of unknown modules bind nothing known)."""
    if isinstance(node, cst.Import):
        bound = []
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                bound.append((alias.asname.name.value, full, alias))
            else:
                head = full.split(".", 1)[0]
                bound.append((head, head, alias))
        return bound
    module = _star_module(node)
    if module is None:
        return []
    if isinstance(node.names, cst.ImportStar):
        return [(name, f"{module}.{name}", None) for name in STAR_EXPORTS.get(module, ())]
    bound = []
    for alias in node.names:
        name = dotted_name(alias.name)
        if name is None:
            continue
        local = name
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            local = alias.asname.name.value
        bound.append((local, f"{module}.{name}", alias))
    return bound


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
_OPTIMIZER_FUNCTION_NAMES = frozenset(name.rsplit(".", 1)[-1] for name in OPTIMIZER_FUNCTIONS)


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
    last = qualified.rsplit(".", 1)[-1]
    return last[:1].isupper() and "Scheduler" not in last and "LR" not in last


def may_build_optimizer(last: str) -> bool:
    """Can a callee whose last name (or what an import alias of it stands for) is `last` be a known optimizer
    class or factory? The prefilter's screen: an upper bound of `is_known_optimizer_class` read from the same
    lists (a class is capitalised; the factories are named in `OPTIMIZER_FUNCTIONS`)."""
    return last[:1].isupper() or last in _OPTIMIZER_FUNCTION_NAMES


# Spellings deprecated in torch 2.4 (FutureWarning at every call): qualified name -> (name in torch.amp, device).
DEPRECATED_AMP = {
    "torch.cuda.amp.autocast": ("autocast", "cuda"),
    "torch.cuda.amp.autocast_mode.autocast": ("autocast", "cuda"),
    "torch.cpu.amp.autocast": ("autocast", "cpu"),
    "torch.cpu.amp.autocast_mode.autocast": ("autocast", "cpu"),
    "torch.cuda.amp.GradScaler": ("GradScaler", "cuda"),
    "torch.cuda.amp.grad_scaler.GradScaler": ("GradScaler", "cuda"),
    "torch.cpu.amp.GradScaler": ("GradScaler", "cpu"),
    "torch.cpu.amp.grad_scaler.GradScaler": ("GradScaler", "cpu"),
    "torch.cuda.amp.custom_fwd": ("custom_fwd", "cuda"),
    "torch.cuda.amp.autocast_mode.custom_fwd": ("custom_fwd", "cuda"),
    "torch.cuda.amp.custom_bwd": ("custom_bwd", "cuda"),
    "torch.cuda.amp.autocast_mode.custom_bwd": ("custom_bwd", "cuda"),
}
# The legacy modules whose AMP names all exist in torch.amp too (an alias of them can be rebound to torch.amp).
DEPRECATED_AMP_MODULES = {"torch.cuda.amp": "cuda", "torch.cpu.amp": "cpu"}
TORCH_DEVICE = frozenset({"torch.device"})
