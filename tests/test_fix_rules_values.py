"""Fixes users can trust, for AMP003, AMP006, AMP008 and AMP010: objects known by what the code does with them,
values known by what produced them, and safe fixes that keep a correct program's results.

Safe means: the fix cannot change what a correct program computes and cannot make a running program raise; a fix
that rests on a guess (an object's identity from its name, a value of unknown type) is unsafe or not offered.

The static tests pin each case's findings and fix applicability. The `runtime` tests run small seeded programs
on CPU torch in one subprocess each: the original, its safely fixed version (amplint's own fixer), and where it
proves a point, the fix amplint does not offer safely, to show what it would break.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from amplint.engine import lint_text
from amplint.facts import ModuleFacts
from amplint.facts.dtypes import is_floating_tensor, is_low_precision
from amplint.facts.names import is_known_optimizer_class
from amplint.fixer import fix_text
from amplint.lazy import libcst as cst
from amplint.rules import RULES_BY_CODE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def findings(text: str, code: str) -> list[tuple[int, str | None]]:
    """(line, fix applicability or None) of each finding of rule `code`."""
    return [(d.location.row, d.fix.applicability.value if d.fix else None)
            for d in lint_text(text, "t.py", [RULES_BY_CODE[code]()]).diagnostics if d.code == code]


def fixed(text: str, code: str, unsafe: bool = False) -> str:
    outcome = fix_text(text, "t.py", rules=[RULES_BY_CODE[code]()], unsafe=unsafe)
    assert outcome.error is None
    return outcome.text


# --- every case's exact findings and fix applicability ------------------------------------------------------------
EXPECTED = {
    "AMP003-clip-without-unscale/flagged/clip_generator_steps_both.py": [(19, "safe")],
    "AMP003-clip-without-unscale/flagged/clip_with_two_unknown_optimizers_nofix.py": [(15, None)],
    "AMP003-clip-without-unscale/flagged/gan_second_optimizer.py": [(23, "safe")],
    "AMP003-clip-without-unscale/flagged/nn_utils_clip_value.py": [(19, "safe")],
    "AMP003-clip-without-unscale/flagged/step_of_an_optimizer_in_a_list_nofix.py": [(13, None)],
    "AMP003-clip-without-unscale/clean/unscale_owner_of_clipped_params.py": [],
    "AMP015-island-input-of-unknown-dtype/flagged/unknown_values_unsafe_fix.py": [(13, "unsafe"), (14, "unsafe")],
    "AMP006-disabled-autocast-without-cast/flagged/known_tensor_module_safe_fix.py": [(19, "safe")],
    "AMP006-disabled-autocast-without-cast/flagged/fp32_head.py": [(18, "safe")],
    "AMP006-disabled-autocast-without-cast/clean/integer_and_bool_values.py": [],
    "AMP008-step-bypasses-scaler/clean/scheduler_from_factory.py": [],
    "AMP008-step-bypasses-scaler/flagged/update_after_loop_nofix.py": [(14, None)],
    "AMP008-step-bypasses-scaler/flagged/plain_step_after_scaled_backward.py": [(13, "safe")],
    "AMP008-step-bypasses-scaler/flagged/gan_second_optimizer.py": [(18, "unsafe")],
    "AMP010-step-without-update/flagged/update_after_loop_nofix.py": [(14, None)],
    "AMP010-step-without-update/clean/optimizers_by_index_update_after.py": [],
    "AMP010-step-without-update/clean/single_pass_then_update.py": [],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_findings_and_fix_applicability(name: str) -> None:
    code = name.split("-", 1)[0]
    assert findings((FIXTURES / name).read_text(encoding="utf-8"), code) == EXPECTED[name]


# --- optimizers: known by use, never by name ---------------------------------------------------------------------
def facts_of(text: str) -> ModuleFacts:
    return ModuleFacts(cst.parse_module(textwrap.dedent(text)))


def test_optimizer_identity_comes_from_use_not_from_names() -> None:
    facts = facts_of("""
        import torch
        from torch.optim import AdamW
        from torch.optim.lr_scheduler import StepLR
        optimizer, lr_scheduler = get_optimizer_and_scheduler(model)
        build_optimizer = make()
        opt = AdamW(model.parameters())
        sched = StepLR(opt, 1)
        solver = factory()
        solver.zero_grad()
        holder = factory()
        for group in holder.param_groups:
            group["lr"] = 0.1
        scaler = torch.amp.GradScaler("cuda")
        scaler.step(optimizer)
    """)
    frame = facts.module_frame if hasattr(facts, "module_frame") else None
    assert facts.is_optimizer("optimizer", frame) and facts.optimizer_known("optimizer", frame)
    assert not facts.is_optimizer("lr_scheduler", frame)  # the factory's name gives its results no identity
    assert not facts.is_optimizer("build_optimizer", frame)
    assert facts.optimizer_known("opt", frame)
    assert not facts.is_optimizer("sched", frame)
    assert facts.is_optimizer("solver", frame) and not facts.optimizer_known("solver", frame)
    assert facts.is_optimizer("holder", frame) and not facts.optimizer_known("holder", frame)


@pytest.mark.parametrize(("qualified", "known"), [
    ("torch.optim.AdamW", True), ("torch.optim.sgd.SGD", True), ("torch.optim.lr_scheduler.StepLR", False),
    ("torch.optim.swa_utils.AveragedModel", False), ("torch.optim.swa_utils.SWALR", False),
    ("bitsandbytes.optim.AdamW8bit", True), ("timm.optim.create_optimizer_v2", True),
    ("mylib.get_optimizer_and_scheduler", False), ("mylib.LambOptimizer", False), (None, False),
])
def test_known_optimizer_classes(qualified, known) -> None:
    assert is_known_optimizer_class(qualified) is known


def test_amp008_scheduler_step_is_not_an_optimizer_step() -> None:
    text = (FIXTURES / "AMP008-step-bypasses-scaler/clean/scheduler_from_factory.py").read_text(encoding="utf-8")
    assert fixed(text, "AMP008", unsafe=True) == text


def test_amp008_fix_on_a_name_known_only_by_zero_grad_is_unsafe() -> None:
    text = textwrap.dedent("""
        import torch
        def train(model, loader, opt, scaler):
            for x in loader:
                opt.zero_grad()
                with torch.autocast("cuda"):
                    loss = model(x)
                scaler.scale(loss).backward()
                opt.step()
                scaler.update()
    """)
    assert findings(text, "AMP008") == [(9, "unsafe")]
    assert fixed(text, "AMP008") == text
    assert "scaler.step(opt)" in fixed(text, "AMP008", unsafe=True)


def test_amp008_a_name_stepped_by_the_scaler_in_another_function_is_not_known_here() -> None:
    text = textwrap.dedent("""
        import torch
        def warmup(model, optimizer, scaler, loss):
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        def train(model, loader, optimizer, scaler):
            for x in loader:
                with torch.autocast("cuda"):
                    loss = model(x)
                scaler.scale(loss).backward()
                optimizer.step()
                scaler.update()
    """)
    assert findings(text, "AMP008") == [(13, "unsafe")]


def test_amp008_adds_no_update_where_another_function_updates_the_scaler() -> None:
    """A second update() per iteration raises `No inf checks were recorded prior to update.`"""
    text = textwrap.dedent("""
        import torch
        class Trainer:
            def __init__(self, model):
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                self.scaler = torch.amp.GradScaler("cuda")

            def backward_and_step(self, loss):
                self.scaler.scale(loss).backward()
                self.optimizer.step()

            def end_iteration(self):
                self.scaler.update()
    """)
    assert findings(text, "AMP008") == [(10, None)]


# --- AMP003: the unscale_ of the optimizer that owns the clipped parameters ----------------------------------------
GAN_STEPS = """
    import torch
    def train(gen, disc, loader, scaler):
        opt_g = torch.optim.Adam({g}, lr=1e-4)
        opt_d = torch.optim.Adam({d}, lr=1e-4)
        for x in loader:
            with torch.autocast("cuda"):
                loss = disc(gen(x)).mean()
            scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_({clip}, 1.0)
            scaler.step(opt_d)
            scaler.step(opt_g)
            scaler.update()
