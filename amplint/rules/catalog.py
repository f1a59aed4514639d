"""Every rule's catalog entry, generated from the rule modules by `python -m amplint.rules`: do not edit.
(code, name, module, class, words, min_torch, fix, severity[, opt_in])."""

from amplint import vocabulary as vocab

CATALOG = (
    ("AMP001", "backward-in-autocast", "amp001_backward_in_autocast", "BackwardInAutocast",
     (vocab.AUTOCAST, "with", vocab.MANUAL_BACKWARD), None, "sometimes", "error"),
    ("AMP002", "step-in-autocast", "amp002_step_in_autocast", "StepInAutocast",
     (vocab.AUTOCAST, "with"), None, "sometimes", "error"),
    ("AMP003", "clip-without-unscale", "amp003_clip_without_unscale", "ClipWithoutUnscale",
     (vocab.CLIP_GRAD, vocab.SCALE, vocab.REGISTER_HOOK), None, "sometimes", "error"),
    ("AMP004", "scaler-per-iteration", "amp004_scaler_per_iteration", "ScalerPerIteration",
     (vocab.GRAD_SCALER, "for", "while", "def"), None, "sometimes", "error"),
    ("AMP005", "scaler-in-inference", "amp005_scaler_in_inference", "ScalerInInference",
     (vocab.GRAD_SCALER, vocab.SCALE), None, "sometimes", "error"),
    ("AMP006", "disabled-autocast-without-cast", "amp006_disabled_autocast_without_cast", "DisabledAutocastWithoutCast",
     (vocab.AUTOCAST,), None, "sometimes", "error"),
    ("AMP007", "deprecated-amp-api", "amp007_deprecated_amp_api", "DeprecatedAmpApi",
     (vocab.AMP,), "1.6", "safe", "warning"),
    ("AMP008", "step-bypasses-scaler", "amp008_step_bypasses_scaler", "StepBypassesScaler",
     (vocab.SCALE,), "1.6", "sometimes", "error"),
    ("AMP009", "unscaled-backward", "amp009_unscaled_backward", "UnscaledBackward",
     (vocab.BACKWARD,), "1.6", "sometimes", "error"),
    ("AMP010", "step-without-update", "amp010_step_without_update", "StepWithoutUpdate",
     (vocab.STEP,), "1.6", "safe", "error"),
    ("AMP011", "unscale-twice", "amp011_unscale_twice", "UnscaleTwice",
     (vocab.UNSCALE,), "1.6", "safe", "error"),
    ("AMP012", "half-model-with-scaler", "amp012_half_model_with_scaler", "HalfModelWithScaler",
     (vocab.HALF, vocab.FLOAT16), "1.6", "none", "error"),
    ("AMP013", "scaler-with-bfloat16", "amp013_scaler_with_bfloat16", "ScalerWithBfloat16",
     (vocab.GRAD_SCALER,), "1.10", "unsafe", "warning"),
    ("AMP014", "autocast-device-mismatch", "amp014_autocast_device_mismatch", "AutocastDeviceMismatch",
     (vocab.AUTOCAST,), "1.10", "safe", "error"),
    ("AMP015", "island-input-of-unknown-dtype", "amp015_island_input_of_unknown_dtype", "IslandInputOfUnknownDtype",
     (vocab.AUTOCAST,), None, "unsafe", "warning", True),
)
