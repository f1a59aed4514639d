"""Pictures of the runtime evidence: for each program that has one, the flagged run beside the amplint-fixed run.

`python -m amplint.harness --plots DIR` runs the programs as usual, then writes here one PNG per program and
device (`<CODE>_<program>.png` for CPU, `<CODE>_<program>.cuda.png` for CUDA), one row per dtype, the flagged run on
the left and the fixed run on the right, on the same axes where the numbers are comparable. Beside the pictures it
keeps `observables.json`, the runs' JSON they were drawn from (merged with what the folder already holds), so a
picture can be redrawn without torch: `draw_recorded(DIR)`.

The docs site shows the pictures committed under docs/plots/ on each rule's page (docs/hooks.py). Regenerate them
after changing a plotted program::

    python -m amplint.harness --device cpu --rule AMP003 --rule AMP004 --rule AMP005 --rule AMP006 --plots docs/plots

matplotlib is an optional extra (`pip install matplotlib`, or `pip install ".[plots]"` from a checkout); it is imported only when a picture is drawn, with
the Agg backend (no display). Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

RECORD = "observables.json"
FLAGGED, FIXED = "flagged", "fixed"
GOOD, BAD, NEUTRAL = "#2a7d2e", "#c0392b", "#34495e"


class PlotError(Exception):
    """Pictures cannot be drawn here: matplotlib is missing, or a recorded result is unusable."""


def require_matplotlib():
    """matplotlib's pyplot on the Agg backend, or a PlotError saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError("--plots needs matplotlib: pip install matplotlib (or pip install '.[plots]' from a checkout)") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as pyplot

    return pyplot


# --- one panel per program ---------------------------------------------------------------------------------------

def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _loss_scale(ax, r: dict) -> str:
    """AMP004: the scale each step used; a step whose weights did not change (skipped) in red."""
    scales, skipped = r["scales"], r.get("skipped_at") or [False] * len(r["scales"])
    steps = range(1, len(scales) + 1)
    ax.plot(steps, scales, color=NEUTRAL, linewidth=1, zorder=1)
    for flag, color, label in ((False, GOOD, "step applied"), (True, BAD, "step skipped (overflow)")):
        points = [(s, v) for s, v, k in zip(steps, scales, skipped) if bool(k) == flag]
        if points:
            ax.scatter(*zip(*points), color=color, marker="x" if flag else "o", label=label, zorder=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss scale")
    ax.margins(y=0.15)
    ax.legend(fontsize=7, loc="best")
    return f"{r['skipped_steps']}/{r['steps']} steps skipped"


def _clip_norm(ax, r: dict) -> str:
    """AMP003: the norm clip_grad_norm_ saw (and clipped to max_norm=1) against the gradient's true norm."""
    values = [r["clip_norm"], r["true_norm"]]
    bars = ax.bar(["norm clip_grad_norm_\nreturned (step 1)", "true gradient\nnorm"], values,
                  color=[BAD if abs(r["clip_norm"] / r["true_norm"] - 1) > 1e-3 else GOOD, NEUTRAL], width=0.5)
    ax.bar_label(bars, labels=[f"{v:.4g}" for v in values], fontsize=8)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="max_norm = 1")
    ax.set_yscale("log")
    ax.set_ylabel("gradient norm")
    ax.margins(y=0.2)
    ax.legend(fontsize=7, loc="best")
    return f"size of the first update {r['first_update']:.2g}"


def _against_reference(ax, xs: list, ys: list, span: tuple, unchanged: bool) -> None:
    """AMP005's two panels: each sample as evaluated (ys) against its reference (xs), beside the y = x line over
    `span` that a program which leaves its outputs alone lies on; green when it does."""
    ax.plot(span, span, color="grey", linestyle="--", linewidth=1, label="y = x (unchanged)")
    ax.scatter(xs, ys, s=14, color=GOOD if unchanged else BAD, label=f"{len(ys)} samples")
    overflowed = sum(not _finite(y) for y in ys)
    if overflowed:  # inf or NaN (an overflow in float16 on CUDA): no point to draw, so the panel says so
        ax.text(0.5, 0.5, f"{overflowed} of {len(ys)} not finite (overflow): not drawn", transform=ax.transAxes,
                ha="center", va="center", color=BAD, fontsize=8)
    ax.legend(fontsize=7, loc="best")