"""


@pytest.mark.parametrize(("g", "d", "clip", "unscaled"), [
    ("gen.parameters()", "disc.parameters()", "gen.parameters()", "opt_g"),
    ("gen.parameters()", "disc.parameters()", "disc.parameters()", "opt_d"),
    ("gen.parameters()", "disc.parameters()", "gen.body.parameters()", "opt_g"),
    ("list(gen.parameters())", "[*disc.parameters()]", "gen.parameters()", "opt_g"),
    ("[{'params': gen.parameters()}]", "disc.parameters()", "gen.parameters()", "opt_g"),
    ("params_g", "params_d", "gen.parameters()", None),  # unknown construction arguments: no fix
    ("gen.parameters()", "disc.parameters()", "everything", None),  # unknown clipped parameters: no fix
])
def test_amp003_unscales_the_owner_of_the_clipped_parameters(g, d, clip, unscaled) -> None:
    text = textwrap.dedent(GAN_STEPS.format(g=g, d=d, clip=clip))
    result = fixed(text, "AMP003")
    if unscaled is None:
        assert findings(text, "AMP003") == [(10, None)] and result == text
    else:
        assert findings(text, "AMP003") == [(10, "safe")]
        assert f"scaler.unscale_({unscaled})\n    torch.nn.utils.clip_grad_norm_" in result.replace("        ", "    ")


def test_amp003_single_optimizer_built_on_other_parameters_gets_no_fix() -> None:
    text = textwrap.dedent("""
        import torch
        def train(gen, disc, loader, scaler):
            opt_d = torch.optim.Adam(disc.parameters())
            for x in loader:
                with torch.autocast("cuda"):
                    loss = disc(gen(x)).mean()
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(gen.parameters(), 1.0)
                scaler.step(opt_d)
                scaler.update()
    """)
    assert findings(text, "AMP003") == [(9, None)]


def test_amp003_tied_optimizer_stepped_less_often_than_the_clip_gets_no_fix() -> None:
    """The owner's step must follow every clip: a second unscale_ before update() would raise."""
    text = textwrap.dedent("""
        import torch
        def train(gen, disc, loader, scaler):
            opt_g = torch.optim.Adam(gen.parameters())
            opt_d = torch.optim.Adam(disc.parameters())
            for i, x in enumerate(loader):
                with torch.autocast("cuda"):
                    loss = disc(gen(x)).mean()
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(gen.parameters(), 1.0)
                scaler.step(opt_d)
                if i % 2:
                    scaler.step(opt_g)
                scaler.update()
    """)
    assert findings(text, "AMP003") == [(10, None)]


