"""The safety corpus: correct CPU training programs that no safe fix may break (docs/reliability.md).

Each program in `fixtures/safe-fixes/corpus/` is a tiny seeded training (or inference) program that is correct
as written, in a shape near one rule's safe fix: the unscale, the update, the scaler, the cast or the step that
a fix would add, move or remove is already there under another spelling (a loop, a helper, an alias, a bound
method, a partial, a class method, a nested function, a dataclass field), or the program is one whose finding
has a fix that must keep every value (a deprecated spelling, a dead scaler in evaluation code, a backward moved
out of a region). Its `.expect.json` is a safety spec (amplint/harness.py): `"same"` lists the JSON keys a fixed
run must reproduce.

    python benchmarks/safety_corpus.py --write     # (re)write the programs from the shapes below
    python benchmarks/safety_corpus.py             # fix every program with safe fixes, run each original and
                                                   # each changed one with torch, print the figures; exit 1 if
                                                   # an original fails or a fixed run differs or raises anew
    python benchmarks/safety_corpus.py --list-changed   # the programs a safe fix changes (no torch needed)

The committed programs are ordinary files; this script is only how they were written (tests/test_fix_safety.py
checks they are what it writes, and runs the programs a safe fix changes plus a fixed sample of the others).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fixtures" / "safe-fixes" / "corpus"

PRELUDE = '''\
import json
import os

import torch
from torch import nn

device = os.environ.get("AMPLINT_DEVICE", "cpu")
dtype = getattr(torch, os.environ.get("AMPLINT_DTYPE", "{dtype}"))
torch.manual_seed(0)
torch.set_num_threads(1)
'''

# Optimizer variants: class and keyword arguments (each shape is written once per variant).
OPTIMIZERS = {
    "sgd": "torch.optim.SGD({params}, lr=0.1)",
    "adamw": "torch.optim.AdamW({params}, lr=1e-2)",
    "momentum": "torch.optim.SGD({params}, lr=0.05, momentum=0.9)",
}
CLIPS = {
    "norm": "torch.nn.utils.clip_grad_norm_({params}, 1.0)",
    "value": "torch.nn.utils.clip_grad_value_({params}, 0.5)",
}


@dataclass(frozen=True)
class Shape:
    name: str  # file stem without the variant suffix
    rule: str  # the rule whose safe fix the shape is near
    shape: str  # loop, helper, alias, bound-method, ...
    doc: str  # what the program does and why it is correct
    body: str  # the program after the prelude; {opt(...)}, {clip(...)} are filled per variant
    same: tuple[str, ...]
    variants: tuple[str, ...] = ("sgd", "adamw", "momentum")
    imports: str = ""


def _fill(body: str, variant: str) -> str:
    """Fill `OPT(params)` and `CLIP(params)` placeholders for one variant."""
    out = body
    optimizer = OPTIMIZERS.get(variant, OPTIMIZERS["sgd"])
    clip = CLIPS["value"] if variant in ("adamw", "value") else CLIPS["norm"]
    for marker, template in (("OPT(", optimizer), ("CLIP(", clip)):
        while marker in out:
            start = out.index(marker)
            depth, end = 0, start + len(marker) - 1
            for end in range(start + len(marker) - 1, len(out)):
                depth += {"(": 1, ")": -1}.get(out[end], 0)
                if depth == 0:
                    break
            params = out[start + len(marker):end]
            out = out[:start] + template.format(params=params) + out[end + 1:]
    return out


STEP_DATA = "x, y = torch.randn(4, 8, device=device), torch.randn(4, 2, device=device)"

SHAPES: list[Shape] = []


def shape(name, rule, kind, doc, body, same, variants=("sgd", "adamw", "momentum"), imports=""):
    SHAPES.append(Shape(name, rule, kind, doc, textwrap.dedent(body).strip("\n") + "\n", tuple(same),
                        tuple(variants), imports))


# --- AMP003: the unscale before the clip is already there, spelled another way --------------------------------

shape("unscale_loop_two_optimizers", "AMP003", "loop, multi-optimizer",
      "Two optimizers unscaled in a loop over a list, then each model clipped.", """
