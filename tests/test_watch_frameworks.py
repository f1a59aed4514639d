"""The run-time watch inside the real frameworks, Lightning, accelerate and the HF Trainer: a few CPU steps each,
the framework's own code opening autocast, scaling and stepping. Each finding is the user's line (a
`training_step`, a loop, a model's forward), the framework's frame its context (`via`). A test skips where its
framework is not installed (the `test` extra brings them); the CUDA variant skips without a GPU."""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import pytest

from amplint.runtime import watch

HERE = __file__


def _torch():
    return pytest.importorskip("torch")


def _lightning():
    _torch()
    return pytest.importorskip("lightning.pytorch")


def _accelerate():
    _torch()
    return pytest.importorskip("accelerate")


def _transformers():
    torch = _torch()
    transformers = pytest.importorskip("transformers")
    if not transformers.is_torch_available():  # (transformers 5 needs torch >= 2.6)
        pytest.skip(f"transformers {transformers.__version__} does not run with torch {torch.__version__}")
    return transformers


def _line_of(marker: str) -> int:
    for number, line in enumerate(Path(HERE).read_text().splitlines(), 1):
        if marker in line and "_line_of" not in line:
            return number
    raise AssertionError(marker)


def _sites(report) -> list[tuple[str, int]]:
    assert all(finding.filename == HERE for finding in report.findings), report.findings
    return [(finding.code, finding.line) for finding in report.findings]


def _watched(run):
    """Run under the watch, the framework's own warnings (workers, logging) and the findings' warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with watch() as report:
            run()
    return report


# --- Lightning ------------------------------------------------------------------------------------------------

@functools.cache
def _modules():
    """The LightningModules of the tests (classes built at first use, Lightning being imported then)."""
    torch, L = _torch(), _lightning()

    class Island(torch.nn.Module):
        """An fp32 island of the model's own, its input cast (correct)."""

        def __init__(self, cast: bool = True):
            super().__init__()
            self.cast = cast
            self.head = torch.nn.Linear(8, 1)

        def forward(self, x):
            with torch.autocast("cpu", enabled=False):
                if self.cast:
                    x = x.float()
                return torch.tanh(x).sum(dim=-1, keepdim=True) + self.head(x.float())  # island-op

    class Manual(L.LightningModule):
        """Manual optimization: the backward and the step in training_step, under the trainer's autocast."""

        def __init__(self, disabled: bool):
            super().__init__()
            self.automatic_optimization = False
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 8), Island())
            self.disabled = disabled

        def training_step(self, batch, batch_idx):
            optimizer = self.optimizers()
            loss = self.net(batch).pow(2).mean()
            optimizer.zero_grad()
            if self.disabled:  # the fix: autocast off around the backward and the step
                with torch.autocast("cpu", enabled=False):
                    self.manual_backward(loss)
                    optimizer.step()
            else:
                self.manual_backward(loss)  # manual-backward
                optimizer.step()  # manual-step
            self.log("loss", loss)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Automatic(L.LightningModule):
        """Automatic optimization: training_step returns the loss; the trainer runs backward and step (and, with a
        scaler, unscales after on_after_backward, before on_before_optimizer_step)."""

        def __init__(self, cast: bool = True, clip_in: str | None = None):
            super().__init__()
            last = Island(cast) if clip_in is None else torch.nn.Linear(8, 1)
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 8), last)
            self.clip_in = clip_in
            self.norms = []

        def training_step(self, batch, batch_idx):
            loss = self.net(batch).pow(2).mean()
            self.log("loss", loss)
            return loss

        def on_after_backward(self):
            if self.clip_in == "on_after_backward":
                self.norms.append(float(torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)))  # clip-scaled

        def on_before_optimizer_step(self, optimizer):
            if self.clip_in == "on_before_optimizer_step":
                self.norms.append(float(torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Manual, Automatic


def _fit(tmp_path, module, **options):
    torch, L = _torch(), _lightning()
    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.randn(8, 8), batch_size=4)
    trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path, **options)
    return _watched(lambda: trainer.fit(module, data))