def test_amp003_no_second_unscale_before_update() -> None:
    """An unscale_ of the optimizer already ran since the last update(): inserting another would raise."""
    text = textwrap.dedent("""
        import torch
        def train(model, loader, scaler):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                with torch.autocast("cuda"):
                    loss = model(x).mean()
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.scale(loss * 0.5).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(opt)
                scaler.update()
    """)
    assert findings(text, "AMP003") == [(12, None)]


# --- AMP006: integer/bool values are not low precision; .float() safe only on floating tensors -------------------
def expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


@pytest.mark.parametrize("value", [
    "h.long()", "h.int()", "h.bool()", "h.gt(0)", "h > 0", "h.argmax(-1)", "len(h)", "h.shape[0]", "h.size(0)",
    "h.isnan()", "torch.argmax(h)", "h.to(torch.long)", "h.numel()",
])
def test_integer_and_bool_values_are_not_low_precision(value: str) -> None:
    assert not is_low_precision(expr(value), {"h"})
    assert not is_floating_tensor(expr(value), {"h"})


@pytest.mark.parametrize(("value", "floating"), [
    ("h.view(2, -1)", True), ("h * mask", True), ("-h", True), ("h[:, 0]", True), ("h.T", True),
    ("torch.mm(h, w)", True), ("F.linear(x, w)", True), ("torch.mm(x, w)", False),
    ("model(x)", False), ("helper(h)", False), ("h.chunk(2)", False), ("h.long()", False), ("x", False),
    ("h.max(-1)", False), ("{'a': h}", False), ("h.shape", False),
])
def test_floating_tensor_is_known_or_not_assumed(value: str, floating: bool) -> None:
    assert is_floating_tensor(expr(value), {"h"}) is floating


def test_amp006_integer_results_inside_the_disabled_region_are_not_uses() -> None:
    text = textwrap.dedent("""
        import torch
        def f(model, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = model(x)
                with torch.autocast("cpu", enabled=False):
                    ids = h.long()
                    top = torch.argmax(h, -1)
                    mask = h.gt(0)
            return ids, top, mask
    """)
    assert findings(text, "AMP006") == []