enc, dec = nn.Linear(8, 8).to(device), nn.Linear(8, 2).to(device)
opt_e, opt_d = OPT(enc.parameters()), OPT(dec.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(dec(enc(x)), y)
    scaler.scale(loss).backward()
    for opt in [opt_e, opt_d]:
        scaler.unscale_(opt)
    CLIP(enc.parameters())
    CLIP(dec.parameters())
    scaler.step(opt_e)
    scaler.step(opt_d)
    scaler.update()
    opt_e.zero_grad()
    opt_d.zero_grad()
print(json.dumps({"enc": enc.weight.sum().item(), "dec": dec.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["enc", "dec", "scale"])

shape("unscale_module_helper", "AMP003", "helper",
      "A module helper unscales every optimizer it is given; the clip follows its call.", """
def unscale_all(grad_scaler, optimizers):
    for each in optimizers:
        grad_scaler.unscale_(each)


model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    unscale_all(scaler, [optimizer])
    CLIP(model.parameters())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("unscale_class_method", "AMP003", "class-method",
      "A trainer's `unscale()` method unscales its optimizer; `step()` calls it before the clip.", """
class Trainer:
    def __init__(self):
        self.model = nn.Linear(8, 2).to(device)
        self.optimizer = OPT(self.model.parameters())
        self.scaler = torch.amp.GradScaler(device)

    def unscale(self):
        self.scaler.unscale_(self.optimizer)

    def step(self, x, y):
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.unscale()
        CLIP(self.model.parameters())
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()
        return loss.item()


trainer = Trainer()
losses = []
for _ in range(3):
    STEP
    losses.append(trainer.step(x, y))
print(json.dumps({"losses": losses, "w": trainer.model.weight.sum().item()}))
""", ["losses", "w"])

shape("unscale_scaler_alias", "AMP003", "alias",
      "The scaler under a second name unscales; the clip follows.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
grad_scaler = scaler
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    grad_scaler.unscale_(optimizer)
    CLIP(model.parameters())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("unscale_bound_method", "AMP003", "bound-method",
      "`unscale = scaler.unscale_` is bound before the loop and called before the clip.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
unscale = scaler.unscale_
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    unscale(optimizer)
    CLIP(model.parameters())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("unscale_partial", "AMP003", "bound-method",
      "`functools.partial(scaler.unscale_, optimizer)` is called before the clip.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
unscale = functools.partial(scaler.unscale_, optimizer)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    unscale()
    CLIP(model.parameters())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"], imports="import functools\n")

shape("unscale_nested_function", "AMP003", "nested-function",
      "A function nested in the training function unscales; it is called before the clip.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)


def train():
    def unscale():
        scaler.unscale_(optimizer)

    for _ in range(3):
        STEP
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        unscale()
        CLIP(model.parameters())
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


train()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("unscale_accumulation_boundary", "AMP003", "accumulation",
      "Gradients accumulate over two micro-batches; unscale, clip and step run at the boundary only.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
accumulate = 2
for i in range(6):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y) / accumulate
    scaler.scale(loss).backward()
    if (i + 1) % accumulate == 0:
        scaler.unscale_(optimizer)
        CLIP(model.parameters())
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("unscale_dict_output", "AMP003", "dict-output",
      "A model returns a dict of heads; the summed loss is scaled, unscaled, clipped and stepped.", """
class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(8, 8)
        self.a = nn.Linear(8, 2)
        self.b = nn.Linear(8, 1)

    def forward(self, x):
        h = self.trunk(x).relu()
        return {"a": self.a(h), "b": self.b(h)}


model = Heads().to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        out = model(x)
        loss = nn.functional.mse_loss(out["a"], y) + out["b"].float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    CLIP(model.parameters())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.a.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("unscale_dataclass_state", "AMP003", "dataclass",
      "A dataclass holds model, optimizer and scaler; the unscale goes through its fields.", """
@dataclass
class State:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler


def make_state():
    model = nn.Linear(8, 2).to(device)
    return State(model, OPT(model.parameters()), torch.amp.GradScaler(device))


def train_step(state, x, y):
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(state.model(x), y)
    state.scaler.scale(loss).backward()
    state.scaler.unscale_(state.optimizer)
    CLIP(state.model.parameters())
    state.scaler.step(state.optimizer)
    state.scaler.update()
    state.optimizer.zero_grad()


state = make_state()
for _ in range(3):
    STEP
    train_step(state, x, y)
print(json.dumps({"w": state.model.weight.sum().item(), "scale": state.scaler.get_scale()}))
""", ["w", "scale"], imports="from dataclasses import dataclass\n")

shape("unscale_with_scheduler", "AMP003", "scheduler",
      "Unscale, clip, step, update, then a learning-rate scheduler steps.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    CLIP(model.parameters())
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "lr": scheduler.get_last_lr()[0]}))
""", ["w", "lr"])

shape("unscale_gan_two_models", "AMP003", "multi-model",
      "A generator and a discriminator, each scaled, unscaled, clipped and stepped with its own optimizer.", """
gen, disc = nn.Linear(4, 8).to(device), nn.Linear(8, 1).to(device)
opt_g, opt_d = OPT(gen.parameters()), OPT(disc.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    z = torch.randn(4, 4, device=device)
    real = torch.randn(4, 8, device=device)
    with torch.autocast(device, dtype=dtype):
        d_loss = disc(real).float().mean() - disc(gen(z).detach()).float().mean()
    scaler.scale(d_loss).backward()
    scaler.unscale_(opt_d)
    CLIP(disc.parameters())
    scaler.step(opt_d)
    opt_d.zero_grad()
    with torch.autocast(device, dtype=dtype):
        g_loss = -disc(gen(z)).float().mean()
    scaler.scale(g_loss).backward()
    scaler.unscale_(opt_g)
    CLIP(gen.parameters())
    scaler.step(opt_g)
    scaler.update()
    opt_g.zero_grad()
    opt_d.zero_grad()
print(json.dumps({"g": gen.weight.sum().item(), "d": disc.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["g", "d", "scale"])

shape("unscale_getattr", "AMP003", "alias",
      "`getattr(scaler, \"unscale_\")(optimizer)` unscales before the clip.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    getattr(scaler, "unscale_")(optimizer)
    CLIP(model.parameters())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("unscale_map_over_optimizers", "AMP003", "loop, multi-optimizer",
      "`list(map(scaler.unscale_, optimizers))` unscales both optimizers before their clips.", """
a, b = nn.Linear(8, 8).to(device), nn.Linear(8, 2).to(device)
optimizers = [OPT(a.parameters()), OPT(b.parameters())]
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(b(a(x)), y)
    scaler.scale(loss).backward()
    list(map(scaler.unscale_, optimizers))
    CLIP(a.parameters())
    CLIP(b.parameters())
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()
    for opt in optimizers:
        opt.zero_grad()
print(json.dumps({"a": a.weight.sum().item(), "b": b.weight.sum().item()}))
""", ["a", "b"])

shape("unscale_star_helper", "AMP003", "helper, multi-optimizer",
      "A helper taking `*optimizers` unscales each one; the clips follow its call.", """
def unscale(grad_scaler, *optimizers):
    for each in optimizers:
        grad_scaler.unscale_(each)


a, b = nn.Linear(8, 8).to(device), nn.Linear(8, 2).to(device)
opt_a, opt_b = OPT(a.parameters()), OPT(b.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(b(a(x)), y)
    scaler.scale(loss).backward()
    unscale(scaler, opt_a, opt_b)
    CLIP(a.parameters())
    CLIP(b.parameters())
    scaler.step(opt_a)
    scaler.step(opt_b)
    scaler.update()
    opt_a.zero_grad()
    opt_b.zero_grad()
print(json.dumps({"a": a.weight.sum().item(), "b": b.weight.sum().item()}))
""", ["a", "b"])

shape("unscale_then_clip_helper", "AMP003", "helper",
      "A helper unscales and clips; the caller steps after it.", """
def clip_gradients(grad_scaler, optimizer, model):
    grad_scaler.unscale_(optimizer)
    return float(CLIP(model.parameters()) or 0.0)


model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
norms = []
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    norms.append(clip_gradients(scaler, optimizer, model))
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"norms": norms, "w": model.weight.sum().item()}))
""", ["norms", "w"])

shape("unscale_keyword_flag", "AMP003", "loop",
      "The unscale and the clip run under a flag, with `unscale_(optimizer=...)` spelled by keyword.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
clip_enabled = True
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    if clip_enabled:
        scaler.unscale_(optimizer=optimizer)
        CLIP(model.parameters())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("unscale_lambda", "AMP003", "bound-method",
      "A lambda stored before the loop unscales the optimizer.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
unscale = lambda: scaler.unscale_(optimizer)  # noqa: E731
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    unscale()
    CLIP(model.parameters())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("unscale_callback_object", "AMP003", "class-method",
      "A callback object with `__call__` unscales; the loop calls it before the clip.", """
class Unscaler:
    def __init__(self, grad_scaler, optimizer):
        self.grad_scaler, self.optimizer = grad_scaler, optimizer

    def __call__(self):
        self.grad_scaler.unscale_(self.optimizer)


model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
before_clip = Unscaler(scaler, optimizer)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    before_clip()
    CLIP(model.parameters())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("unscale_dict_of_optimizers", "AMP003", "loop, multi-optimizer",
      "Optimizers kept in a dict are unscaled over its values, then clipped per model.", """
models = {"a": nn.Linear(8, 2).to(device), "b": nn.Linear(8, 2).to(device)}
optimizers = {k: OPT(m.parameters()) for k, m in models.items()}
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = sum(nn.functional.mse_loss(m(x), y) for m in models.values())
    scaler.scale(loss).backward()
    for opt in optimizers.values():
        scaler.unscale_(opt)
    for m in models.values():
        CLIP(m.parameters())
    for opt in optimizers.values():
        scaler.step(opt)
    scaler.update()
    for opt in optimizers.values():
        opt.zero_grad()
print(json.dumps({k: m.weight.sum().item() for k, m in models.items()}))
""", ["a", "b"])

# --- AMP010: the update is there, spelled another way ---------------------------------------------------------

_UPDATE_LOOP = """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device, growth_interval=1)
SETUP
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    UPDATE
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
"""

for _name, _kind, _doc, _setup, _update, _imports in (
    ("update_alias", "alias", "`update = scaler.update`, called after each step.", "update = scaler.update",
     "update()", ""),
    ("update_partial", "bound-method", "`functools.partial(scaler.update)` is called after each step.",
     "update = functools.partial(scaler.update)", "update()", "import functools\n"),
    ("update_loop_bound_methods", "loop, bound-method", "A loop over a tuple of bound methods runs the update.",
     "after_step = (scaler.update,)", "for hook in after_step:\n        hook()", ""),
    ("update_dict_of_hooks", "bound-method", "A dict of hooks holds `scaler.update`.",
     "hooks = {\"after_step\": scaler.update}", "hooks[\"after_step\"]()", ""),
    ("update_module_helper", "helper", "A module helper updates the scaler it is given.",
     "def finish_step(grad_scaler):\n    grad_scaler.update()\n", "finish_step(scaler)", ""),
    ("update_lambda", "bound-method", "A lambda bound before the loop updates the scaler.",
     "after = lambda: scaler.update()  # noqa: E731", "after()", ""),
    ("update_getattr", "alias", "`getattr(scaler, \"update\")()` updates the scaler.", "", 
     "getattr(scaler, \"update\")()", ""),
    ("update_scaler_alias", "alias", "The scaler under a second name is updated.", "grad_scaler = scaler",
     "grad_scaler.update()", ""),
):
    shape(_name, "AMP010", _kind, _doc + " The scale grows every step (growth_interval=1): a second update raises.",
          _UPDATE_LOOP.replace("SETUP", _setup).replace("UPDATE", _update), ["w", "scale"], imports=_imports)

shape("update_class_method", "AMP010", "class-method",
      "A trainer steps in `step()` and updates in its `after_step()` method.", """
class Trainer:
    def __init__(self):
        self.model = nn.Linear(8, 2).to(device)
        self.optimizer = OPT(self.model.parameters())
        self.scaler = torch.amp.GradScaler(device, growth_interval=1)

    def after_step(self):
        self.scaler.update()
        self.optimizer.zero_grad()

    def step(self, x, y):
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.after_step()


trainer = Trainer()
for _ in range(3):
    STEP
    trainer.step(x, y)
print(json.dumps({"w": trainer.model.weight.sum().item(), "scale": trainer.scaler.get_scale()}))
""", ["w", "scale"])

shape("update_nested_function", "AMP010", "nested-function",
      "A function nested in the training function updates the scaler.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device, growth_interval=1)


def train():
    def finish():
        scaler.update()
        optimizer.zero_grad()

    for _ in range(3):
        STEP
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        finish()


train()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("update_two_optimizers_once", "AMP010", "multi-optimizer",
      "Two optimizers stepped through one scaler, updated once after both.", """
a, b = nn.Linear(8, 8).to(device), nn.Linear(8, 2).to(device)
opt_a, opt_b = OPT(a.parameters()), OPT(b.parameters())
scaler = torch.amp.GradScaler(device, growth_interval=1)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(b(a(x)), y)
    scaler.scale(loss).backward()
    scaler.step(opt_a)
    scaler.step(opt_b)
    scaler.update()
    opt_a.zero_grad()
    opt_b.zero_grad()
print(json.dumps({"a": a.weight.sum().item(), "b": b.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["a", "b", "scale"])

shape("update_accumulation", "AMP010", "accumulation",
      "Steps and updates at the accumulation boundary only.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device, growth_interval=1)
for i in range(6):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y) / 3
    scaler.scale(loss).backward()
    if (i + 1) % 3 == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("update_dataclass_state", "AMP010", "dataclass",
      "The scaler lives in a dataclass; the update goes through its field in a helper.", """
@dataclass
class State:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler


def finish(state):
    state.scaler.update()
    state.optimizer.zero_grad()


model = nn.Linear(8, 2).to(device)
state = State(model, OPT(model.parameters()), torch.amp.GradScaler(device, growth_interval=1))
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(state.model(x), y)
    state.scaler.scale(loss).backward()
    state.scaler.step(state.optimizer)
    finish(state)
print(json.dumps({"w": model.weight.sum().item(), "scale": state.scaler.get_scale()}))
""", ["w", "scale"], imports="from dataclasses import dataclass\n")

shape("update_in_step_helper", "AMP010", "helper, scheduler",
      "A helper steps and updates; the caller steps a scheduler after it.", """
def optimizer_step(grad_scaler, optimizer):
    grad_scaler.step(optimizer)
    grad_scaler.update()
    optimizer.zero_grad()


model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
scaler = torch.amp.GradScaler(device, growth_interval=1)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    optimizer_step(scaler, optimizer)
    scheduler.step()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale(), "lr": scheduler.get_last_lr()[0]}))
""", ["w", "scale", "lr"])

# --- AMP004: a scaler built in a loop, correctly (per model, per fold, once) ----------------------------------

shape("scaler_per_fold", "AMP004", "loop, multi-model",
      "Cross-validation: each fold trains a fresh model with a fresh scaler; the scale must not carry over.", """
scales = []
weights = []
for fold in range(2):
    model = nn.Linear(8, 2).to(device)
    optimizer = OPT(model.parameters())
    scaler = torch.amp.GradScaler(device, growth_interval=1)
    for _ in range(3):
        STEP
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    scales.append(scaler.get_scale())
    weights.append(model.weight.sum().item())
print(json.dumps({"scales": scales, "weights": weights}))
""", ["scales", "weights"])

shape("scaler_per_model_dict", "AMP004", "loop, multi-model",
      "A loop over models builds one scaler per model around that model's own steps.", """
models = {k: nn.Linear(8, 2).to(device) for k in ("a", "b")}
optimizers = {k: OPT(m.parameters()) for k, m in models.items()}
scales = []
for k in models:
    scaler = torch.amp.GradScaler(device, growth_interval=1)
    for _ in range(3):
        STEP
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(models[k](x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizers[k])
        scaler.update()
        optimizers[k].zero_grad()
    scales.append(scaler.get_scale())
print(json.dumps({"scales": scales, "weights": [m.weight.sum().item() for m in models.values()]}))
""", ["scales", "weights"])

shape("scaler_per_model_zip", "AMP004", "loop, multi-model",
      "`for model, optimizer in zip(models, optimizers)` builds one scaler per pair.", """
models = [nn.Linear(8, 2).to(device) for _ in range(2)]
optimizers = [OPT(m.parameters()) for m in models]
scales = []
for model, optimizer in zip(models, optimizers):
    scaler = torch.amp.GradScaler(device, growth_interval=1)
    for _ in range(3):
        STEP
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    scales.append(scaler.get_scale())
print(json.dumps({"scales": scales, "weights": [m.weight.sum().item() for m in models]}))
""", ["scales", "weights"])

shape("scaler_lazy_or", "AMP004", "loop",
      "`scaler = scaler or GradScaler(...)` builds the scaler on the first step only.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = None
for _ in range(3):
    STEP
    scaler = scaler or torch.amp.GradScaler(device, growth_interval=1)
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("scaler_first_iteration", "AMP004", "loop",
      "The scaler is built when `i == 0` and reused after.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
for i in range(3):
    STEP
    if i == 0:
        scaler = torch.amp.GradScaler(device, growth_interval=1)
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("scaler_per_run_function", "AMP004", "helper, multi-model",
      "A `fit()` function builds its scaler and trains a model given to it; a loop fits two models.", """
def fit(model):
    optimizer = OPT(model.parameters())
    scaler = torch.amp.GradScaler(device, growth_interval=1)
    for _ in range(3):
        STEP
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    return scaler.get_scale()


scales = []
models = [nn.Linear(8, 2).to(device) for _ in range(2)]
for model in models:
    scales.append(fit(model))
print(json.dumps({"scales": scales, "weights": [m.weight.sum().item() for m in models]}))
""", ["scales", "weights"])

shape("scaler_per_experiment_class", "AMP004", "class-method, multi-model",
      "Each experiment object builds its scaler in `__init__`; a loop builds and runs two of them.", """
class Experiment:
    def __init__(self, width):
        self.model = nn.Linear(8, width).to(device)
        self.optimizer = OPT(self.model.parameters())
        self.scaler = torch.amp.GradScaler(device, growth_interval=1)

    def run(self):
        for _ in range(3):
            x, y = torch.randn(4, 8, device=device), torch.randn(4, self.model.out_features, device=device)
            with torch.autocast(device, dtype=dtype):
                loss = nn.functional.mse_loss(self.model(x), y)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()
        return self.scaler.get_scale()


scales = []
for width in (2, 3):
    scales.append(Experiment(width).run())
print(json.dumps({"scales": scales}))
""", ["scales"])

shape("scaler_per_stage_nested", "AMP004", "nested-function, multi-model",
      "A nested `stage()` builds a scaler per stage (a model per stage); the outer loop runs each stage.", """
def main():
    scales = []

    def stage(width):
        model = nn.Linear(8, width).to(device)
        optimizer = OPT(model.parameters())
        scaler = torch.amp.GradScaler(device, growth_interval=1)
        for _ in range(3):
            x, y = torch.randn(4, 8, device=device), torch.randn(4, width, device=device)
            with torch.autocast(device, dtype=dtype):
                loss = nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        return scaler.get_scale()

    for width in (2, 4):
        scales.append(stage(width))
    return scales


print(json.dumps({"scales": main()}))
""", ["scales"])

shape("scaler_built_outside", "AMP004", "loop, scheduler",
      "The recipe: one scaler before the epoch loop, a scheduler per epoch.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
scaler = torch.amp.GradScaler(device, growth_interval=1)
for epoch in range(2):
    for _ in range(2):
        STEP
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    scheduler.step()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale(), "lr": scheduler.get_last_lr()[0]}))
""", ["w", "scale", "lr"])

# --- AMP006: the island's input is already float32 ------------------------------------------------------------

_ISLAND = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        with torch.autocast(device, dtype=dtype):
            h = self.proj(x)
            with torch.autocast(device, enabled=False):
BODY
        return out


model = Net().to(device)
x = torch.randn(4, 8, device=device)
out = model(x)
print(json.dumps({"out": out.float().sum().item(), "dtype": str(out.dtype)}))
"""

for _name, _kind, _doc, _island in (
    ("island_cast_then_inplace", "in-place", "`h = h.float()` first, then in-place ops write into the float32 copy.",
     "h = h.float()\nh.mul_(0.5)\ntorch.relu_(h)\nout = self.head(h)"),
    ("island_cast_then_clamp_", "in-place", "A cast, then `torch.clamp_` and `add_` on the float32 value.",
     "h = h.float()\ntorch.clamp_(h, -1.0, 1.0)\nh.add_(1.0)\nout = self.head(h)"),
    ("island_to_float32", "loop", "`.to(torch.float32)` before the island's ops, in a loop of two scalings.",
     "h = h.to(torch.float32)\nfor scale in (0.5, 2.0):\n    h = h * scale\nout = self.head(h)"),
    ("island_type_as", "alias", "`h.type_as(x)` casts to the float32 input's dtype.",
     "g = h.type_as(x)\nout = self.head(g.pow(2))"),
    ("island_cast_helper", "helper", "A module helper casts; the island uses what it returns.",
     "h = as_float(h)\nout = self.head(h.sum(dim=0, keepdim=True).expand(4, 8))"),
    ("island_dropout_inplace", "in-place", "A cast, then an in-place dropout in evaluation (no-op) and `sigmoid_`.",
     "h = h.float()\nh = nn.functional.dropout(h, p=0.5, training=False, inplace=True)\nh.sigmoid_()\n"
     "out = self.head(h)"),
):
    _body = textwrap.indent(_island, " " * 16)
    _program = _ISLAND.replace("BODY", _body)
    if "as_float" in _island:
        _program = "def as_float(t):\n    return t.float()\n\n" + _program
    shape(_name, "AMP006", _kind, _doc, _program, ["out", "dtype"], variants=("bfloat16", "float16"))

shape("island_dict_heads", "AMP006", "dict-output",
      "A dict of heads, each cast to float32 inside the island's loss.", """
class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(8, 8)
        self.cls = nn.Linear(8, 3)
        self.reg = nn.Linear(8, 1)

    def forward(self, x):
        h = self.trunk(x).relu()
        return {"logits": self.cls(h), "value": self.reg(h)}


model = Heads().to(device)
x, labels = torch.randn(4, 8, device=device), torch.randint(0, 3, (4,), device=device)
with torch.autocast(device, dtype=dtype):
    outputs = model(x)
    with torch.autocast(device, enabled=False):
        logits = outputs["logits"].float()
        loss = nn.functional.cross_entropy(logits, labels) + outputs["value"].float().pow(2).mean()
print(json.dumps({"loss": loss.item(), "dtype": str(loss.dtype)}))
""", ["loss", "dtype"], variants=("bfloat16", "float16"))

shape("island_dataclass_output", "AMP006", "dataclass",
      "A dataclass output whose field is cast to float32 inside the island.", """
@dataclass
class Output:
    features: torch.Tensor


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return Output(self.proj(x))


model, head = Net().to(device), nn.Linear(8, 2).to(device)
x = torch.randn(4, 8, device=device)
with torch.autocast(device, dtype=dtype):
    result = model(x)
    with torch.autocast(device, enabled=False):
        features = result.features.float()
        features.mul_(2.0)
        out = head(features)
print(json.dumps({"out": out.sum().item(), "dtype": str(out.dtype)}))
""", ["out", "dtype"], variants=("bfloat16", "float16"), imports="from dataclasses import dataclass\n")

shape("island_nested_function", "AMP006", "nested-function",
      "A nested function computes the float32 part; the value is cast before it is called.", """
def forward(model, head, x):
    def island(h):
        with torch.autocast(device, enabled=False):
            h.mul_(0.25)
            return head(h)

    with torch.autocast(device, dtype=dtype):
        h = model(x)
        return island(h.float())


model, head = nn.Linear(8, 8).to(device), nn.Linear(8, 2).to(device)
out = forward(model, head, torch.randn(4, 8, device=device))
print(json.dumps({"out": out.sum().item(), "dtype": str(out.dtype)}))
""", ["out", "dtype"], variants=("bfloat16", "float16"))

shape("island_float32_input", "AMP006", "loop",
      "The island reads a value computed in float32 outside autocast, and modifies it in place.", """
model = nn.Linear(8, 8).to(device)
head = nn.Linear(8, 2).to(device)
x = torch.randn(4, 8, device=device)
totals = []
for _ in range(2):
    h = model(x)
    with torch.autocast(device, dtype=dtype):
        low = model(x)
        with torch.autocast(device, enabled=False):
            h.mul_(0.5)
            out = head(h) + low.float().sum()
    totals.append(out.sum().item())
print(json.dumps({"totals": totals, "dtype": str(out.dtype)}))
""", ["totals", "dtype"], variants=("bfloat16", "float16"))

# --- AMP008 / AMP009: a direct step or backward that is right -------------------------------------------------

shape("plain_optimizer_beside_scaled", "AMP008", "multi-optimizer",
      "One model trains with the scaler; a second, unscaled one with its own plain backward and step.", """
a, b = nn.Linear(8, 2).to(device), nn.Linear(8, 2).to(device)
opt_a, opt_b = OPT(a.parameters()), OPT(b.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss_a = nn.functional.mse_loss(a(x), y)
    scaler.scale(loss_a).backward()
    scaler.step(opt_a)
    scaler.update()
    opt_a.zero_grad()
    loss_b = nn.functional.mse_loss(b(x), y)
    loss_b.backward()
    opt_b.step()
    opt_b.zero_grad()
print(json.dumps({"a": a.weight.sum().item(), "b": b.weight.sum().item()}))
""", ["a", "b"])

shape("scheduler_after_scaled_step", "AMP008", "scheduler",
      "A scheduler's `step()` after the scaled step is not an optimizer step.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.5, total_iters=2)
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    warmup.step()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "lr": warmup.get_last_lr()[0]}))
""", ["w", "lr"])

shape("ema_step_after_scaled_step", "AMP008", "class-method",
      "An EMA object's `step()` after the scaled optimizer step averages weights; it is no optimizer.", """
class EMA:
    def __init__(self, model, decay=0.5):
        self.model, self.decay = model, decay
        self.shadow = [p.detach().clone() for p in model.parameters()]

    def step(self):
        with torch.no_grad():
            for s, p in zip(self.shadow, self.model.parameters()):
                s.mul_(self.decay).add_(p, alpha=1 - self.decay)


model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
ema = EMA(model)
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ema.step()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "ema": sum(s.sum().item() for s in ema.shadow)}))
""", ["w", "ema"])

shape("closure_optimizer_no_scaler", "AMP008", "closure",
      "L-BFGS with a closure under autocast; no scaler is involved.", """
model = nn.Linear(8, 2).to(device)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3)
x, y = torch.randn(4, 8, device=device), torch.randn(4, 2, device=device)


def closure():
    optimizer.zero_grad()
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    loss.float().backward()
    return loss.float()


losses = [float(optimizer.step(closure)) for _ in range(2)]
print(json.dumps({"losses": losses, "w": model.weight.sum().item()}))
""", ["losses", "w"], variants=("bfloat16", "float16"))

shape("scaled_loss_rebound", "AMP009", "alias",
      "`loss = scaler.scale(loss)` rebinds the loss; `loss.backward()` is the scaled backward.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    loss = scaler.scale(loss)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("scaled_loss_named", "AMP009", "alias",
      "`scaled = scaler.scale(loss)`; `scaled.backward()`.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("backward_helper_given_scaled", "AMP009", "helper",
      "A `backward(loss)` helper is handed the scaled loss by its caller, which then steps the scaler.", """
def backward(loss):
    loss.backward()


model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    backward(scaler.scale(loss))
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("scaled_loss_method", "AMP009", "class-method",
      "A trainer's `_backward(loss)` is given `self.scaler.scale(loss)` by `step()`.", """
class Trainer:
    def __init__(self):
        self.model = nn.Linear(8, 2).to(device)
        self.optimizer = OPT(self.model.parameters())
        self.scaler = torch.amp.GradScaler(device)

    def _backward(self, loss):
        loss.backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()

    def step(self, x, y):
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(self.model(x), y)
        self._backward(self.scaler.scale(loss))


trainer = Trainer()
for _ in range(3):
    STEP
    trainer.step(x, y)
print(json.dumps({"w": trainer.model.weight.sum().item(), "scale": trainer.scaler.get_scale()}))
""", ["w", "scale"])

shape("scaled_tuple_of_losses", "AMP009", "multi-model",
      "Two losses scaled together with `scaler.scale([a, b])`, each scaled one backpropagated.", """
a, b = nn.Linear(8, 2).to(device), nn.Linear(8, 2).to(device)
optimizer = OPT(list(a.parameters()) + list(b.parameters()))
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss_a = nn.functional.mse_loss(a(x), y)
        loss_b = nn.functional.mse_loss(b(x), y)
    scaled_a, scaled_b = scaler.scale([loss_a, loss_b])
    scaled_a.backward()
    scaled_b.backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"a": a.weight.sum().item(), "b": b.weight.sum().item()}))
""", ["a", "b"])

# --- AMP011: each optimizer unscaled once per update ----------------------------------------------------------

shape("unscale_once_per_optimizer", "AMP011", "multi-optimizer",
      "Two optimizers, each unscaled once before its clip, one update.", """
a, b = nn.Linear(8, 8).to(device), nn.Linear(8, 2).to(device)
opt_a, opt_b = OPT(a.parameters()), OPT(b.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(b(a(x)), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt_a)
    CLIP(a.parameters())
    scaler.unscale_(opt_b)
    CLIP(b.parameters())
    scaler.step(opt_a)
    scaler.step(opt_b)
    scaler.update()
    opt_a.zero_grad()
    opt_b.zero_grad()
print(json.dumps({"a": a.weight.sum().item(), "b": b.weight.sum().item()}))
""", ["a", "b"])

shape("unscale_per_update_in_loop", "AMP011", "accumulation",
      "Micro-batches accumulate; the unscale runs once per update, inside the boundary's `if`.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
norms = []
for i in range(4):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y) / 2
    scaler.scale(loss).backward()
    if i % 2 == 1:
        scaler.unscale_(optimizer)
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
print(json.dumps({"norms": norms, "w": model.weight.sum().item()}))
""", ["norms", "w"])

shape("unscale_twice_across_updates", "AMP011", "loop",
      "Two updates per iteration (two losses, two optimizers in turn); each optimizer is unscaled once per update.", """
a, b = nn.Linear(8, 2).to(device), nn.Linear(8, 2).to(device)
opt_a, opt_b = OPT(a.parameters()), OPT(b.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    for model, opt in ((a, opt_a), (b, opt_b)):
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        CLIP(model.parameters())
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
print(json.dumps({"a": a.weight.sum().item(), "b": b.weight.sum().item()}))
""", ["a", "b"])

# --- AMP013 / AMP014: nothing unknown is "fixed" --------------------------------------------------------------

shape("device_from_parameter", "AMP014", "helper",
      "A helper is given the device type as a string and opens autocast on it.", """
def train(model, device_type, steps=3):
    optimizer = OPT(model.parameters())
    scaler = torch.amp.GradScaler(device_type)
    for _ in range(steps):
        STEP
        with torch.autocast(device_type, dtype=dtype):
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    return model.weight.sum().item()


print(json.dumps({"w": train(nn.Linear(8, 2).to(device), device)}))
""", ["w"])

shape("device_of_tensor", "AMP014", "loop",
      "Autocast opens on the device type of the input tensor (`x.device.type`).", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(x.device.type, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item()}))
""", ["w"])

shape("bfloat16_scaler_disabled", "AMP013", "loop",
      "A scaler enabled only for float16: `GradScaler(device, enabled=dtype == torch.float16)`.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

# --- fixes that change the text and must keep every value -----------------------------------------------------

shape("deprecated_cpu_autocast", "AMP007", "loop",
      "`torch.cpu.amp.autocast(dtype=...)`, the deprecated spelling; its fix must compute the same.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.cpu.amp.autocast(dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "loss_dtype": str(loss.dtype)}))
""", ["w", "loss_dtype"])

shape("deprecated_cpu_autocast_import", "AMP007", "helper",
      "`from torch.cpu.amp import autocast` used in a helper with its default dtype (bfloat16 on CPU).", """
def forward(model, x):
    with autocast():
        return model(x)


model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
for _ in range(3):
    STEP
    out = forward(model, x)
    loss = nn.functional.mse_loss(out.float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "out_dtype": str(out.dtype)}))
""", ["w", "out_dtype"], imports="from torch.cpu.amp import autocast\n")

shape("deprecated_cpu_island", "AMP007", "nested-function",
      "`torch.cpu.amp.autocast(enabled=False)` opens a float32 island inside a CPU region.", """
model, head = nn.Linear(8, 8).to(device), nn.Linear(8, 2).to(device)
x = torch.randn(4, 8, device=device)


def run():
    def island(h):
        with torch.cpu.amp.autocast(enabled=False):
            return head(h.float())

    with torch.autocast(device, dtype=dtype):
        return island(model(x))


out = run()
print(json.dumps({"out": out.sum().item(), "dtype": str(out.dtype)}))
""", ["out", "dtype"])

shape("deprecated_cuda_scaler_on_cpu", "AMP007", "class-method",
      "`torch.cuda.amp.GradScaler(enabled=False)` in a trainer on CPU: disabled either way.", """
class Trainer:
    def __init__(self):
        self.model = nn.Linear(8, 2).to(device)
        self.optimizer = OPT(self.model.parameters())
        self.scaler = torch.cuda.amp.GradScaler(enabled=False)

    def step(self, x, y):
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()


trainer = Trainer()
for _ in range(3):
    STEP
    trainer.step(x, y)
print(json.dumps({"w": trainer.model.weight.sum().item(), "enabled": trainer.scaler.is_enabled()}))
""", ["w", "enabled"])

shape("deprecated_custom_fwd", "AMP007", "class-method",
      "A custom autograd function decorated with `torch.cuda.amp.custom_fwd/custom_bwd`, run on CPU.", """
class Square(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        out = Square.apply(model(x))
    loss = nn.functional.mse_loss(out.float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item()}))
""", ["w"])

for _index, _scaler in enumerate(("torch.cpu.amp.GradScaler(2.0**10, 3.0, 0.25, 1, True)",
                                  "torch.cpu.amp.GradScaler(init_scale=2.0**9, growth_interval=1)",
                                  "torch.cpu.amp.GradScaler(2.0**10, enabled=True)")):
    shape(f"deprecated_cpu_scaler_arguments_{_index + 1}", "AMP007", "loop",
          f"`{_scaler}`: positional and keyword arguments keep their meaning behind the device.", f"""
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = {_scaler}
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({{"w": model.weight.sum().item(), "state": scaler.state_dict()}}))
""", ["w", "state"], variants=("sgd",))

for _index, _region in enumerate(("torch.cpu.amp.autocast(True, torch.float16)",
                                  "torch.cpu.amp.autocast(True, torch.bfloat16, False)",
                                  "torch.cpu.amp.autocast(enabled=True, cache_enabled=False)",
                                  "torch.cpu.amp.autocast(False)")):
    shape(f"deprecated_cpu_autocast_arguments_{_index + 1}", "AMP007", "nested-function",
          f"`with {_region}:` nested in a float16 region: the enclosing dtype must not leak in.", f"""
model = nn.Linear(8, 2).to(device)
x = torch.randn(4, 8, device=device)


def forward():
    with {_region}:
        return model(x)


with torch.autocast(device, dtype=torch.float16):
    out = forward()
print(json.dumps({{"out": out.float().sum().item(), "dtype": str(out.dtype)}}))
""", ["out", "dtype"], variants=("sgd",))

shape("dead_scaler_in_evaluate", "AMP005", "helper",
      "An `evaluate()` helper builds a GradScaler it never uses (dead code a fix may remove).", """
@torch.no_grad()
def evaluate(model, x):
    scaler = torch.amp.GradScaler(device)
    model.eval()
    with torch.autocast(device, dtype=dtype):
        return model(x).float().sum().item()


model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"eval": evaluate(model, torch.ones(2, 8, device=device)), "w": model.weight.sum().item()}))
""", ["eval", "w"])

shape("dead_scaler_in_eval_method", "AMP005", "class-method",
      "A `validate()` method builds a scaler it never uses, under `inference_mode`.", """