def _prediction_scale(ax, r: dict) -> str:
    """AMP005 (outputs): each prediction as evaluated against the model's plain output; y = x is right."""
    xs = r["reference_sample"]
    _against_reference(ax, xs, r["pred_sample"], (min(xs), max(xs)), abs(r["pred_ratio"] - 1) < 1e-6)
    ax.set_xlabel("model's plain output")
    ax.set_ylabel("prediction as evaluated")
    return f"predictions / outputs = {r['pred_ratio']:.6g}"


def _prediction_probability(ax, r: dict) -> str:
    """AMP005 (softmax): the predicted probability of class 1 against the one from the plain outputs."""
    _against_reference(ax, r["reference_prob_sample"], r["prob_sample"], (0, 1), r["max_prob_diff"] < 1e-6)
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("P(class 1) from the plain outputs")
    ax.set_ylabel("P(class 1) as predicted")
    return f"logits x{r['logit_ratio']:.6g}, largest error {r['max_prob_diff']:.3g}"


def _island_error(ax, r: dict) -> str:
    """AMP006 (penalty): the relative error of the island's sum at each step; inf drawn at the top."""
    errors = r["rel_errs"]
    finite = [e for e in errors if _finite(e) and e > 0]
    top = 1.0
    heights = [e if _finite(e) and e > 0 else top for e in errors]
    colors = [GOOD if _finite(e) and e < 1e-6 else BAD for e in errors]
    steps = range(1, len(errors) + 1)
    bars = ax.bar(steps, heights, color=colors, width=0.6)
    ax.bar_label(bars, labels=[f"{e:.2g}" if _finite(e) else str(e) for e in errors], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(min(finite + [1e-8]) / 10, top * 10)
    ax.set_xticks(list(steps))
    ax.set_xlabel("training step")
    ax.set_ylabel("relative error vs float64")
    return f"the island computes in {r['penalty_dtype']}"


def _island_dtype(ax, r: dict) -> str:
    """AMP006 (head): the dtype the float32 head receives, and the loss of each step that ran (or the error)."""
    losses = r.get("losses") or []
    if losses:
        ax.plot(range(1, len(losses) + 1), losses, marker="o", color=GOOD)
        ax.set_xticks(range(1, len(losses) + 1))
    else:
        ax.set_xticks([])
    ax.set_xlabel("training step")
    ax.set_ylabel("loss")
    if r.get("error"):
        message = r["error"]
        if len(message) > 60:
            cut = message.rfind(" ", 0, 60)
            message = message[:cut] + "\n" + message[cut + 1:]
        ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center", fontsize=8, color=BAD)
    return f"the head receives {r.get('head_input_dtype')}; {r['steps']} steps ran"


@dataclass(frozen=True)
class Picture:
    title: str  # what the picture shows, after the rule and the program
    draw: Callable[..., str]  # (ax, the run's JSON) -> draws one panel, returns its one-line summary
    sharey: bool = True  # flagged and fixed on the same y axis (False where one would flatten the other)


# program name (fixture folder/stem, harness.Program.name) -> its picture
PICTURES: dict[str, Picture] = {
    "AMP003-clip-without-unscale/clip_scaled_grads": Picture("clip norm vs true gradient norm", _clip_norm),
    "AMP004-scaler-per-iteration/scaler_in_loop": Picture("loss scale per step", _loss_scale),
    "AMP005-scaler-in-inference/scaled_predictions": Picture("prediction scale", _prediction_scale, sharey=False),
    "AMP005-scaler-in-inference/predict_decorated": Picture("predicted probabilities", _prediction_probability),
    "AMP006-disabled-autocast-without-cast/fp32_penalty": Picture("dtype and error in the fp32 island",
                                                                  _island_error),
    "AMP006-disabled-autocast-without-cast/fp32_head": Picture("dtype entering the fp32 island", _island_dtype),
}


def filename(rule: str, stem: str, device: str = "cpu") -> str:
    """The picture's file name: `<CODE>_<program>.png`, `.cuda.png` for another device than the CPU."""
    return f"{rule}_{stem}" + ("" if device == "cpu" else f".{device}") + ".png"


# --- figures -----------------------------------------------------------------------------------------------------

def _panel(ax, picture: Picture, data: dict | None, error: str | None) -> str:
    """Draw one run; its summary for the panel's title."""
    if data is None:
        ax.text(0.5, 0.5, (error or "not run")[-120:], transform=ax.transAxes, ha="center",
                va="center", fontsize=8, color=BAD, wrap=True)
        ax.set_xticks([])
        ax.set_yticks([])
        return "no result"
    try:
        return picture.draw(ax, data)
    except (KeyError, TypeError, ValueError) as problem:
        raise PlotError(f"the run's JSON lacks what its picture needs: {type(problem).__name__}: {problem}") from None


def plot_program(name: str, rule: str, device: str, results: dict, out: Path, unsafe: bool = False) -> Path:
    """Draw one program's picture into `out` (a PNG file): `results` maps dtype -> {"flagged": JSON or None,
    "fixed": JSON or None, optionally "flagged_error"/"fixed_error": why a run gave none}."""
    picture = PICTURES.get(name)
    if picture is None:
        raise PlotError(f"{name} has no picture")
    pyplot = require_matplotlib()
    dtypes = list(results)
    figure, axes = pyplot.subplots(len(dtypes), 2, figsize=(9.5, 0.6 + 3.3 * len(dtypes)), squeeze=False,
                                   sharey="row" if picture.sharey else False)
    fixed_label = "fixed by amplint check --fix" + (" --unsafe-fixes" if unsafe else "")
    try:
        for row, dtype in enumerate(dtypes):
            for column, (key, label) in enumerate(((FLAGGED, "flagged (as written)"), (FIXED, fixed_label))):
                ax = axes[row][column]
                summary = _panel(ax, picture, results[dtype].get(key), results[dtype].get(f"{key}_error"))
                ax.set_title(f"{dtype} on {device}: {label}\n{summary}", fontsize=9,
                             color=BAD if key == FLAGGED else GOOD)
                ax.tick_params(labelsize=8, labelleft=True)
        figure.suptitle(f"{rule} {name.rsplit('/', 1)[-1]}: {picture.title}", fontsize=11)
        figure.tight_layout()
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(out, dpi=72)
    finally:
        pyplot.close(figure)
    return out


# --- from the harness's rows, and from a record ------------------------------------------------------------------

def record(rows) -> list[dict]:
    """The runs of the pictured programs' rows (harness.Row) as JSON: one entry per program, device and dtype."""
    entries = []
    for row in rows:
        if row.program.name not in PICTURES:
            continue
        entry = {"program": row.program.name, "rule": row.program.rule, "unsafe": row.program.unsafe,
                 "device": row.device, "dtype": row.dtype}
        for key, run in ((FLAGGED, row.flagged_run), (FIXED, row.fixed_run)):
            entry[key] = run.data if run is not None else None
            if run is None or run.data is None:
                entry[f"{key}_error"] = run.error if run is not None else "not run"
        entries.append(entry)
    return entries


def draw_entries(entries: list[dict], out_dir: Path) -> list[Path]:
    """One picture per program and device of `entries` (as `record` makes them)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for entry in entries:
        groups.setdefault((entry["program"], entry["device"]), []).append(entry)
    written = []
    for (name, device), group in sorted(groups.items()):
        if name not in PICTURES:
            continue
        first = group[0]
        results = {e["dtype"]: {k: e.get(k) for k in (FLAGGED, FIXED, f"{FLAGGED}_error", f"{FIXED}_error")}
                   for e in group}
        out = Path(out_dir) / filename(first["rule"], name.rsplit("/", 1)[-1], device)
        written.append(plot_program(name, first["rule"], device, results, out, bool(first.get("unsafe"))))
    return written


def _key(entry: dict) -> tuple[str, str, str]:
    return entry["program"], entry["device"], entry["dtype"]


def read_record(out_dir: Path) -> list[dict]:
    path = Path(out_dir) / RECORD
    if not path.is_file():
        return []
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise PlotError(f"{path}: not valid JSON: {error}") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "program" in e for e in entries):
        raise PlotError(f"{path}: not a list of recorded runs")
    return entries


def draw(rows, out_dir: Path) -> list[Path]:
    """Write the pictures of `rows` (harness.Row) into `out_dir` and merge their runs into its observables.json.
    Returns the pictures written."""
    require_matplotlib()
    out_dir = Path(out_dir)
    new = record(rows)
    merged = {_key(e): e for e in read_record(out_dir)}
    merged.update({_key(e): e for e in new})
    written = draw_entries(new, out_dir)
    (out_dir / RECORD).write_text(json.dumps(sorted(merged.values(), key=_key), indent=1) + "\n", encoding="utf-8")
    return written


def draw_recorded(out_dir: Path, into: Path | None = None) -> list[Path]:
    """Redraw every picture from the observables.json in `out_dir` (into `into`, by default the same folder)."""
    return draw_entries(read_record(out_dir), Path(into) if into else Path(out_dir))