def test_island_inputs_of_unknown_dtype_get_no_safe_fix() -> None:
    name = "AMP015-island-input-of-unknown-dtype/flagged/unknown_values_unsafe_fix.py"
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert fixed(text, "AMP015") == text and fixed(text, "AMP006") == text


# --- runtime: the fixed program against the original, on CPU torch ------------------------------------------------
DRIVER = r"""
import json, sys, traceback
programs = json.loads(sys.stdin.read())
out = {}
for name, source in programs.items():
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(source, name, "exec"), namespace)
        out[name] = {"result": namespace.get("result"), "error": None}
    except Exception as error:
        out[name] = {"result": namespace.get("result"), "error": f"{type(error).__name__}: {error}"}
print(json.dumps(out))
"""


def run_programs(programs: dict[str, str]) -> dict[str, dict]:
    """Run each program (one process, torch imported once); each leaves a JSON-able `result`."""
    completed = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(programs), capture_output=True,
                               text=True, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


PRELUDE = """
import torch
from torch import nn
torch.manual_seed(0)
torch.set_num_threads(1)
"""


def program(body: str) -> str:
    return PRELUDE + textwrap.dedent(body)


SCHEDULER_LOOP = program("""
    def get_optimizer_and_scheduler(model):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)

    def train(model, batches):
        optimizer, lr_scheduler = get_optimizer_and_scheduler(model)
        grad_scaler = torch.amp.GradScaler("cpu")
        for x, y in batches:
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(model(x).float(), y)
            grad_scaler.scale(loss).backward()
            grad_scaler.step(optimizer)
            grad_scaler.update()
            lr_scheduler.step()
        return optimizer.param_groups[0]["lr"]

    model = nn.Linear(4, 2)
    batches = [(torch.randn(8, 4), torch.randn(8, 2)) for _ in range(3)]
    lr = train(model, batches)
    result = {"lr": lr, "weight": model.weight.sum().item()}
""")

UPDATE_AFTER_LOOP = program("""
    def train(model, batches):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        for x, y in batches:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = (model(x).float() - y).pow(2).mean()
            scaler.scale(loss).backward()
            optimizer.step()
            optimizer.zero_grad()
        scaler.update()

    model = nn.Linear(4, 2)
    result = {}
    train(model, [(torch.randn(8, 4), torch.randn(8, 2)) for _ in range(3)])
""")

STEP_EVERY_ITERATION_UPDATE_AFTER = program("""
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    result = {"steps": 0}
    for x, y in [(torch.randn(8, 4), torch.randn(8, 2)) for _ in range(3)]:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = (model(x).float() - y).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        optimizer.zero_grad()
        result["steps"] += 1
    scaler.update()
""")

VALUES = program("""
    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 8)

        def forward(self, x):
            h = self.body(x)
            return {"logits": h, "aux": h.mean(-1)}

    def criterion(out, y):
        return nn.functional.mse_loss(out["logits"].float(), y) + out["aux"].float().pow(2).mean()

    def count_active(out):
        return int((out["logits"] > 0).sum().item() % 3) + 1

    model, emb = Heads(), nn.Embedding(16, 4)
    x, y, base = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
        k = count_active(out)
        h = model.body(x)
        ids = h.long().clamp(0, 15)
        mask = h.gt(0)
        first = ids[:, 0]
        with torch.autocast("cpu", enabled=False):
            loss = criterion(out, y)
            best = torch.topk(y, k)
            e = emb(ids)
            picked = torch.where(mask, base, torch.zeros_like(base))
            row = emb(first)
    result = {"loss": loss.item(), "best": best.values.sum().item(), "e": e.sum().item(),
              "picked": picked.sum().item(), "row": row.sum().item()}
""")

KNOWN_MODULE = program("""
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
            self.head = nn.Linear(32, 4)

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.body(x)
                z = h.view(h.size(0), -1)
                with torch.autocast("cpu", enabled=False):
                    out = self.head(z)
            return out

    out = Model()(torch.randn(8, 16))
    result = {"dtype": str(out.dtype), "finite": bool(torch.isfinite(out).all())}
""")