class Runner:
    def __init__(self):
        self.model = nn.Linear(8, 2).to(device)

    def validate(self, x):
        amp_scaler = torch.amp.GradScaler(device)
        self.model.eval()
        with torch.inference_mode():
            with torch.autocast(device, dtype=dtype):
                return self.model(x).float().mean().item()


runner = Runner()
print(json.dumps({"val": [runner.validate(torch.full((2, 8), float(i), device=device)) for i in range(3)]}))
""", ["val"])

shape("backward_in_region", "AMP001", "loop",
      "A plain model whose backward runs inside the region; moving it out keeps every gradient.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
""", ["w", "scale"])

shape("step_in_region", "AMP002", "loop, scheduler",
      "Step, update and a scheduler inside the region for a built-in optimizer; moving them out keeps values.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    with torch.autocast(device, dtype=dtype):
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "lr": scheduler.get_last_lr()[0]}))
""", ["w", "lr"])

shape("backward_and_log_in_method", "AMP001", "class-method",
      "A training step method backpropagates, steps and logs inside the region.", """
class Trainer:
    def __init__(self):
        self.model = nn.Linear(8, 2).to(device)
        self.optimizer = OPT(self.model.parameters())
        self.losses = []

    def step(self, x, y):
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.losses.append(loss.item())


