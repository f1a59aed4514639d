"""Framework contracts, as the code shows them: clips placed where Lightning, accelerate or the HF Trainer have
scaled the gradients and not yet unscaled them (the contracts are data: amplint/vocabulary.py, "Frameworks").

- Lightning: a torch clip in a LightningModule's `on_after_backward` (the Trainer unscales after that hook), or
  in manual optimization a clip (torch's or `self.clip_gradients`) after `self.manual_backward(loss)` and before
  `opt.step()`, inside which Lightning unscales;
- accelerate: a torch clip after `accelerator.backward(loss)` (the clip that unscales is the accelerator's);
- the HF Trainer: in a `training_step` override, `self.accelerator.clip_grad_norm_` (or `unscale_gradients`),
  which the Trainer's own unscale then repeats, or a torch clip after the step's backward.

Each only where the code shows the precision that scales (`Trainer(precision="16-mixed")`,
`Accelerator(mixed_precision="fp16")`, `TrainingArguments(fp16=True)`, literal keywords), in this module or, for
Lightning and the HF Trainer, in a module of the project that imports it (their constructors are called in the
training script, the subclass is defined beside it or imported there). Anything else is unknown: nothing is
reported. No framework is imported."""

from __future__ import annotations

import ast
import bisect
import os
from dataclasses import dataclass

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts.clips import ast_imports, ast_qualified
from amplint.facts.model import Call, RegionState
from amplint.facts.module import ModuleFacts, may_follow
from amplint.vocabulary import Effect

LIGHTNING_HOOK = "lightning"  # a clip in `on_after_backward`
LIGHTNING_MANUAL = "lightning-manual"  # a clip after `self.manual_backward(loss)`, before `opt.step()` unscales
ACCELERATE_BACKWARD = "accelerate"  # a torch clip after `accelerator.backward(loss)`
HF_UNSCALE = "hf-unscale"  # `self.accelerator.clip_grad_norm_` in a `training_step` override
HF_CLIP = "hf-clip"  # a torch clip after the backward of a `training_step` override


@dataclass(frozen=True)
class Shown:
    """Where the code shows the precision that scales: "`Trainer(...)` (line 12)", "`Trainer(...)` (train.py:12)"."""

    framework: vocab.Framework
    where: str
    keywords: tuple[dict, ...]  # the literal keywords of every construction seen


@dataclass(frozen=True)
class FrameworkClip:
    """A clip (or an unscale) where a framework's gradients are still scaled, or about to be unscaled again."""

    kind: str  # LIGHTNING_HOOK, ACCELERATE_BACKWARD, HF_UNSCALE, HF_CLIP
    call: Call
    shown: Shown
    method: str  # the hook or method it is in ("on_after_backward", "training_step"), or the backward's receiver


