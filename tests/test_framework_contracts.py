"""Framework contracts as data (amplint/vocabulary.py, "Frameworks"), read statically by AMP003
(amplint/facts/frameworks.py): what the code shows of a framework's precision, across modules and in the cache, and,
where Lightning or accelerate is installed, that the contract the vocabulary states is what the framework does;
and Lightning's manual optimization under the Trainer's autocast, read by AMP001 (`manual_backward_under_autocast`;
its runtime measure is tests/test_watch_frameworks.py's).

The flagged and clean programs of each contract are fixtures (fixtures/AMP003-clip-without-unscale/: lightning_*,
accelerate_*, hf_trainer_*, projects/lightning_hook_module*, projects/hf_trainer_module*)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import vocabulary as vocab
from amplint.cli import main
from amplint.engine import lint_text
from amplint.rules import RULES_BY_CODE

REPO = Path(__file__).resolve().parents[1]
AMP003 = REPO / "fixtures" / "AMP003-clip-without-unscale"


def rows(text: str) -> list[int]:
    result = lint_text(textwrap.dedent(text), "t.py", [RULES_BY_CODE["AMP003"]()])
    return [d.location.row for d in result.diagnostics if d.code == "AMP003"]


@pytest.mark.parametrize("framework, keywords, scales", [
    (vocab.LIGHTNING, {"precision": "16-mixed"}, True),
    (vocab.LIGHTNING, {"precision": 16}, True),  # the legacy spelling of 16-mixed
    (vocab.LIGHTNING, {"precision": "16"}, True),
    (vocab.LIGHTNING, {"precision": "bf16-mixed"}, False),
    (vocab.LIGHTNING, {"precision": "16-true"}, False),  # half parameters, no scaler
    (vocab.LIGHTNING, {"precision": "16-mixed", "accelerator": "cpu"}, False),  # becomes bf16-mixed (measured)
    (vocab.LIGHTNING, {}, False),  # 32-true by default
    (vocab.ACCELERATE, {"mixed_precision": "fp16"}, True),
    (vocab.ACCELERATE, {"mixed_precision": "fp16", "cpu": True}, False),  # trains float32 (measured)
    (vocab.ACCELERATE, {"mixed_precision": "bf16"}, False),
    (vocab.ACCELERATE, {}, False),  # read from the launch configuration or the environment: not shown
    (vocab.HF_TRAINER, {"fp16": True}, True),
    (vocab.HF_TRAINER, {"fp16": True, "use_cpu": True}, False),
    (vocab.HF_TRAINER, {"bf16": True}, False),
])
def test_the_contracts_are_data(framework, keywords, scales):
    assert framework.scales(keywords) is scales


def test_no_framework_is_imported_by_the_linter():
    program = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from amplint.engine import lint_text
        from amplint.rules import ALL_RULES
        for path in sorted(Path({str(AMP003)!r}).glob("*/*.py")):
            if not path.name.startswith(("lightning", "accelerate", "hf_")):
                continue
            lint_text(path.read_text(), str(path), [rule() for rule in ALL_RULES])
        print(sorted(m for m in sys.modules if m.split(".")[0] in
                     ("lightning", "pytorch_lightning", "lightning_fabric", "accelerate", "transformers")))
    """)
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


LIT = """
import lightning as L
import torch


class Lit(L.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.net(batch).mean()

    def on_after_backward(self):
        torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
{main}
"""


@pytest.mark.parametrize("main_code, found", [
    ("trainer = L.Trainer(precision='16-mixed')", [11]),
    ("trainer = L.Trainer(precision='16-mixed', accelerator='cpu')", []),
    ("a = L.Trainer(precision='16-mixed')\nb = L.Trainer(precision='bf16-mixed')", []),  # which one trains it?
    ("trainer = L.Trainer(precision=PRECISION)", []),  # not shown
    ("trainer = L.Trainer(precision='16-mixed' if FP16 else 'bf16-mixed')", []),
    ("", []),  # no Trainer here: nothing is shown
])
def test_lightning_precision_as_the_module_shows_it(main_code, found):
    assert rows(LIT.format(main=main_code)) == found


def test_a_clip_outside_the_hook_or_outside_a_lightning_module_is_not_this_contract():
    text = LIT.format(main="trainer = L.Trainer(precision='16-mixed')")
    assert rows(text.replace("def on_after_backward", "def on_before_optimizer_step(self, optimizer):\n        pass\n\n"
                                                       "    def after_backward")) == []
    assert rows(text.replace("(L.LightningModule)", "(torch.nn.Module)")) == []


ACC = """
import torch
from accelerate import Accelerator


def train(model, loader, optimizer{param}):
    {build}
    for batch in loader:
        accelerator.backward(model(batch))
        {between}
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
"""