trainer = Trainer()
for _ in range(3):
    STEP
    trainer.step(x, y)
print(json.dumps({"losses": trainer.losses, "w": trainer.model.weight.sum().item()}))
""", ["losses", "w"])

shape("closure_step_in_region", "AMP002", "closure",
      "`optimizer.step(closure)` inside the region: the closure is the forward pass, it must stay.", """
model = nn.Linear(8, 2).to(device)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=2)
x, y = torch.randn(4, 8, device=device), torch.randn(4, 2, device=device)


def closure():
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.float().backward()
    return loss


with torch.autocast(device, dtype=dtype):
    losses = [float(optimizer.step(closure)) for _ in range(2)]
print(json.dumps({"losses": losses, "w": model.weight.sum().item()}))
""", ["losses", "w"], variants=("bfloat16", "float16"))

shape("forward_after_backward_in_region", "AMP001", "nested-function",
      "A forward computation follows the backward in the region; it must stay in the region.", """
model = nn.Linear(8, 2).to(device)
w = torch.randn(2, 2, device=device)


def step(x, y):
    with torch.autocast(device, dtype=dtype):
        out = model(x)
        loss = nn.functional.mse_loss(out, y)
        loss.backward()
        z = out.detach() @ w
    return z


z = step(torch.randn(4, 8, device=device), torch.randn(4, 2, device=device))
print(json.dumps({"z_dtype": str(z.dtype), "z": z.float().sum().item(), "g": model.weight.grad.sum().item()}))
""", ["z_dtype", "z", "g"], variants=("bfloat16", "float16"))

shape("backward_in_named_region_then_forward", "AMP001", "alias",
      "`with torch.autocast(...) as ac:` holds the backward and a forward after it; the forward must stay low.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
sums = []
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype) as ac:
        loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        z = model(x)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    sums.append(z.float().sum().item())
print(json.dumps({"sums": sums, "z_dtype": str(z.dtype), "w": model.weight.sum().item()}))
""", ["sums", "z_dtype", "w"])