def framework_clips(facts: ModuleFacts) -> list[FrameworkClip]:
    """The clips of this module that break a framework's contract, as the code shows it."""
    found: list[FrameworkClip] = []
    clips = [event.call for event in facts.events if event.kind == Effect.CLIP]
    shown: dict[str, Shown | None] = {}

    def scaling(framework: vocab.Framework) -> Shown | None:
        if framework.name not in shown:
            shown[framework.name] = _shown(facts, framework)
        return shown[framework.name]

    lightning = _methods(facts, vocab.LIGHTNING.bases, None)
    if lightning:
        hooks = _methods(facts, vocab.LIGHTNING.bases, vocab.LIGHTNING_SCALED_HOOK)
        candidates = clips + [call for call in facts.calls if call.receiver == "self"
                              and call.method == vocab.LIGHTNING_CLIP]  # Lightning's clip unscales nothing
        backward = _Ordered(facts, lambda call: call.receiver == "self" and call.method == vocab.MANUAL_BACKWARD)
        steps = _Ordered(facts, lambda call: call.method == vocab.STEP)
        for call in candidates:
            function = call.frame.function()
            if id(function) not in lightning or not scaling(vocab.LIGHTNING):
                continue
            if id(function) in hooks:
                found.append(FrameworkClip(LIGHTNING_HOOK, call, scaling(vocab.LIGHTNING), vocab.LIGHTNING_SCALED_HOOK))
                continue
            last = backward.last_before(function, call.index)  # manual optimization: the unscale is in `opt.step()`
            if last is not None and may_follow(facts, last.frame, call.frame) \
                    and steps.last_before(function, call.index, after=last.index) is None:
                found.append(FrameworkClip(LIGHTNING_MANUAL, call, scaling(vocab.LIGHTNING), vocab.MANUAL_BACKWARD))
    if any(call.qualified in vocab.ACCELERATE.constructors for call in facts.calls):
        found += _after_accelerator_backward(facts, clips)
    methods = _methods(facts, vocab.HF_TRAINER.bases, vocab.HF_TRAINING_STEP)
    if methods and scaling(vocab.HF_TRAINER):
        hf = scaling(vocab.HF_TRAINER)
        clips_in_trainer = all(vocab.HF_MAX_GRAD_NORM not in keywords
                               or keywords[vocab.HF_MAX_GRAD_NORM] not in vocab.HF_NO_CLIP
                               for keywords in hf.keywords)
        for call in facts.calls:
            if id(call.frame.function()) in methods and clips_in_trainer \
                    and call.receiver == f"self.{vocab.HF_ACCELERATOR}" and call.method in vocab.ACCELERATE_UNSCALES:
                found.append(FrameworkClip(HF_UNSCALE, call, hf, vocab.HF_TRAINING_STEP))
        step_backward = _Ordered(facts, _runs_step_backward)
        for clip in clips:
            function = clip.frame.function()
            last = step_backward.last_before(function, clip.index) if id(function) in methods else None
            if last is not None and may_follow(facts, last.frame, clip.frame):
                found.append(FrameworkClip(HF_CLIP, clip, hf, vocab.HF_TRAINING_STEP))
    return found


@dataclass(frozen=True)
class ManualBackward:
    """`self.manual_backward(...)` in the `training_step` of a LightningModule in manual optimization, which runs
    under the Trainer's autocast, in a module whose forward path computes an fp32 island."""

    call: Call
    shown: Shown  # the Trainer's precision that autocasts
    island: Island


@dataclass(frozen=True)
class Island:
    """Where an fp32 island is computed: its code (`torch.autocast("cuda", enabled=False)`, `fp32_norm()`), the
    module (None: this one) and the line."""

    code: str
    module: str | None
    line: int

    def where(self) -> str:
        """"line 12", "parts.py:8"."""
        return f"line {self.line}" if self.module is None else f"{os.path.basename(self.module)}:{self.line}"


ISLANDS = (Effect.DISABLED_REGION, Effect.AUTOCAST_OFF)  # the index's facts of a function computing an fp32 island


def manual_backward_under_autocast(facts: ModuleFacts) -> list[ManualBackward]:
    """Lightning manual optimization where its harm is shown: a class deriving from LightningModule that sets
    `self.automatic_optimization = False` and calls `self.manual_backward(...)` in `training_step`, outside any
    autocast region of its own (an enabled one is AMP001's plain case; a disabled one is the fix); an fp32 island
    (an `autocast(enabled=False)` block not around a `manual_backward`, or a function decorated with one) in this
    module, or in a function of another module that a method of the class calls (through the project index);
    and a Trainer precision that autocasts shown (`Trainer(precision="bf16-mixed")`, in this module or a module
    importing it). Anything less: nothing."""
    if vocab.MANUAL_BACKWARD not in facts.source or vocab.LIGHTNING_MANUAL_SWITCH not in facts.source:
        return []
    steps = _methods(facts, vocab.LIGHTNING.bases, vocab.LIGHTNING_TRAINING_STEP)
    backwards = [call for call in facts.calls if call.receiver == "self" and call.method == vocab.MANUAL_BACKWARD
                 and id(call.frame.function()) in steps]
    backwards = [call for call in backwards if _manual(facts, call.frame.function().class_name)
                 and facts.effective_region(call.frame)[0] is None]
    if not backwards:
        return []
    shown = _shown(facts, vocab.LIGHTNING, lambda keywords: vocab.LIGHTNING.autocasts(keywords,
                                                                                          vocab.LIGHTNING_AUTOCASTS))
    if shown is None:
        return []
    found = []
    islands: dict[str, Island | None] = {}
    for call in backwards:
        owner = call.frame.function().class_name
        if owner not in islands:
            islands[owner] = _island_here(facts) or _island_called(facts, owner)
        if islands[owner] is not None:
            found.append(ManualBackward(call, shown, islands[owner]))
    return found


