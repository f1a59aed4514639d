"""The data the facts layer records while it walks a module once.

Every call and assignment is recorded with the chain of frames (with-blocks, functions, loops, ifs) it
executes in. Rules never walk the tree for these; they ask `ModuleFacts` (facts/module.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from amplint.lazy import libcst as cst
from amplint import vocabulary as vocab
from amplint.vocabulary import Effect


class FrameKind(enum.Enum):
    MODULE = "module"
    CLASS = "class"
    FUNCTION = "function"  # def or lambda: its body does not run where it is written
    WITH = "with"
    LOOP = "loop"  # body of for/while (async too)
    IF = "if"  # body or else-branch of an if


@dataclass(eq=False)
class Frame:
    """A lexical scope a statement executes in. `node` is the statement that opens it."""

    kind: FrameKind
    node: cst.CSTNode
    parent: Frame | None
    name: str = ""  # function/class name
    class_name: str = ""  # the class a method is defined in
    in_else: bool = False  # for IF: the else branch
    start_index: int = 0  # source-order index of the first call/assignment recorded inside the frame

    def ancestors(self):
        frame = self
        while frame is not None:
            yield frame
            frame = frame.parent

    def function(self) -> Frame | None:
        """The innermost enclosing function frame (the scope that runs this code), if any."""
        for frame in self.ancestors():
            if frame.kind is FrameKind.FUNCTION:
                return frame
        return None

    def loops_up_to_function(self) -> list[Frame]:
        """Loops enclosing this frame inside the same function, innermost first."""
        loops = []
        for frame in self.ancestors():
            if frame.kind is FrameKind.FUNCTION:
                break
            if frame.kind is FrameKind.LOOP:
                loops.append(frame)
        return loops

    def is_within(self, other: Frame) -> bool:
        return any(frame is other for frame in self.ancestors())


class RegionState(enum.Enum):
    ON = vocab.ENABLED
    OFF = "disabled"
    MAYBE = "possibly enabled"  # enabled=<expression>, nullcontext() alternative, accelerator.autocast()


@dataclass(eq=False)
class Region:
    """An autocast region: where it opens, whether it is on, its device and dtype."""

    opener: cst.CSTNode  # the with item's expression or the decorator's expression
    state: RegionState
    spelling: str  # how the user wrote it, e.g. "torch.cuda.amp.autocast(enabled=use_amp)"
    device: str | None = None
    dtype: str | None = None  # "bfloat16", "float16" or None when unknown/default
    via: str = "with"  # "with" | "decorator" | "caller" | "exitstack" (`stack.enter_context(...)`)
    frame: Frame | None = None  # the WITH frame (or the decorated function's frame)
    with_item: cst.WithItem | None = None
    # Opened through a function of the project (`with make_ctx():`, `with self.autocast():`, a `@contextmanager`):
    # "`make_ctx()` (line 8)", naming where the region is made; `factory_plain`: a function of this module that only
    # returns a torch autocast or nullcontext object (leaving its block is leaving an autocast block), not a
    # generator whose code after the yield would run at another time.
    factory: str | None = None
    factory_plain: bool = False

    @property
    def active(self) -> bool:
        return self.state is not RegionState.OFF


@dataclass(eq=False)
class Call:
    """A recorded call: `receiver.method(...)` or `func(...)`."""

    node: cst.Call
    frame: Frame
    statement: cst.CSTNode  # the innermost statement containing the call
    statements: tuple[cst.CSTNode, ...]  # every enclosing statement, outermost first
    qualified: str | None  # the torch API it resolves to through imports, if any
    dotted: str | None  # the callee as written, e.g. "self.scaler.step"
    receiver: str | None  # "self.scaler" for self.scaler.step(...); None for a plain function
    method: str | None  # "step"
    index: int  # source order


@dataclass(eq=False)
class Assignment:
    """`target = value` (also annotated and augmented assignments), with targets as dotted text."""

    targets: tuple[str, ...]
    value: cst.BaseExpression
    frame: Frame
    statement: cst.CSTNode
    index: int


# The calls the facts layer records as events (amplint/calls.py: `effect`): `loss.backward()` and torch's autograd
# (Lightning's `manual_backward` is the framework's, amplint/facts/frameworks.py), torch's clip, a GradScaler built,
# its `scale`, `unscale_`, `step`, `update`, `load_state_dict`, an optimizer's step.
EVENT_KINDS = frozenset({Effect.BACKWARD, Effect.CLIP, Effect.BUILDS_SCALER, Effect.SCALER_SCALE, Effect.UNSCALE,
                         Effect.SCALER_STEP, Effect.SCALER_UPDATE, Effect.SCALER_LOAD, Effect.OPTIMIZER_STEP})


@dataclass(eq=False)
class Event:
    """One step of mixed-precision training, located in the code. `kind`: what the call is (`calls.effect`), one of
    `EVENT_KINDS`."""

    kind: str
    call: Call
    scaler: str | None = None  # the scaler's dotted name, e.g. "scaler" or "self.scaler"
    optimizer: str | None = None  # the optimizer's dotted name, when one is named
    scaled: bool = False  # BACKWARD: on a loss passed through scaler.scale(...)
    bound_to: str | None = None  # SCALER_BUILD: the name the new scaler is assigned to

    @property
    def node(self) -> cst.Call:
        return self.call.node

    @property
    def frame(self) -> Frame:
        return self.call.frame

    @property
    def index(self) -> int:
        return self.call.index


@dataclass
class FunctionInfo:
    node: cst.FunctionDef
    frame: Frame  # the frame of its body
    qualname: str  # "train" or "Trainer.train_step"
    decorators: list[cst.Decorator] = field(default_factory=list)