shape("step_in_region_then_forward", "AMP002", "loop",
      "Step, update and zero_grad inside the region, then a matmul that must stay in the region.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
probes = []
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        probe = x @ model.weight.t()
    probes.append(probe.float().sum().item())
print(json.dumps({"probes": probes, "probe_dtype": str(probe.dtype), "w": model.weight.sum().item()}))
""", ["probes", "probe_dtype", "w"])

shape("backward_and_log_arithmetic", "AMP001", "loop",
      "The backward, a logged `loss.item() * 2` and `model.weight * 2` (no autocast op) move out together.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = torch.amp.GradScaler(device)
history = []
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        history.append(loss.item() * 2)
        doubled = model.weight * 2
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"history": history, "doubled_dtype": str(doubled.dtype), "w": model.weight.sum().item()}))
""", ["history", "doubled_dtype", "w"])

shape("float32_autocast_on_cpu", "AMP014", "loop",
      "`torch.autocast(\"cpu\", dtype=torch.float32)` is disabled by torch; its fix says so.", """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
for _ in range(3):
    STEP
    with torch.autocast("cpu", dtype=torch.float32):
        out = model(x)
        loss = nn.functional.mse_loss(out, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "out_dtype": str(out.dtype)}))
""", ["w", "out_dtype"])