@pytest.mark.parametrize("param, build, between, found", [
    ("", "accelerator = Accelerator(mixed_precision='fp16')", "pass", [11]),
    ("", "accelerator = Accelerator(mixed_precision='fp16')", "accelerator.unscale_gradients()", []),
    ("", "accelerator = Accelerator(mixed_precision='fp16', cpu=True)", "pass", []),
    ("", "accelerator = Accelerator(mixed_precision='no')", "pass", []),
    ("", "accelerator = make_accelerator()", "pass", []),  # not known to be an Accelerator
    (", accelerator=None", "pass", "pass", []),  # handed in: its precision is not shown
])
def test_accelerate_precision_as_the_function_shows_it(param, build, between, found):
    assert rows(ACC.format(param=param, build=build, between=between)) == found


def test_the_precision_shown_in_an_importing_module_counts_and_its_changes_reach_the_cache(tmp_path):
    """The LightningModule's file is reported from the Trainer built in the script importing it; the cached result
    depends on that script's text: set to bf16 there, the finding goes; back to 16-mixed, it returns."""
    project = tmp_path / "project"
    project.mkdir()
    case = AMP003 / "projects" / "lightning_hook_module"
    for name in ("model.py", "train.py"):
        (project / name).write_text((case / name).read_text())
    cache = tmp_path / "cache"

    def found() -> list[tuple[str, int]]:
        result = CliRunner().invoke(main, ["check", "--select", "AMP003", "--cache-dir", str(cache),
                                           "--output-format", "json", str(project)], catch_exceptions=False)
        return sorted((Path(d["filename"]).name, d["location"]["row"]) for d in json.loads(result.output))

    assert found() == [("model.py", 17)]
    script = project / "train.py"
    script.write_text(script.read_text().replace('"16-mixed"', '"bf16-mixed"'))
    assert found() == []
    script.write_text(script.read_text().replace('"bf16-mixed"', '"16-mixed"'))
    assert found() == [("model.py", 17)]


# Lightning manual optimization under the Trainer's autocast (AMP001): reported only where an fp32 island shows
# the harm and the code shows a precision that autocasts.
MANUAL = """
import lightning as L
import torch


class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 8)
        {switch}

    {island}
    def head(self, x):
        return self.net(x.float())

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self.head(batch).pow(2).mean()
        {backward}
        opt.step()


trainer = L.Trainer({trainer})
"""
SWITCH = "self.automatic_optimization = False"
ISLAND = "@torch.autocast('cuda', enabled=False)"
BACKWARD = "self.manual_backward(loss)"
WRAPPED = "with torch.autocast(self.device.type, enabled=False):\n            self.manual_backward(loss)"


def manual_rows(switch=SWITCH, island=ISLAND, backward=BACKWARD, trainer="precision='bf16-mixed'") -> list:
    text = textwrap.dedent(MANUAL.format(switch=switch, island=island, backward=backward, trainer=trainer))
    result = lint_text(text, "t.py", [RULES_BY_CODE["AMP001"]()])
    return [(d.location.row, d.message, d.help, d.fix, d.notes) for d in result.diagnostics if d.code == "AMP001"]


@pytest.mark.parametrize("keywords, autocasts", [
    ({"precision": "bf16-mixed"}, True),
    ({"precision": "16-mixed"}, True),
    ({"precision": "16-mixed", "accelerator": "cpu"}, True),  # bf16-mixed on the CPU: autocast all the same
    ({"precision": 16}, True),
    ({"precision": "bf16"}, True),
    ({"precision": "bf16-true"}, False),  # a bfloat16 model, no autocast
    ({"precision": "32-true"}, False),
    ({}, False),
])
def test_the_precisions_with_which_lightning_autocasts_are_data(keywords, autocasts):
    assert vocab.LIGHTNING.autocasts(keywords, vocab.LIGHTNING_AUTOCASTS) is autocasts


def test_manual_backward_under_the_trainers_autocast_through_an_island_is_reported_at_the_call():
    [(row, message, advice, fix, notes)] = manual_rows()
    assert row == 19 and fix is None  # no fix: where the optimizer steps end is the user's to say
    assert message == ("`self.manual_backward(loss)` runs under Lightning's bf16-mixed autocast, through the fp32 "
                       "island at line 13")
    [note] = notes
    assert (note.filename, note.location.row, note.location.column) == (None, 13, 5)
    assert "`@torch.autocast('cuda', enabled=False)`" in note.message
    assert "`L.Trainer(...)` (line 23)" in advice and "enabled=False" in advice and "manual_backward" in advice
    [(row, message, *_)] = manual_rows(trainer="precision=16")
    assert row == 19 and "Lightning's 16-mixed autocast" in message
    island_in_step = "self.manual_backward(loss)".join(("with torch.autocast('cuda', enabled=False):\n"
                                                        "            loss = loss.float()\n        ", ""))
    assert [row for row, *_ in manual_rows(island="", backward=island_in_step)] == [21]


@pytest.mark.parametrize("change", [
    {"island": ""},  # no fp32 island: the harm is not shown
    {"switch": "pass"},  # automatic optimization: the Trainer's backward runs outside its autocast
    {"switch": "self.automatic_optimization = True"},
    {"trainer": "precision=PRECISION"},  # not shown
    {"trainer": "precision='bf16-true'"},  # no autocast
    {"trainer": ""},
    {"backward": WRAPPED},  # the fix
])
def test_manual_backward_is_silent_without_the_shown_harm_or_with_the_fix(change):
    assert manual_rows(**change) == []