@pytest.mark.parametrize("disabled", [False, True], ids=["flagged", "fixed"])
def test_lightning_manual_optimization_runs_backward_and_step_under_the_trainers_autocast(tmp_path, disabled):
    """`precision="bf16-mixed"`: training_step runs inside the trainer's region, so manual_backward and the step
    do too. Reported at the user's lines (before: at Lightning's module.py and precision.py), the fix named; the
    fix (autocast disabled around them) is silent, the backward and the step inside that island included."""
    manual, _ = _modules()
    model = manual(disabled)
    report = _fit(tmp_path, model, precision="bf16-mixed")
    if disabled:
        assert report.findings == []
        return
    assert _sites(report) == [("AMP001", _line_of("# manual-backward")), ("AMP002", _line_of("# manual-step"))]
    for finding in report.findings:
        assert "/lightning/" in finding.via_filename.replace("\\", "/"), finding.via_filename
        assert 'inside `with torch.autocast("cpu", enabled=False):`' in finding.message, finding.message


@pytest.mark.parametrize("cast", [True, False], ids=["clean", "island-without-cast"])
def test_lightning_automatic_optimization_is_silent_and_an_island_in_the_model_is_seen(tmp_path, cast):
    _, automatic = _modules()
    report = _fit(tmp_path, automatic(cast=cast), precision="bf16-mixed")
    assert _sites(report) == ([] if cast else [("AMP006", _line_of("# island-op"))])


@pytest.mark.parametrize("clip_in", ["on_after_backward", "on_before_optimizer_step"])
def test_lightning_16_mixed_unscales_after_on_after_backward(tmp_path, clip_in):
    """Lightning's float16 plugin builds and steps its own GradScaler (on CPU when the plugin is given): a clip
    in on_after_backward sees the gradients x65536 and is reported at its line; in on_before_optimizer_step,
    after Lightning's unscale_, it is silent."""
    from lightning.pytorch.plugins import MixedPrecision

    _, automatic = _modules()
    model = automatic(clip_in=clip_in)
    report = _fit(tmp_path, model, plugins=[MixedPrecision("16-mixed", "cpu")])
    if clip_in == "on_before_optimizer_step":
        assert report.findings == [] and model.norms[-1] < 100
        return
    # The norm of gradients still multiplied by the scale (the first step's overflow halved it to 32768).
    assert model.norms[-1] > 1000
    (finding,) = report.findings
    assert (finding.code, finding.filename, finding.line) == ("AMP003", HERE, _line_of("# clip-scaled"))
    assert "installed code (a framework) unscales and steps them" in finding.message


# --- accelerate -----------------------------------------------------------------------------------------------

@pytest.fixture
def accelerator_state():
    """accelerate keeps one process-wide state, set by the first Accelerator: each test starts and ends without
    one (the reset its own tests make)."""
    state = _accelerate().state
    state.AcceleratorState._reset_state(True)
    yield
    state.AcceleratorState._reset_state(True)