# --- more spellings of an unscale, an update or a scaled loss (a subclass, a context manager, a decorator) -------

_LOOP = """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
scaler = MAKE
SETUP
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
BODY
print(json.dumps({"w": model.weight.sum().item(), "scale": scaler.get_scale()}))
"""

for _name, _rule, _kind, _doc, _make, _setup, _body, _imports in (
    ("unscale_subclass_method", "AMP003", "class-method",
     "A GradScaler subclass whose own `prepare()` calls `self.unscale_`; the clip follows it.",
     "MyScaler(device)",
     "", "scaler.scale(loss).backward()\nscaler.prepare(optimizer)\nCLIP(model.parameters())\n"
     "scaler.step(optimizer)\nscaler.update()\noptimizer.zero_grad()", ""),
    ("unscale_context_manager", "AMP003", "helper",
     "A `@contextmanager` unscales on entry; the clip runs inside it.", "torch.amp.GradScaler(device)",
     "@contextlib.contextmanager\ndef unscaled():\n    scaler.unscale_(optimizer)\n    yield\n",
     "scaler.scale(loss).backward()\nwith unscaled():\n    CLIP(model.parameters())\nscaler.step(optimizer)\n"
     "scaler.update()\noptimizer.zero_grad()", "import contextlib\n"),
    ("unscale_staticmethod", "AMP003", "class-method",
     "A static method of a utility class unscales the scaler and optimizer it is given.",
     "torch.amp.GradScaler(device)",
     "class Util:\n    @staticmethod\n    def unscale(grad_scaler, opt):\n        grad_scaler.unscale_(opt)\n",
     "scaler.scale(loss).backward()\nUtil.unscale(scaler, optimizer)\nCLIP(model.parameters())\n"
     "scaler.step(optimizer)\nscaler.update()\noptimizer.zero_grad()", ""),
    ("unscale_through_apply", "AMP003", "bound-method",
     "`apply(scaler.unscale_, optimizer)` runs the bound method through a generic helper.",
     "torch.amp.GradScaler(device)", "def apply(fn, *args):\n    return fn(*args)\n",
     "scaler.scale(loss).backward()\napply(scaler.unscale_, optimizer)\nCLIP(model.parameters())\n"
     "scaler.step(optimizer)\nscaler.update()\noptimizer.zero_grad()", ""),
    ("update_context_manager", "AMP010", "helper",
     "A `@contextmanager` updates the scaler on exit; the step runs inside it.",
     "torch.amp.GradScaler(device, growth_interval=1)",
     "@contextlib.contextmanager\ndef stepping():\n    yield\n    scaler.update()\n",
     "scaler.scale(loss).backward()\nwith stepping():\n    scaler.step(optimizer)\noptimizer.zero_grad()",
     "import contextlib\n"),
    ("update_decorator", "AMP010", "nested-function",
     "A decorator's inner function updates after the decorated step.",
     "torch.amp.GradScaler(device, growth_interval=1)",
     "def then_update(fn):\n    def inner(*args):\n        fn(*args)\n        scaler.update()\n\n    return inner\n\n\n"
     "@then_update\ndef step(opt):\n    scaler.step(opt)\n",
     "scaler.scale(loss).backward()\nstep(optimizer)\noptimizer.zero_grad()", ""),
    ("update_in_finally", "AMP010", "loop",
     "The update runs in a `finally` after the step.", "torch.amp.GradScaler(device, growth_interval=1)", "",
     "scaler.scale(loss).backward()\ntry:\n    scaler.step(optimizer)\nfinally:\n    scaler.update()\n"
     "optimizer.zero_grad()", ""),
    ("update_list_of_hooks", "AMP010", "loop, bound-method",
     "A list of after-step hooks holds `scaler.update` and `optimizer.zero_grad`.",
     "torch.amp.GradScaler(device, growth_interval=1)", "after = [scaler.update, optimizer.zero_grad]",
     "scaler.scale(loss).backward()\nscaler.step(optimizer)\nfor hook in after:\n    hook()", ""),
    ("update_optimizer_wrapper", "AMP010", "class-method",
     "A wrapper object's `step()` steps through the scaler and updates it.",
     "torch.amp.GradScaler(device, growth_interval=1)",
     "class Wrapped:\n    def __init__(self, opt):\n        self.opt = opt\n\n    def step(self):\n"
     "        scaler.step(self.opt)\n        scaler.update()\n\n\nwrapped = Wrapped(optimizer)\n",
     "scaler.scale(loss).backward()\nwrapped.step()\noptimizer.zero_grad()", ""),
    ("scaled_by_helper", "AMP009", "helper",
     "`loss = scaled(loss)` through a helper returning `scaler.scale(loss)`; then `loss.backward()`.",
     "torch.amp.GradScaler(device)", "def scaled(value):\n    return scaler.scale(value)\n",
     "loss = scaled(loss)\nloss.backward()\nscaler.step(optimizer)\nscaler.update()\noptimizer.zero_grad()", ""),
):
    _program = _LOOP.replace("MAKE", _make).replace("SETUP", _setup).replace("BODY", textwrap.indent(_body, "    "))
    if "MyScaler" in _make:
        _program = ("class MyScaler(torch.amp.GradScaler):\n    def prepare(self, opt):\n"
                    "        self.unscale_(opt)\n\n\n" + _program)
    shape(_name, _rule, _kind, _doc, _program, ["w", "scale"], imports=_imports)