def _manual(facts: ModuleFacts, class_name: str) -> bool:
    """Does the class of this module set `self.automatic_optimization = False` in one of its methods?"""
    for node in facts.module.body:
        if isinstance(node, cst.ClassDef) and node.name.value == class_name:
            return any(_switches_off(statement) for statement in _statements(node.body))
    return False


def _statements(body) -> list:
    found = []
    for statement in getattr(body, "body", ()):
        if isinstance(statement, cst.SimpleStatementLine):
            found += statement.body
        elif isinstance(statement, cst.FunctionDef):
            found += _statements(statement.body)
        elif isinstance(statement, (cst.If, cst.With)):
            found += _statements(statement.body)
    return found


def _switches_off(statement) -> bool:
    """`self.automatic_optimization = False`."""
    if not isinstance(statement, cst.Assign) or not isinstance(statement.value, cst.Name) \
            or statement.value.value != "False":
        return False
    return any(isinstance(t.target, cst.Attribute) and isinstance(t.target.value, cst.Name)
               and t.target.value.value == "self" and t.target.attr.value == vocab.LIGHTNING_MANUAL_SWITCH
               for t in statement.targets)


def _island_here(facts: ModuleFacts) -> Island | None:
    """The first fp32 island of this module: a `with` block whose autocast is disabled and holds no
    `manual_backward` (that is the fix, around the backward), or a function decorated with a disabled autocast."""
    wrapped = [call.frame for call in facts.calls if call.method == vocab.MANUAL_BACKWARD]
    for frame in facts.with_frames.values():
        region = facts.region_of(frame)
        if region is None or region.state is not RegionState.OFF or region.frame is not frame:
            continue
        if any(frame in inner.ancestors() for inner in wrapped):
            continue
        return Island(region.spelling, None, facts.line_of(frame.node))
    for info in facts.functions:
        region = facts.region_of(info.frame)
        if region is not None and region.state is RegionState.OFF and region.via == "decorator":
            return Island(f"@{region.spelling}", None, facts.line_of(info.node.name))
    return None


def _island_called(facts: ModuleFacts, class_name: str) -> Island | None:
    """A function of another module, called by a method of the class, that computes an fp32 island itself or
    through its callees (the project index; a question that fails knows nothing)."""
    view = facts.project
    try:
        for call in facts.calls:
            function = call.frame.function()
            if call.dotted is None or function is None or function.class_name != class_name:
                continue
            info = facts.function_info(call.frame)
            target = view.resolve(info.qualname if info else None, call.dotted)
            if target is None or target.module == view.path:
                continue
            reached = view.reaches(target, ISLANDS)
            if reached is not None:
                chain, fact = reached
                doer = view.function(chain[-1])
                line = doer.lines.get(fact, doer.line)
                return Island(f"{chain[-1].qualname}()", chain[-1].module, line)
    except (AttributeError, KeyError, OSError, RecursionError):
        return None
    return None


class _Ordered:
    """The module's calls that `keep` selects, per function in source order, searched by bisection (a function
    with N clips costs N lookups, not N scans)."""

    def __init__(self, facts: ModuleFacts, keep) -> None:
        self._by_function: dict[int, tuple[list[int], list[Call]]] = {}
        for call in sorted(facts.calls, key=lambda call: call.index):
            if keep(call):
                indexes, calls = self._by_function.setdefault(id(call.frame.function()), ([], []))
                indexes.append(call.index)
                calls.append(call)

    def last_before(self, function, index: int, after: int = -1) -> Call | None:
        """The last selected call of the function before `index` (and after `after`), or None."""
        indexes, calls = self._by_function.get(id(function), ([], []))
        position = bisect.bisect_left(indexes, index) - 1
        return calls[position] if position >= 0 and indexes[position] > after else None