def _accelerated(mixed_precision: str, device: str = "cpu"):
    torch, accelerate = _torch(), _accelerate()
    torch.manual_seed(0)
    accelerator = accelerate.Accelerator(mixed_precision=mixed_precision, cpu=device == "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer, [torch.randn(4, 8, device=accelerator.device) for _ in range(3)]


@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "clean"])
def test_accelerate_backward_inside_its_autocast_is_reported_at_the_users_line(accelerator_state, flagged):
    """`Accelerator(mixed_precision="bf16", cpu=True)`: a backward inside `accelerator.autocast()` runs in
    bfloat16, reported at the user's accelerator.backward line (accelerate's frame its context), the region being
    the user's to close. The loop that runs the backward outside any region of its own, clips with accelerate's
    clip and steps is silent."""
    accelerator, model, optimizer, batches = _accelerated("bf16")

    def loop():
        for batch in batches:
            if flagged:
                with accelerator.autocast():
                    loss = model(batch).pow(2).mean()
                    accelerator.backward(loss)  # accelerate-backward-in-region
            else:
                loss = model(batch).pow(2).mean()  # the prepared model's forward: accelerate's autocast
                accelerator.backward(loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()

    report = _watched(loop)
    if not flagged:
        assert report.findings == []
        return
    assert _sites(report) == [("AMP001", _line_of("# accelerate-backward-in-region"))]
    (finding,) = report.findings
    assert "/accelerate/" in finding.via_filename.replace("\\", "/")
    assert finding.message.endswith("close the autocast region before it")


@pytest.mark.cuda
@pytest.mark.parametrize("clip", ["torch", "accelerate"])
def test_accelerate_fp16_torch_clip_after_backward_sees_scaled_gradients(accelerator_state, clip):
    """float16 on CUDA: accelerate scales the loss in backward and unscales in its own clip (or its step);
    torch's clip between them clips gradients x65536 (accelerate builds no GradScaler on CPU)."""
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("CUDA not available: accelerate's float16 scaler needs a GPU")
    accelerator, model, optimizer, batches = _accelerated("fp16", "cuda")

    def loop():
        for batch in batches:
            accelerator.backward(model(batch).float().pow(2).mean())
            if clip == "torch":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # torch-clip-after-backward
            else:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()

    report = _watched(loop)
    assert _sites(report) == ([("AMP003", _line_of("# torch-clip-after-backward"))] if clip == "torch" else [])


# --- the HF Trainer -------------------------------------------------------------------------------------------

@functools.cache
def _hf_classes():
    """The model, Trainer and callback of the HF Trainer tests (classes built at first use, transformers being
    imported then)."""
    torch, transformers = _torch(), _transformers()

    class Regressor(torch.nn.Module):
        """A model as the Trainer takes one: `forward(x, labels)` returns {"loss": ...}, the loss computed in an
        fp32 island of the model's own (its input cast, or not)."""

        def __init__(self, cast: bool = True):
            super().__init__()
            self.net = torch.nn.Linear(8, 1)
            self.cast = cast
            self.dtypes = []  # what the linear returned: the region the Trainer runs the forward in

        def forward(self, x, labels):
            scores = self.net(x).squeeze(-1)
            self.dtypes.append(scores.dtype)
            with torch.autocast("cpu", enabled=False):
                if self.cast:
                    scores = scores.float()
                penalty = scores.abs().mean()  # hf-island-op
                return {"loss": (scores - labels).pow(2).mean() + penalty}  # float32 labels: promoted

    class ClippingTrainer(transformers.Trainer):
        """A `training_step` override clipping with torch after the Trainer's own step (its backward)."""

        def __init__(self, *args, norms: list, **kwargs):
            super().__init__(*args, **kwargs)
            self.norms = norms

        def training_step(self, model, inputs, num_items_in_batch=None):
            loss = super().training_step(model, inputs, num_items_in_batch)
            self.norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))  # hf-clip-scaled
            return loss

    class ClipBeforeStep(transformers.TrainerCallback):
        """A torch clip in `on_pre_optimizer_step`, which the Trainer calls after its own clip (`max_grad_norm`,
        accelerate's clip_grad_norm_, which unscales first)."""

        def __init__(self, norms: list):
            self.norms = norms

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            self.norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))

    return Regressor, ClippingTrainer, ClipBeforeStep