for _name, _rule, _kind, _doc, _make, _setup, _body, _imports in (
    ("update_subclass_method", "AMP010", "class-method",
     "A GradScaler subclass whose own `finish()` calls `self.update()`; the loop calls it after the step.",
     "UpdatingScaler(device, growth_interval=1)", "",
     "scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.finish()\noptimizer.zero_grad()", ""),
    ("scaled_backward_subclass_method", "AMP009", "class-method",
     "A GradScaler subclass's `backward(loss)` runs `self.scale(loss).backward()`.",
     "UpdatingScaler(device)", "",
     "scaler.backward(loss)\nscaler.step(optimizer)\nscaler.update()\noptimizer.zero_grad()", ""),
    ("step_getattr", "AMP008", "alias",
     "`getattr(scaler, \"step\")(optimizer)` steps through the scaler.", "torch.amp.GradScaler(device)", "",
     "scaler.scale(loss).backward()\ngetattr(scaler, \"step\")(optimizer)\nscaler.update()\noptimizer.zero_grad()",
     ""),
):
    _program = _LOOP.replace("MAKE", _make).replace("SETUP", _setup).replace("BODY", textwrap.indent(_body, "    "))
    _program = ("class UpdatingScaler(torch.amp.GradScaler):\n    def finish(self):\n        self.update()\n\n"
                "    def backward(self, loss):\n        self.scale(loss).backward()\n\n\n" + _program)
    shape(_name, _rule, _kind, _doc, _program, ["w", "scale"], imports=_imports)

shape("update_nested_in_method", "AMP010", "class-method, nested-function",
      "A method's nested `done()` updates the scaler after the step.", """
class Trainer:
    def __init__(self):
        self.model = nn.Linear(8, 2).to(device)
        self.optimizer = OPT(self.model.parameters())
        self.scaler = torch.amp.GradScaler(device, growth_interval=1)

    def run(self, x, y):
        def done():
            self.scaler.update()
            self.optimizer.zero_grad()

        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        done()


trainer = Trainer()
for _ in range(3):
    STEP
    trainer.run(x, y)
print(json.dumps({"w": trainer.model.weight.sum().item(), "scale": trainer.scaler.get_scale()}))
""", ["w", "scale"])

shape("update_hooks_dict_on_self", "AMP010", "class-method, dict-output",
      "A trainer's dict of lambda hooks updates the scaler after the step.", """
class Trainer:
    def __init__(self):
        self.model = nn.Linear(8, 2).to(device)
        self.optimizer = OPT(self.model.parameters())
        self.scaler = torch.amp.GradScaler(device, growth_interval=1)
        self.after = {"step": lambda: self.scaler.update()}

    def run(self, x, y):
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.after["step"]()
        self.optimizer.zero_grad()


trainer = Trainer()
for _ in range(3):
    STEP
    trainer.run(x, y)
print(json.dumps({"w": trainer.model.weight.sum().item(), "scale": trainer.scaler.get_scale()}))
""", ["w", "scale"])

shape("plain_subclass_optimizer_beside_scaled", "AMP008", "multi-optimizer",
      "A scaled optimizer of a subclass, and a plain optimizer stepped after its own unscaled backward.", """
class MyOptimizer(torch.optim.SGD):
    pass


a, b = nn.Linear(8, 2).to(device), nn.Linear(8, 2).to(device)
opt_a = MyOptimizer(a.parameters(), lr=0.1)
opt_b = OPT(b.parameters())
scaler = torch.amp.GradScaler(device)
for _ in range(3):
    STEP
    with torch.autocast(device, dtype=dtype):
        loss_a = nn.functional.mse_loss(a(x), y)
    scaler.scale(loss_a).backward()
    scaler.step(opt_a)
    scaler.update()
    opt_a.zero_grad()
    nn.functional.mse_loss(b(x), y).backward()
    opt_b.step()
    opt_b.zero_grad()
print(json.dumps({"a": a.weight.sum().item(), "b": b.weight.sum().item()}))
""", ["a", "b"])

shape("scalers_per_model_in_tuples", "AMP004", "loop, multi-model",
      "One scaler per model, iterated with its model and optimizer in a tuple of triples every step.", """
models = [nn.Linear(8, 2).to(device) for _ in range(2)]
triples = [(torch.amp.GradScaler(device, growth_interval=1), m, OPT(m.parameters())) for m in models]
for _ in range(3):
    STEP
    for grad_scaler, model, optimizer in triples:
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(model(x), y)
        grad_scaler.scale(loss).backward()
        grad_scaler.step(optimizer)
        grad_scaler.update()
        optimizer.zero_grad()
print(json.dumps({"scales": [s.get_scale() for s, _, _ in triples], "w": [m.weight.sum().item() for m in models]}))
""", ["scales", "w"])

shape("island_out_argument", "AMP006", "in-place",
      "`torch.mul(h, 2.0, out=buf)` in the island writes into a buffer of h's own dtype, then cast.", """
lin = nn.Linear(8, 8).to(device)
x = torch.randn(4, 8, device=device)
with torch.no_grad(), torch.autocast(device, dtype=dtype):
    h = lin(x)
    with torch.autocast(device, enabled=False):
        buf = torch.empty_like(h)
        torch.mul(h, 2.0, out=buf)
        total = buf.float().sum()
print(json.dumps({"total": total.item(), "buf_dtype": str(buf.dtype)}))
""", ["total", "buf_dtype"], variants=("bfloat16", "float16"))

shape("unscale_hooks_dict_on_self", "AMP003", "class-method, dict-output",
      "A trainer keeps a dict of lambda hooks; `self.hooks[\"pre_clip\"]()` unscales before the clip.", """
class Trainer:
    def __init__(self):
        self.model = nn.Linear(8, 2).to(device)
        self.optimizer = OPT(self.model.parameters())
        self.scaler = torch.amp.GradScaler(device)
        self.hooks = {"pre_clip": lambda: self.scaler.unscale_(self.optimizer)}

    def step(self, x, y):
        with torch.autocast(device, dtype=dtype):
            loss = nn.functional.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.hooks["pre_clip"]()
        CLIP(self.model.parameters())
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()


trainer = Trainer()
for _ in range(3):
    STEP
    trainer.step(x, y)
print(json.dumps({"w": trainer.model.weight.sum().item(), "scale": trainer.scaler.get_scale()}))
""", ["w", "scale"])