def test_an_island_in_a_module_the_lightning_module_calls_counts_and_only_when_called(tmp_path):
    """The island through the project index (projects/lightning_manual_island_module): once the LightningModule
    no longer calls the function that computes it, nothing is reported."""
    case = REPO / "fixtures" / "AMP001-backward-in-autocast" / "projects" / "lightning_manual_island_module"
    for path in case.glob("*.py"):
        (tmp_path / path.name).write_text(path.read_text())

    def found() -> list[tuple[str, int]]:
        result = CliRunner().invoke(main, ["check", "--select", "AMP001", "--no-cache", "--output-format", "json",
                                           str(tmp_path)], catch_exceptions=False)
        return sorted((Path(d["filename"]).name, d["location"]["row"]) for d in json.loads(result.output))

    assert found() == [("model.py", 21)]
    model = tmp_path / "model.py"
    model.write_text(model.read_text().replace("fp32_norm(self.norm, self.body(batch))", "self.norm(self.body(batch))"))
    assert found() == []


def test_an_island_in_the_forward_of_a_submodule_of_another_module_counts(tmp_path):
    (tmp_path / "layers.py").write_text(textwrap.dedent("""
        import torch


        class Fp32Head(torch.nn.Module):
            def forward(self, x):
                with torch.autocast("cuda", enabled=False):
                    return x.float() @ x.float().T
    """))
    (tmp_path / "model.py").write_text(textwrap.dedent("""
        import lightning as L

        from layers import Fp32Head


        class Lit(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.head = Fp32Head()
                self.automatic_optimization = False

            def training_step(self, batch, batch_idx):
                self.manual_backward(self.head(batch).mean())


        trainer = L.Trainer(precision="bf16-mixed")
    """))
    result = CliRunner().invoke(main, ["check", "--select", "AMP001", "--no-cache", "--output-format", "json",
                                       str(tmp_path)], catch_exceptions=False)
    [found] = json.loads(result.output)
    assert found["location"]["row"] == 14 and found["message"].endswith("fp32 island at layers.py:7")


# The contracts against the installed frameworks (each skipped where its framework is absent): float16 loss
# scaling on the CPU, by a CPU GradScaler handed to the framework where it would build its own on CUDA.
def test_lightning_unscales_after_on_after_backward_and_before_on_before_optimizer_step():
    L = pytest.importorskip("lightning")
    from lightning.pytorch.plugins.precision import MixedPrecision

    torch = pytest.importorskip("torch")
    norms = {}

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(8, 4)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.net(batch[0]).float(), batch[1])

        def _norm(self):
            return torch.stack([p.grad.norm() for p in self.parameters()]).norm().item()

        def on_after_backward(self):
            norms[vocab.LIGHTNING_SCALED_HOOK] = self._norm()

        def on_before_optimizer_step(self, optimizer):
            norms[vocab.LIGHTNING_UNSCALED_HOOK] = self._norm()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 4))
    scaler = torch.amp.GradScaler("cpu")
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)])
    trainer.fit(Lit(), torch.utils.data.DataLoader(data, batch_size=16))
    ratio = norms[vocab.LIGHTNING_SCALED_HOOK] / norms[vocab.LIGHTNING_UNSCALED_HOOK]
    assert ratio == pytest.approx(65536.0, rel=1e-3)

    # Manual optimization: the unscale is inside `opt.step()`; `self.clip_gradients` unscales nothing.
    class Manual(Lit):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            self.manual_backward(super().training_step(batch, batch_idx))
            before = self._norm()
            self.clip_gradients(opt, gradient_clip_val=1e9, gradient_clip_algorithm="norm")  # clips nothing
            norms[vocab.MANUAL_BACKWARD] = (before, self._norm())
            opt.step()

    norms.clear()
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        plugins=[MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))])
    trainer.fit(Manual(), torch.utils.data.DataLoader(data, batch_size=16))
    before, after = norms[vocab.MANUAL_BACKWARD]
    assert before == after  # `clip_gradients` did not unscale
    assert before / norms[vocab.LIGHTNING_UNSCALED_HOOK] == pytest.approx(65536.0, rel=1e-3)


def test_accelerate_backward_scales_and_its_clip_unscales_first():
    pytest.importorskip("accelerate")
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # one state per process: this test's own
    try:
        torch.manual_seed(0)
        accelerator = Accelerator(mixed_precision="fp16", cpu=True)
        accelerator.scaler = torch.amp.GradScaler("cpu")  # what it builds on CUDA
        accelerator.native_amp = True
        net = torch.nn.Linear(8, 4)
        model, _ = accelerator.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1))
        accelerator.backward(model(torch.randn(16, 8)).float().pow(2).mean())
        seen = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()  # clips nothing
        true = accelerator.clip_grad_norm_(model.parameters(), float("inf")).item()
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    assert seen / true == pytest.approx(65536.0, rel=1e-3)