CLIP_GENERATOR = program("""
    import copy
    gen, disc = nn.Linear(4, 4), nn.Linear(4, 1)
    ref_gen, ref_disc = copy.deepcopy(gen), copy.deepcopy(disc)
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x = torch.randn(16, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = disc(gen(x)).float().pow(2).mean()
    scaler.scale(loss).backward()
    norm = torch.nn.utils.clip_grad_norm_(gen.parameters(), 1e9)
    scaler.step(opt_d)
    scaler.step(opt_g)
    scaler.update()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference = ref_disc(ref_gen(x)).float().pow(2).mean()
    reference.backward()
    true_norm = torch.nn.utils.clip_grad_norm_(ref_gen.parameters(), 1e9)
    result = {"ratio": norm.item() / true_norm.item()}
""")


@pytest.mark.runtime
def test_amp008_scheduler_and_update_after_loop_keep_running_programs() -> None:
    scheduler_fixed = fixed(SCHEDULER_LOOP, "AMP008")
    update_fixed = fixed(UPDATE_AFTER_LOOP, "AMP008", unsafe=True)
    assert scheduler_fixed == SCHEDULER_LOOP and update_fixed == UPDATE_AFTER_LOOP  # nothing offered
    # What the fixes once did: the scheduler handed to scaler.step, the step replaced without a per-step update.
    old_scheduler = SCHEDULER_LOOP.replace("lr_scheduler.step()", "grad_scaler.step(lr_scheduler)")
    old_update = UPDATE_AFTER_LOOP.replace("optimizer.step()", "scaler.step(optimizer)")
    runs = run_programs({"scheduler": SCHEDULER_LOOP, "old_scheduler": old_scheduler, "old_update": old_update})
    assert runs["scheduler"]["error"] is None and runs["scheduler"]["result"]["lr"] == pytest.approx(0.0125)
    assert "param_groups" in runs["old_scheduler"]["error"]
    assert "step() has already been called since the last update()" in runs["old_update"]["error"]


@pytest.mark.runtime
def test_amp010_step_every_iteration_with_update_after_the_loop_raises() -> None:
    assert findings(STEP_EVERY_ITERATION_UPDATE_AFTER, "AMP010") == [(15, None)]
    run = run_programs({"loop": STEP_EVERY_ITERATION_UPDATE_AFTER})["loop"]
    assert run["result"]["steps"] == 1
    assert "step() has already been called since the last update()" in run["error"]


@pytest.mark.runtime
def test_amp006_safe_fixes_keep_results_and_add_no_exception() -> None:
    values_fixed = fixed(VALUES, "AMP006")
    module_fixed = fixed(KNOWN_MODULE, "AMP006")
    assert values_fixed == VALUES  # dict, int, index, mask: no safe fix
    # Nor an unsafe one: the dict goes whole to a criterion that casts its items, `k` is a Python int
    # (`int(...)` in `count_active`), the indices and the mask are integer and bool, `base` is float32.
    # `.float()` on the int would raise AttributeError, which is why a value not known to be a tensor gets no
    # safe fix.
    assert fixed(VALUES, "AMP006", unsafe=True) == VALUES
    assert module_fixed != KNOWN_MODULE and "self.head(z.float())" in module_fixed
    runs = run_programs({"values": VALUES, "module": KNOWN_MODULE, "module_fixed": module_fixed})
    assert runs["values"]["error"] is None
    assert "must have the same dtype" in runs["module"]["error"]  # the harm
    assert runs["module_fixed"] == {"result": {"dtype": "torch.float32", "finite": True}, "error": None}


@pytest.mark.runtime
def test_amp003_unscales_the_clipped_parameters_optimizer() -> None:
    safe = fixed(CLIP_GENERATOR, "AMP003")
    assert "scaler.unscale_(opt_g)\nnorm = torch.nn.utils.clip_grad_norm_" in safe
    wrong = CLIP_GENERATOR.replace("norm = torch.nn", "scaler.unscale_(opt_d)\nnorm = torch.nn", 1)
    runs = run_programs({"original": CLIP_GENERATOR, "fixed": safe, "wrong_optimizer": wrong})
    assert all(run["error"] is None for run in runs.values()), runs
    assert runs["original"]["result"]["ratio"] == pytest.approx(1024, rel=0.05)
    assert runs["wrong_optimizer"]["result"]["ratio"] == pytest.approx(1024, rel=0.05)  # the fix once offered
    assert runs["fixed"]["result"]["ratio"] == pytest.approx(1.0, rel=0.05)