def _train(tmp_path, model, trainer_class=None, callbacks=(), scaler=False, **arguments):
    """Two steps of the real `transformers.Trainer` on the CPU, under the watch: (trainer, report)."""
    torch, transformers = _torch(), _transformers()
    torch.manual_seed(0)
    data = [{"x": x, "labels": y} for x, y in zip(torch.randn(8, 8), torch.randn(8))]
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, max_steps=2,
                                          per_device_train_batch_size=4, report_to=[], save_strategy="no",
                                          logging_strategy="no", disable_tqdm=True, **arguments)
    trainer = (trainer_class or transformers.Trainer)(model=model, args=args, train_dataset=data,
                                                      callbacks=list(callbacks))
    if scaler:
        # accelerate builds its GradScaler and wraps the forward in float16 autocast on a GPU only (on the CPU,
        # fp16 trains in float32): hand it a CPU GradScaler and turn its autocast on, as it does on CUDA, before
        # train() prepares the model and the optimizer (its backward, clip and step use them from then). The
        # initial scale 2**12 (`GradScalerKwargs(init_scale=...)` sets it on a GPU) keeps the float16 gradients
        # of these losses finite: no step is skipped.
        trainer.accelerator.native_amp = True
        trainer.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)
    report = _watched(trainer.train)
    assert trainer.state.global_step == 2
    return trainer, report


@pytest.mark.parametrize("cast", [True, False], ids=["clean", "island-without-cast"])
def test_hf_trainer_runs_the_models_forward_under_autocast_and_an_island_there_is_the_users(
        tmp_path, accelerator_state, cast):
    """`TrainingArguments(bf16=True, use_cpu=True)`: the Trainer opens no region of its own; accelerate runs the
    model's forward under bfloat16 autocast (the linear returns bfloat16), and the Trainer's backward, clip
    (`max_grad_norm`) and step run outside it, no scaler built: silent. An fp32 island in the model's forward,
    its input not cast, is reported at the model's line (not in transformers or accelerate); its loss line,
    the bfloat16 scores promoted by the float32 labels, computes in float32 and is not."""
    regressor, _, _ = _hf_classes()
    model = regressor(cast)
    trainer, report = _train(tmp_path, model, bf16=True)
    assert set(model.dtypes) == {_torch().bfloat16} and trainer.accelerator.scaler is None
    assert _sites(report) == ([] if cast else [("AMP006", _line_of("# hf-island-op"))])
    for finding in report.findings:
        assert finding.via is None and finding.message.startswith("`abs` receives a bfloat16 tensor")


@pytest.mark.parametrize("clip_in", ["training_step", "on_pre_optimizer_step"])
def test_hf_trainer_fp16_unscales_after_training_step(tmp_path, accelerator_state, clip_in):
    """float16 with accelerate's GradScaler: the Trainer's backward scales the loss; the Trainer unscales after
    `training_step` (its clip, accelerate's, before the `on_pre_optimizer_step` callbacks) and steps through the
    scaler. A torch clip in a `training_step` override clips gradients still multiplied by the scale, reported at
    its line with the advice to clip after the Trainer's unscale_ (a second unscale_ would raise); in
    on_pre_optimizer_step it is silent."""
    regressor, clipping_trainer, clip_before_step = _hf_classes()
    model, norms = regressor(), []
    if clip_in == "training_step":
        trainer, report = _train(tmp_path, model, functools.partial(clipping_trainer, norms=norms), scaler=True,
                                 fp16=True)
    else:
        trainer, report = _train(tmp_path, model, callbacks=[clip_before_step(norms)], scaler=True, fp16=True)
    assert set(model.dtypes) == {_torch().float16} and trainer.accelerator.scaler.get_scale() == 2 ** 12
    if clip_in == "on_pre_optimizer_step":
        assert report.findings == [] and max(norms) < 1.0 + 1e-6  # unscaled, and clipped to 1.0 by the Trainer
        return
    assert min(norms) > 1000  # the norm of gradients still multiplied by 4096
    (finding,) = report.findings
    assert (finding.code, finding.filename, finding.line) == ("AMP003", HERE, _line_of("# hf-clip-scaled"))
    assert "installed code (a framework) unscales and steps them" in finding.message


def test_the_frameworks_are_in_the_test_extra():
    import tomllib

    extra = tomllib.loads((Path(HERE).parent.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["test"]
    names = {requirement.split(">")[0].split("=")[0].split("<")[0].strip() for requirement in extra}
    assert {"lightning", "accelerate", "transformers"} <= names