shape("scaler_from_cached_factory", "AMP004", "helper",
      "A factory returns one cached scaler; the loop asks it every step.", """
cache = {}


def get_scaler():
    if "scaler" not in cache:
        cache["scaler"] = torch.amp.GradScaler(device, growth_interval=1)
    return cache["scaler"]


model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
for _ in range(3):
    STEP
    scaler = get_scaler()
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
print(json.dumps({"w": model.weight.sum().item(), "scale": get_scaler().get_scale()}))
""", ["w", "scale"])

# --- a disabled scaler: scale, unscale_, step and update are no-ops or plain steps, so the program is correct -----

_DISABLED = """
model = nn.Linear(8, 2).to(device)
optimizer = OPT(model.parameters())
use_amp = False
scaler = torch.amp.GradScaler(device, enabled=use_amp)
for _ in range(3):
    STEP
BODY
print(json.dumps({"w": model.weight.sum().item(), "b": model.bias.sum().item()}))
"""

for _name, _rule, _doc, _loop in (
    ("disabled_scaler_clip", "AMP003", "A clip with no unscale_ under a disabled scaler (nothing was scaled).",
     "with torch.autocast(device, dtype=dtype):\n    loss = nn.functional.mse_loss(model(x), y)\n"
     "scaler.scale(loss).backward()\nCLIP(model.parameters())\nscaler.step(optimizer)\nscaler.update()\n"
     "optimizer.zero_grad()"),
    ("disabled_scaler_direct_step", "AMP008", "`optimizer.step()` after a disabled scaler's scaled backward.",
     "with torch.autocast(device, dtype=dtype):\n    loss = nn.functional.mse_loss(model(x), y)\n"
     "scaler.scale(loss).backward()\noptimizer.step()\noptimizer.zero_grad()"),
    ("disabled_scaler_plain_backward", "AMP009", "`loss.backward()` then a disabled scaler's step.",
     "with torch.autocast(device, dtype=dtype):\n    loss = nn.functional.mse_loss(model(x), y)\n"
     "loss.backward()\nscaler.step(optimizer)\nscaler.update()\noptimizer.zero_grad()"),
    ("disabled_scaler_no_update", "AMP010", "A disabled scaler stepped without `update()`.",
     "with torch.autocast(device, dtype=dtype):\n    loss = nn.functional.mse_loss(model(x), y)\n"
     "scaler.scale(loss).backward()\nscaler.step(optimizer)\noptimizer.zero_grad()"),
    ("disabled_scaler_unscale_twice", "AMP011", "A disabled scaler unscaled twice (no-ops).",
     "with torch.autocast(device, dtype=dtype):\n    loss = nn.functional.mse_loss(model(x), y)\n"
     "scaler.scale(loss).backward()\nscaler.unscale_(optimizer)\nCLIP(model.parameters())\n"
     "scaler.unscale_(optimizer)\nscaler.step(optimizer)\nscaler.update()\noptimizer.zero_grad()"),
    ("disabled_scaler_per_iteration", "AMP004", "A disabled scaler built every iteration (it has no state).",
     "scaler = torch.amp.GradScaler(device, enabled=use_amp)\nwith torch.autocast(device, dtype=dtype):\n"
     "    loss = nn.functional.mse_loss(model(x), y)\nscaler.scale(loss).backward()\nscaler.step(optimizer)\n"
     "scaler.update()\noptimizer.zero_grad()"),
):
    shape(_name, _rule, "loop", _doc + " The program is correct: a disabled scaler scales nothing.",
          _DISABLED.replace("BODY", textwrap.indent(_loop, "    ")), ["w", "b"])


def _dtype_of(variant: str, index: int) -> str:
    if variant in ("bfloat16", "float16"):
        return variant
    return ("float16", "bfloat16")[index % 2]


@dataclass(frozen=True)
class Written:
    name: str
    text: str
    spec: dict


def programs() -> list[Written]:
    """Every corpus program: its file name, its text and its safety spec."""
    out = []
    for item in SHAPES:
        for index, variant in enumerate(item.variants):
            low = _dtype_of(variant, index)
            name = f"{item.rule.lower()}_{item.name}_{variant}"
            body = _fill(item.body, variant).replace("STEP", STEP_DATA)
            doc = (f'"""{item.doc}\n\nSafety corpus ({item.rule}, {item.shape}; {variant}): a correct program; no safe '
                   f"fix may make it raise\nor change its output. Written by benchmarks/safety_corpus.py; the last "
                   f'line of output is JSON.\n"""\n\n')
            imports = item.imports
            prelude = PRELUDE.format(dtype=low)
            if imports:
                first = "from" if imports.startswith("from") else "import"
                prelude = (imports + prelude) if first == "import" else prelude.replace(
                    "from torch import nn\n", "from torch import nn\n" + imports)
            text = doc + prelude + "\n" + body
            spec = {"rule": item.rule, "observable": f"{item.shape}: {item.doc}", "same": list(item.same),
                    "dtypes": [low], "note": "safety corpus (benchmarks/safety_corpus.py)"}
            out.append(Written(name, text, spec))
    return out


def write(folder: Path = CORPUS) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    wanted = programs()
    names = {w.name for w in wanted}
    for stale in folder.glob("*.py"):
        if stale.stem not in names:
            stale.unlink()
            stale.with_suffix(".expect.json").unlink(missing_ok=True)
    for item in wanted:
        (folder / f"{item.name}.py").write_text(item.text, encoding="utf-8")
        (folder / f"{item.name}.expect.json").write_text(json.dumps(item.spec, indent=2) + "\n", encoding="utf-8")
    return len(wanted)


def changed(folder: Path = CORPUS) -> list[str]:
    """The programs whose text a safe fix changes."""
    from amplint import harness

    return [program.path.stem for program in harness.discover_corpus(folder)
            if harness.fix_program(program).text is not None]


def _preloaded(harness):
    """Each run forked from one interpreter that imported torch once (tests/preloaded.py, as the runtime tests
    run the harness): the harness's own code runs as it is, minus two seconds of imports per program."""
    import os
    import subprocess
    import types

    sys.path.insert(0, str(ROOT / "tests"))
    from preloaded import Preloaded

    runner = Preloaded(dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1"))
    harness.subprocess = types.SimpleNamespace(run=runner.run, TimeoutExpired=subprocess.TimeoutExpired)
    return runner


def run(folder: Path = CORPUS, workers: int = 2, fork: bool = True) -> int:
    """Run every original (each must run) and every safely fixed program that differs; print the figures."""
    from amplint import harness

    start = time.monotonic()
    corpus = harness.discover_corpus(folder)
    pairs = [("cpu", dtype) for dtype in ("bfloat16", "float16")]
    runner = _preloaded(harness) if fork else None
    try:
        rows = harness.run_rows(corpus, pairs, workers=workers, run_unchanged=True,
                                progress=harness.ProgressOnStderr())
    finally:
        if runner is not None:
            runner.close()
    fixed = sorted({row.program.path.stem for row in rows if row.fixed.text is not None})
    failed_before = [row for row in rows if row.flagged_run is not None and row.flagged_run.data is None]
    broken = [row for row in rows if not row.confirmed]
    print(f"{len(corpus)} programs, {len(rows)} runs of the originals; {len(fixed)} changed by safe fixes "
          f"({', '.join(fixed) or 'none'})")
    print(f"originals that failed: {len(failed_before)}; fixed programs that broke (raised anew or changed a value): "
          f"{len([row for row in broken if row not in failed_before])}  ({time.monotonic() - start:.0f} s)")
    for row in broken:
        print(f"  {row.program.name} ({row.dtype}): " + "; ".join(row.problems))
    return 1 if broken or failed_before else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the programs into fixtures/safe-fixes/corpus")
    parser.add_argument("--list-changed", action="store_true", help="list the programs a safe fix changes")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-fork", action="store_true",
                        help="start a fresh interpreter per run (as `python -m amplint.harness`), not a fork")
    args = parser.parse_args(argv)
    if args.write:
        print(f"{write()} programs written to {CORPUS.relative_to(ROOT)}")
        return 0
    if args.list_changed:
        print("\n".join(changed()))
        return 0
    return run(workers=args.workers, fork=not args.no_fork)


if __name__ == "__main__":
    sys.exit(main())