def _after_accelerator_backward(facts: ModuleFacts, clips: list[Call]) -> list[FrameworkClip]:
    """Torch clips after `accelerator.backward(loss)` in the same function, the accelerator built in this module
    with `mixed_precision="fp16"` (every construction of the name), no unscale of it between."""
    found = []
    backward = _Ordered(facts, lambda call: call.method == vocab.ACCELERATE_BACKWARD and call.receiver is not None)
    unscales = _Ordered(facts, lambda call: call.method in vocab.ACCELERATE_UNSCALES and call.receiver is not None)
    for clip in clips:
        function = clip.frame.function()
        last = backward.last_before(function, clip.index) if function is not None else None
        if last is None or not may_follow(facts, last.frame, clip.frame):
            continue
        unscale = unscales.last_before(function, clip.index, after=last.index)
        if unscale is not None:  # an unscale between (of this accelerator or another: not known which)
            continue
        shown = _accelerator(facts, last)
        if shown is not None:
            found.append(FrameworkClip(ACCELERATE_BACKWARD, clip, shown, last.receiver))
    return found


def _accelerator(facts: ModuleFacts, backward: Call) -> Shown | None:
    """The accelerate precision of the object `backward` is called on, when every binding of its name is an
    `Accelerator(...)` shown to scale (a parameter of the function is not known: silent)."""
    info = facts.function_info(backward.frame)
    head = backward.receiver.split(".", 1)[0]
    if info is not None and head != "self" and head in _parameters(info.node):
        return None
    bound = facts.bindings(backward.receiver, backward.frame)
    if not bound:
        return None
    keywords = []
    for assignment in bound:
        value = assignment.value
        if not isinstance(value, cst.Call) or facts.imports.qualify(value.func) not in vocab.ACCELERATE.constructors:
            return None
        keywords.append(_cst_keywords(value))
    if not all(vocab.ACCELERATE.scales(k) for k in keywords):
        return None
    return Shown(vocab.ACCELERATE, f"`{facts.code(bound[0].value.func)}(...)` (line {facts.line_of(bound[0].value)})",
                 tuple(keywords))


def _parameters(node: cst.FunctionDef) -> set[str]:
    params = node.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return {p.name.value for p in every}


def _runs_step_backward(call: Call) -> bool:
    """`super().training_step(...)` or `self.accelerator.backward(...)`: the HF step's scaled backward."""
    func = call.node.func
    if call.method == vocab.HF_TRAINING_STEP and isinstance(func, cst.Attribute) \
            and isinstance(func.value, cst.Call) and isinstance(func.value.func, cst.Name) \
            and func.value.func.value == "super":
        return True
    return call.receiver == f"self.{vocab.HF_ACCELERATOR}" and call.method == vocab.ACCELERATE_BACKWARD


def _methods(facts: ModuleFacts, bases: frozenset[str], method: str | None) -> set[int]:
    """ids of the frames of `method` (None: any method) in the module's classes that derive from one of `bases`
    (through the imports, through another class of this module, or a class of another module, that does)."""
    classes: dict[str, cst.ClassDef] = {node.name.value: node for node in facts.module.body
                                        if isinstance(node, cst.ClassDef)}
    derived: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, node in classes.items():
            if name in derived:
                continue
            for base in node.bases:
                written = facts.code(base.value)
                if facts.imports.qualify(base.value) in bases or written in derived \
                        or written not in classes and _derives_elsewhere(facts, written, bases):
                    derived.add(name)
                    changed = True
                    break
    return {id(info.frame) for info in facts.functions if info.qualname.rsplit(".", 1)[0] in derived
            and info.qualname.count(".") == 1 and method in (None, info.node.name.value)}


def _derives_elsewhere(facts: ModuleFacts, written: str, bases: frozenset[str], depth: int = 3) -> bool:
    """Does the class named `written` here, a class of another module of the project (through the index), derive
    from one of `bases` (its own bases qualified through its module's imports, `depth` classes up)?"""
    view = facts.project
    try:
        located = view.class_at(view.path, written)
        if located is None or located[0] == view.path:
            return False
        return _record_derives(view, located, bases, depth)
    except (AttributeError, KeyError, OSError, RecursionError):
        return False  # an index question that fails knows nothing


