"""The facts layer on small sources: spellings, aliases, regions, scalers, optimizers, events."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint.facts import ModuleFacts, RegionState
from amplint.vocabulary import Effect


def facts_of(source: str) -> ModuleFacts:
    return ModuleFacts(cst.parse_module(textwrap.dedent(source)))


def region_at_backward(source: str):
    facts = facts_of(source)
    backward = [e for e in facts.events if e.kind == Effect.BACKWARD]
    assert backward, "no backward event recorded"
    return facts.effective_region(backward[0].frame)[0]


@pytest.mark.parametrize("imports, opener", [
    ("import torch", "torch.autocast('cuda')"),
    ("import torch", "torch.amp.autocast('cuda')"),
    ("import torch", "torch.cuda.amp.autocast()"),
    ("import torch", "torch.cpu.amp.autocast()"),
    ("import torch as th", "th.autocast('cuda')"),
    ("from torch.cuda.amp import autocast as ac", "ac()"),
    ("from torch import autocast", "autocast('cuda')"),
    ("from torch.amp import autocast", "autocast('cuda')"),
    ("import torch.cuda.amp as amp", "amp.autocast()"),
    ("from torch.cuda import amp", "amp.autocast()"),
    ("from torch.amp.autocast_mode import autocast", "autocast('cpu')"),
])
def test_every_autocast_spelling_opens_an_enabled_region(imports, opener):
    region = region_at_backward(f"""
        {imports}
        with {opener}:
            loss.backward()
    """)
    assert region is not None and region.state is RegionState.ON


def test_unrelated_autocast_is_not_a_region():
    source = """
        from apex import amp
        with amp.autocast():
            loss.backward()
    """
    assert region_at_backward(source) is None


@pytest.mark.parametrize("opener, state", [
    ("torch.autocast('cuda', enabled=False)", RegionState.OFF),
    ("torch.autocast('cuda', enabled=True)", RegionState.ON),
    ("torch.autocast('cuda', enabled=use_amp)", RegionState.MAYBE),
    ("torch.autocast('cuda', torch.float16, False)", RegionState.OFF),
    ("torch.cuda.amp.autocast(False)", RegionState.OFF),  # legacy: first positional is `enabled`
    ("torch.cuda.amp.autocast(True)", RegionState.ON),
    ("torch.cpu.amp.autocast(enabled=args.amp)", RegionState.MAYBE),
    ("accelerator.autocast()", RegionState.MAYBE),
    ("self.accelerator.autocast()", RegionState.MAYBE),
])
def test_region_state(opener, state):
    region = region_at_backward(f"""
        import torch
        with {opener}:
            loss.backward()
    """)
    assert region is not None and region.state is state


def test_device_and_dtype():
    region = region_at_backward("""
        import torch
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss.backward()
    """)
    assert (region.device, region.dtype) == ("cpu", "bfloat16")
    legacy = region_at_backward("""
        import torch
        with torch.cuda.amp.autocast(dtype=torch.half):
            loss.backward()
    """)
    assert (legacy.device, legacy.dtype) == ("cuda", "float16")


def test_region_through_a_variable_partial_and_conditional():
    assert region_at_backward("""
        import torch
        ctx = torch.autocast("cuda")
        with ctx:
            loss.backward()
    """).state is RegionState.ON
    assert region_at_backward("""
        import functools, torch
        amp_autocast = functools.partial(torch.autocast, device_type="cuda", dtype=torch.bfloat16)
        with amp_autocast():
            loss.backward()
    """).dtype == "bfloat16"
    assert region_at_backward("""
        import torch
        from contextlib import nullcontext
        ctx = nullcontext() if not use_amp else torch.autocast("cuda")
        with ctx:
            loss.backward()
    """).state is RegionState.MAYBE
    assert region_at_backward("""
        import torch
        class T:
            def __init__(self):
                self.ctx = torch.autocast("cuda")
            def step(self):
                with self.ctx:
                    loss.backward()
    """) is not None


def test_several_with_items_and_nesting():
    assert region_at_backward("""
        import torch
        with open("log") as f, torch.autocast("cuda"):
            loss.backward()
    """).state is RegionState.ON
    assert region_at_backward("""
        import torch
        with torch.autocast("cuda"):
            with torch.autocast("cuda", enabled=False):
                loss.backward()
    """).state is RegionState.OFF


def test_decorator_region_and_nested_def_does_not_run_in_the_block():
    assert region_at_backward("""
        import torch
        @torch.autocast("cuda")
        def step(loss):
            loss.backward()
    """).via == "decorator"
    assert region_at_backward("""
        import torch
        with torch.autocast("cuda"):
            def later(loss):
                loss.backward()
    """) is None


def test_region_followed_through_same_module_calls():
    facts = facts_of("""
        import torch
        def inner(loss):
            loss.backward()
        def middle(loss):
            inner(loss)
        def outer(loss):
            with torch.autocast("cuda"):
                middle(loss)
    """)
    backward = next(e for e in facts.events if e.kind == Effect.BACKWARD)
    region, chain = facts.effective_region(backward.frame)
    assert region is not None and [c.dotted for c in chain] == ["inner", "middle"]


def test_methods_on_self_are_followed():
    facts = facts_of("""
        import torch
        class Trainer:
            def fit(self):
                with torch.autocast("cuda"):
                    self.train_step()
            def train_step(self):
                self.loss.backward()
    """)
    backward = next(e for e in facts.events if e.kind == Effect.BACKWARD)
    assert facts.effective_region(backward.frame)[0] is not None


@pytest.mark.parametrize("imports, construction", [
    ("import torch", "torch.amp.GradScaler('cuda')"),
    ("import torch", "torch.cuda.amp.GradScaler()"),
    ("import torch", "torch.cpu.amp.GradScaler()"),
    ("import torch", "torch.GradScaler()"),
    ("from torch.cuda.amp import GradScaler", "GradScaler(enabled=use_amp)"),
    ("from torch.amp import GradScaler as GS", "GS('cuda')"),
    ("import torch.cuda.amp as amp", "amp.GradScaler()"),
])
def test_scaler_spellings(imports, construction):
    facts = facts_of(f"""
        {imports}
        scaler = {construction}
        scaler.step(optimizer)
    """)
    kinds = [e.kind for e in facts.events]
    assert Effect.BUILDS_SCALER in kinds and Effect.SCALER_STEP in kinds
    build = next(e for e in facts.events if e.kind == Effect.BUILDS_SCALER)
    assert build.bound_to == "scaler"


def test_sklearn_scaler_is_not_a_grad_scaler():
    facts = facts_of("""
        from sklearn.preprocessing import StandardScaler
        scaler = StandardScaler()
        x = scaler.scale(x)
        scaler.update()
    """)
    assert facts.events == []


def test_scaler_known_by_usage_and_self_attributes():
    facts = facts_of("""
        import torch
        class T:
            def __init__(self):
                self.scaler = torch.cuda.amp.GradScaler()
            def step(self, loss):
                self.scaler.scale(loss).backward()
                self.scaler.unscale_(self.optimizer)
                self.scaler.step(self.optimizer)
                self.scaler.update()
        def helper(scaler, loss, opt):
            scaler.scale(loss).backward()
            scaler.step(opt)
    """)
    kinds = [(e.kind, e.scaler, e.optimizer) for e in facts.events]
    assert (Effect.UNSCALE, "self.scaler", "self.optimizer") in kinds
    assert (Effect.SCALER_STEP, "scaler", "opt") in kinds
    scaled = [e for e in facts.events if e.kind == Effect.BACKWARD]
    assert all(e.scaled for e in scaled)


@pytest.mark.parametrize("line, is_step", [
    # known by what the code does with them, never by their names
    ("optimizer.step()", False),
    ("optimizer.zero_grad(); optimizer.step()", True),
    ("self.optimizer.zero_grad(); self.optimizer.step()", True),
    ("opt_g.step(); scaler.step(opt_g)", True),
    ("d_optim.step(); d_optim.param_groups[0]['lr'] = 0.1", True),
    ("sgd.step()", True),  # bound to torch.optim.SGD below
    ("env.step(action)", False),
    ("scheduler.step()", False),
    ("lr_scheduler.step()", False),
    ("o, lr_scheduler = get_optimizer_and_scheduler(m); lr_scheduler.step()", False),
])
def test_optimizer_identity(line, is_step):
    facts = facts_of(f"""
        import torch
        sgd = torch.optim.SGD(params, lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        {line}
    """)
    assert any(e.kind == Effect.OPTIMIZER_STEP for e in facts.events) is is_step


@pytest.mark.parametrize("spelling", [
    "import torch\ntorch.nn.utils.clip_grad_norm_(p, 1.0)",
    "import torch.nn as nn\nnn.utils.clip_grad_norm_(p, 1.0)",
    "from torch import nn\nnn.utils.clip_grad_value_(p, 1.0)",
    "from torch.nn.utils import clip_grad_norm_\nclip_grad_norm_(p, 1.0)",
    "from torch.nn.utils import clip_grad_norm_ as clip\nclip(p, 1.0)",
    "from torch.nn.utils.clip_grad import clip_grad_norm_\nclip_grad_norm_(p, 1.0)",
])
def test_clip_spellings(spelling):
    assert [e.kind for e in facts_of(spelling).events] == [Effect.CLIP]


def test_accelerator_clip_is_not_a_torch_clip():
    assert facts_of("accelerator.clip_grad_norm_(model.parameters(), 1.0)").events == []


def test_events_in_source_order_with_loops():
    facts = facts_of("""
        import torch
        scaler = torch.amp.GradScaler("cuda")
        def train():
            for batch in loader:
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                scaler.step(optimizer)
                scaler.update()
    """)
    train = next(f for f in facts.functions if f.qualname == "train")
    events = facts.events_in(train.frame)
    assert [e.kind for e in events] == [
        Effect.BACKWARD, Effect.SCALER_SCALE, Effect.UNSCALE, Effect.CLIP, Effect.SCALER_STEP,
        Effect.SCALER_UPDATE,
    ]
    assert all(e.frame.loops_up_to_function() for e in events)


@pytest.mark.parametrize("opener", [
    "with torch.no_grad():", "with torch.inference_mode():", "with torch.set_grad_enabled(False):",
])
def test_no_grad_contexts(opener):
    facts = facts_of(f"""
        import torch
        {opener}
            y = scaler.scale(x)
    """)
    call = next(c for c in facts.calls if c.method == "scale")
    assert facts.no_grad_opener(call.frame) is not None


def test_no_grad_decorator_and_enabled_grad():
    facts = facts_of("""
        import torch
        @torch.no_grad()
        def evaluate():
            y = scaler.scale(x)
        with torch.set_grad_enabled(True):
            z = scaler.scale(x)
    """)
    inside, outside = [c for c in facts.calls if c.method == "scale"]
    assert facts.no_grad_opener(inside.frame) is not None
    assert facts.no_grad_opener(outside.frame) is None


def test_imports_late_in_the_file_still_resolve():
    facts = facts_of("""
        def f():
            with autocast():
                loss.backward()
        from torch.cuda.amp import autocast
    """)
    backward = next(e for e in facts.events if e.kind == Effect.BACKWARD)
    assert facts.effective_region(backward.frame)[0] is not None
