"""The pictures of the runtime evidence (amplint.plots, `python -m amplint.harness --plots DIR`).

Drawn from the runs recorded in docs/plots/observables.json, so no torch is run; the end-to-end test runs the
harness on a stand-in program that prints a recorded result (a subprocess without torch).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from amplint import harness, plots

pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "docs" / "plots"
PROGRAMS = {program.name: program for program in harness.discover()}
PNG = b"\x89PNG\r\n\x1a\n"


def _recorded() -> list[dict]:
    return plots.read_record(COMMITTED)


def _is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG


def test_every_picture_names_a_runtime_program() -> None:
    assert sorted(set(plots.PICTURES) - set(PROGRAMS)) == []


@pytest.mark.parametrize("name", sorted(plots.PICTURES))
def test_committed_picture_and_record_exist_for_each_pictured_program(name: str) -> None:
    program = PROGRAMS[name]
    assert _is_png(COMMITTED / plots.filename(program.rule, program.path.stem)), (
        f"docs/plots has no picture of {name}: run `python -m amplint.harness --device cpu --rule {program.rule} "
        "--plots docs/plots`")
    dtypes = {e["dtype"] for e in _recorded() if e["program"] == name and e["device"] == "cpu"}
    assert dtypes == set(program.dtypes_for("cpu"))


@pytest.mark.parametrize("name", sorted(plots.PICTURES))
def test_a_recorded_result_is_drawn(name: str, tmp_path: Path) -> None:
    entries = [e for e in _recorded() if e["program"] == name]
    written = plots.draw_entries(entries, tmp_path)
    assert written == [tmp_path / plots.filename(PROGRAMS[name].rule, PROGRAMS[name].path.stem)]
    assert _is_png(written[0])


def test_a_failed_run_is_drawn_as_its_error(tmp_path: Path) -> None:
    entry = next(e for e in _recorded() if e["program"].endswith("/scaler_in_loop"))
    broken = dict(entry, fixed=None, fixed_error="exit code 1: RuntimeError: boom")
    assert _is_png(plots.draw_entries([broken], tmp_path)[0])


def test_a_record_without_the_series_is_a_clear_error(tmp_path: Path) -> None:
    entry = next(e for e in _recorded() if e["program"].endswith("/scaler_in_loop"))
    stripped = dict(entry, flagged={k: v for k, v in entry["flagged"].items() if k != "scales"})
    with pytest.raises(plots.PlotError, match="scales"):
        plots.draw_entries([stripped], tmp_path)


def test_plots_never_import_torch_or_matplotlib_at_import() -> None:
    code = "import sys, amplint.plots, amplint.harness; print('torch' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_harness_plots_flag_end_to_end(tmp_path: Path) -> None:
    """`--plots DIR` on a stand-in AMP004 program: flagged by amplint, fixed by its fixer, but its torch code never
    runs; it prints the recorded result of the real program's flagged run."""
    entry = next(e for e in _recorded() if e["program"].endswith("/scaler_in_loop") and e["dtype"] == "float16")
    runtime = tmp_path / "fixtures" / "AMP004-scaler-per-iteration" / "runtime"
    runtime.mkdir(parents=True)
    (runtime / "scaler_in_loop.py").write_text(textwrap.dedent(f"""\
        import json
        import os

        if os.environ.get("AMPLINT_NEVER_SET"):
            import torch
            for step in range(8):
                scaler = torch.amp.GradScaler("cpu")
                scaler.scale(torch.ones(())).backward()
                scaler.update()
        print(json.dumps({entry["flagged"]!r}))
        """))
    (runtime / "scaler_in_loop.expect.json").write_text(json.dumps(
        {"rule": "AMP004", "observable": "stand-in", "bad": "True", "good": "True", "dtypes": ["float16"]}))
    out = tmp_path / "pictures"
    result = subprocess.run([sys.executable, "-m", "amplint.harness", "--fixtures", str(tmp_path / "fixtures"),
                             "--device", "cpu", "--plots", str(out)], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _is_png(out / "AMP004_scaler_in_loop.png")
    assert f"\n1 picture written to {out}\n" in result.stdout
    recorded = plots.read_record(out)
    assert [(e["program"], e["dtype"], e["flagged"]["scales"]) for e in recorded] == [
        ("AMP004-scaler-per-iteration/scaler_in_loop", "float16", entry["flagged"]["scales"])]


def test_without_matplotlib_the_flag_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "matplotlib"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}"}
    result = subprocess.run([sys.executable, "-m", "amplint.harness", "--rule", "AMP004", "--plots",
                             str(tmp_path / "out")], capture_output=True, text=True, cwd=REPO,
                            env=dict(os.environ, **env))
    assert result.returncode == 2
    assert "pip install" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_each_pictured_program_shows_its_picture_on_its_rule_page() -> None:
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("amplint_docs_hooks_plots", REPO / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    for name in plots.PICTURES:
        program = PROGRAMS[name]
        link = f"](../plots/{plots.filename(program.rule, program.path.stem)})"
        assert link in hooks.program_section(program, []), name
    unpictured = next(p for p in PROGRAMS.values() if p.name not in plots.PICTURES)
    assert "](../plots/" not in hooks.program_section(unpictured, [])


def test_an_overflowed_prediction_panel_says_what_it_cannot_draw(tmp_path: Path) -> None:
    """AMP005 predict_decorated on CUDA float16: logits inf, every probability NaN (docs/evidence.md). The panel
    says that its points are not finite instead of standing empty."""
    pyplot = plots.require_matplotlib()
    entry = next(e for e in _recorded() if e["program"].endswith("/predict_decorated") and e["dtype"] == "float16")
    nan = float("nan")
    flagged = dict(entry["flagged"], logit_ratio=float("inf"), max_prob_diff=nan, min_confidence=nan,
                   prob_sample=[nan] * len(entry["flagged"]["prob_sample"]))
    figure, ax = pyplot.subplots()
    try:
        assert plots._prediction_probability(ax, flagged) == "logits xinf, largest error nan"
        assert [text.get_text() for text in ax.texts] == ["16 of 16 not finite (overflow): not drawn"]
        ax.clear()
        plots._prediction_probability(ax, entry["flagged"])
        assert list(ax.texts) == []
    finally:
        pyplot.close(figure)
    broken = dict(entry, device="cuda", flagged=flagged)
    assert _is_png(plots.draw_entries([broken], tmp_path)[0])