def _record_derives(view, located: tuple[str, str], bases: frozenset[str], depth: int) -> bool:
    path, name = located
    record = view.record(path)
    if record is None or depth <= 0:
        return False
    for base in record.classes.get(name, ()):
        head, _, rest = base.partition(".")
        imported = record.imports.get(head)
        if imported is not None and not imported[2]:
            qualified = ".".join(part for part in (imported[0], imported[1], rest) if part)
        else:
            qualified = base
        if qualified in bases:
            return True
        inner = view.class_at(path, base)
        if inner is not None and _record_derives(view, inner, bases, depth - 1):
            return True
    return False


def _shown(facts: ModuleFacts, framework: vocab.Framework, shows=None) -> Shown | None:
    """The framework's precision as the code shows it: every construction of its precision class in this module
    and in the modules of the project importing it shows the scaling value (or, with `shows`, a value that
    `shows(keywords)` accepts); None when one does not, or none is seen."""
    shows = shows or framework.scales
    seen: list[tuple[str, dict]] = []
    for call in facts.calls:
        if call.qualified in framework.constructors:
            seen.append((f"`{call.dotted}(...)` (line {facts.line_of(call.node)})", _cst_keywords(call.node)))
    seen += _importers(facts, framework)
    if not seen or not all(shows(keywords) for _, keywords in seen):
        return None
    return Shown(framework, seen[0][0], tuple(keywords for _, keywords in seen))


def _importers(facts: ModuleFacts, framework: vocab.Framework) -> list[tuple[str, dict]]:
    """The constructions of the framework's precision class in the project's modules importing this one (read
    from their text; the cached result depends on it)."""
    view = facts.project
    found: list[tuple[str, dict]] = []
    try:
        view.asked_importers.add(view.path)
        importers = list(view.project.importers(view.path))
        for path in list(importers):  # a package's `__init__` re-exporting it: the package's importers too
            if os.path.basename(path) == "__init__.py":
                view.asked_importers.add(path)
                importers += [other for other in view.project.importers(path) if other not in importers]
        for path in importers:
            text = view.text(path)
            if not text or not any(name.rsplit(".", 1)[-1] in text for name in framework.constructors):
                continue
            tree = ast.parse(text)
            names = view.project.names.get(path) or path
            for node, keywords in _ast_constructions(tree, framework.constructors):
                found.append((f"`{ast.unparse(node.func)}(...)` ({names}:{node.lineno})", keywords))
    except (AttributeError, OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # an index question that fails knows nothing
    return found


def _ast_constructions(tree: ast.Module, constructors: frozenset[str]):
    """(call, literal keywords) of each call in the tree whose callee, through the module's imports, is one of
    `constructors`."""
    imported = ast_imports(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast_qualified(node.func, imported) in constructors:
            keywords = {}
            for keyword in node.keywords:
                if keyword.arg is None:
                    continue
                try:
                    keywords[keyword.arg] = ast.literal_eval(keyword.value)
                except (ValueError, TypeError, SyntaxError, RecursionError):
                    pass
            yield node, keywords


def _cst_keywords(call: cst.Call) -> dict:
    """The call's keyword arguments whose values are literals (strings, numbers, True/False/None)."""
    found = {}
    for arg in call.args:
        if arg.keyword is None:
            continue
        value = arg.value
        if isinstance(value, cst.SimpleString):
            found[arg.keyword.value] = value.evaluated_value
        elif isinstance(value, cst.Integer):
            found[arg.keyword.value] = int(value.value.replace("_", ""), 0)
        elif isinstance(value, cst.Float):
            found[arg.keyword.value] = float(value.value.replace("_", ""))
        elif isinstance(value, cst.Name) and value.value in ("True", "False", "None"):
            found[arg.keyword.value] = {"True": True, "False": False, "None": None}[value.value]
    return found
