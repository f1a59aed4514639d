"""The runtime harness: proves, by running real torch, that each rule's finding is a real harm and that
amplint's own fix removes it.

Every `fixtures/<CODE>-<name>/runtime/<program>.py` is a tiny seeded training/inference program written in
the buggy shape a rule flags. It reads its device and low dtype from `AMPLINT_DEVICE` ("cpu"/"cuda") and
`AMPLINT_DTYPE` ("bfloat16"/"float16") and prints one final line of JSON with its observables. Beside it,
`<program>.expect.json` says what to expect::

    {"rule": "AMP003",
     "observable": "what the numbers mean",
     "bad": "<expression over r, the flagged run's JSON>",
     "good": "<expression over r, the fixed run's JSON>",
     "dtypes": ["bfloat16", "float16"],      # where the harm shows; the note says why one is left out
     "unsafe": false,                         # optional: the fix needs --unsafe-fixes
     "fix": true,                             # optional: false for a rule that offers no fix; then only
                                              # the harm is run, and the fixer must leave the program alone
     "show": ["key", ...],                    # optional: the keys the evidence table prints
     "note": "measured numbers"}

The expressions see `r` (the JSON object), `device`, `dtype` (strings) and `math`.

For each program the harness lints it (the rule must report it), fixes it through `amplint.pipeline.run`
(the fixed twin is never written by hand; it must differ and the rule must no longer report it), then runs
both versions in fresh `sys.executable` subprocesses for CPU x {bfloat16, float16}, plus CUDA x {float16,
bfloat16} when a subprocess finds `torch.cuda.is_available()`. This module never imports torch itself.

Nothing new may break: the program as fixed with safe fixes only may not raise an exception that the flagged
run did not (the type of an uncaught exception, from its traceback, or of one the program reports as
`"error": "Type: message"`). For a spec without `"unsafe"` that is the fixed twin's run; otherwise the safely
fixed text is run too, when it differs from both the flagged program and the fixed twin.

A *safety program* guards a fix that once broke correct code. Its spec has `"same"` instead of `"bad"`/`"good"`::

    {"rule": "AMP008", "observable": "...", "same": ["loss", "lr"], "dtypes": ["float16"], "note": "..."}

It need not be flagged, and the safe fixer may leave it alone (then nothing is run, and its row says so).
When the fixer changes it, the original and the fixed program are run: the fixed one may raise nothing new and
must give the same values for the `same` keys. Safety programs live in a rule's folder or in
`fixtures/safe-fixes/runtime/`.

`python -m amplint.harness` says on stderr how far it is (rows done of all, the program running), prints the
evidence as a compact table that fits the terminal (`--format markdown`: the Markdown table, with the observables)
and exits 1 when any row fails. `--fixtures DIR` and every other path are relative to the working folder. With
`--plots [DIR]` it also draws the flagged and fixed runs of the programs that have a picture (amplint.plots), in
`plots/` by default (the clone's .gitignore lists it).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

from amplint import vocabulary as vocab

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
DEVICE_DTYPES = {vocab.CPU: (vocab.BFLOAT16, vocab.FLOAT16), vocab.CUDA: (vocab.FLOAT16, vocab.BFLOAT16)}
TIMEOUT_S = 120.0
WORKERS = 2
REQUIRED_KEYS = ("rule", "observable", "bad", "good", "dtypes")
SAFETY_KEYS = ("rule", "observable", "same", "dtypes")  # a safety program's spec (see the module's docstring)
SAFETY_FOLDER = "safe-fixes"  # safety programs for any rule: fixtures/safe-fixes/runtime/
# The last line of a traceback: `ValueError: ...`, `torch.OutOfMemoryError: ...`, `KeyboardInterrupt`.
_RAISED = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s|:?$)")
_BUILTINS = {
    "abs": abs, "all": all, "any": any, "bool": bool, "float": float, "int": int, "isinstance": isinstance,
    "len": len, "max": max, "min": min, "round": round, "set": set, "sorted": sorted, "str": str, "sum": sum,
    "tuple": tuple, "list": list, "True": True, "False": False, "None": None,
}


class HarnessError(Exception):
    """A fixture that cannot be used: a program without its spec, a malformed spec."""


# --- discovery --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Program:
    path: Path
    rule: str
    observable: str
    bad: str
    good: str
    dtypes: tuple[str, ...]
    unsafe: bool = False
    show: tuple[str, ...] = ()
    note: str = ""
    fix: bool = True
    same: tuple[str, ...] = ()  # a safety program: the keys the fixed run must reproduce

    @property
    def safety(self) -> bool:
        """A safety program (no harm to show; the fix may change nothing and must break nothing)."""
        return not self.bad

    @property
    def name(self) -> str:
        """`<fixture folder>/<stem>`, e.g. `AMP003-clip-without-unscale/clip_scaled_grads`."""
        return f"{self.path.parent.parent.name}/{self.path.stem}"

    @property
    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def dtypes_for(self, device: str) -> tuple[str, ...]:
        """The dtypes this program is run with on `device`, in the harness's order for that device."""
        return tuple(dtype for dtype in DEVICE_DTYPES[device] if dtype in self.dtypes)


def _offers_fix(spec: dict) -> bool:
    """`"fix": false` (or `"no_fix": true`) marks a rule without a fix."""
    return bool(spec.get("fix", not spec.get("no_fix", False)))


def load_program(path: Path) -> Program:
    spec_path = path.with_suffix(".expect.json")
    if not spec_path.is_file():
        raise HarnessError(f"{path}: no {spec_path.name} beside it")
    try:
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise HarnessError(f"{spec_path}: not valid JSON: {error}") from None
    safety = "same" in spec and "bad" not in spec
    required = SAFETY_KEYS if safety else REQUIRED_KEYS
    missing = [key for key in required if key not in spec and not (key == "good" and not _offers_fix(spec))]
    if missing:
        raise HarnessError(f"{spec_path}: missing {', '.join(missing)}")
    if safety and (not isinstance(spec["same"], list) or not all(isinstance(k, str) for k in spec["same"])):
        raise HarnessError(f"{spec_path}: same must be a list of JSON keys")
    unknown = [d for d in spec["dtypes"] if d not in DEVICE_DTYPES["cpu"]]
    if unknown or not spec["dtypes"]:
        raise HarnessError(f"{spec_path}: dtypes must be a non-empty subset of bfloat16, float16")
    folder = path.parent.parent.name
    folder_code = folder.split("-", 1)[0]
    if spec["rule"] != folder_code and not (safety and folder == SAFETY_FOLDER):
        raise HarnessError(f"{spec_path}: rule {spec['rule']} does not match its folder ({folder_code})")
    for key in () if safety else ("bad", "good") if _offers_fix(spec) else ("bad",):
        try:
            compile(spec[key], f"{spec_path}:{key}", "eval")
        except SyntaxError as error:
            raise HarnessError(f"{spec_path}: {key} is not a Python expression: {error.msg}") from None
    return Program(
        path=path,
        rule=spec["rule"],
        observable=spec["observable"],
        bad=spec.get("bad", ""),
        good=spec.get("good", ""),
        dtypes=tuple(spec["dtypes"]),
        unsafe=bool(spec.get("unsafe", False)),
        show=tuple(spec.get("show", ())),
        note=spec.get("note", ""),
        fix=_offers_fix(spec),
        same=tuple(spec.get("same", ())),
    )


def discover(root: Path = FIXTURES) -> list[Program]:
    """Every `<root>/*/runtime/*.py` with its spec, sorted by path; a relative `root` is the working folder's
    (the paths are made absolute: each program runs in its own folder)."""
    return [load_program(path) for path in sorted(Path(root).absolute().glob("*/runtime/*.py"))]


CORPUS = FIXTURES / SAFETY_FOLDER / "corpus"  # the safety corpus: correct programs (benchmarks/safety_corpus.py)


def discover_corpus(folder: Path = CORPUS) -> list[Program]:
    """Every safety program of the corpus folder (`fixtures/safe-fixes/corpus/*.py`), sorted by path."""
    return [load_program(path) for path in sorted(Path(folder).absolute().glob("*.py"))]


# --- fixing -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FixedProgram:
    text: str | None  # the fixed source, None when it could not be produced (or, for a safety program, is unchanged)
    flagged_codes: tuple[str, ...] = ()  # what amplint reports on the flagged program
    applied_codes: tuple[str, ...] = ()  # whose fixes were applied
    remaining_codes: tuple[str, ...] = ()  # what the fixed text still reports
    problems: tuple[str, ...] = ()  # why this fixed twin cannot confirm anything
    safe_text: str | None = None  # the text with safe fixes only, when it differs from the original and from `text`


@lru_cache(maxsize=None)
def _fix(path: Path, text: str, unsafe: bool, rule: str, expect_fix: bool = True,
         safety: bool = False) -> FixedProgram:
    try:
        from amplint import pipeline
        from amplint.outcome import Mode
        from amplint.selection import all_rules
        from amplint.sources import from_text
    except ImportError as error:
        return FixedProgram(None, problems=(f"amplint's fixer is unavailable: {error}",))
    source = from_text(text, str(path), screened=False)  # the judge of every rule: nothing screened out
    rules = all_rules(opt_in=True)
    flagged_codes = tuple(d.code for d in pipeline.run(source, rules, Mode()).diagnostics)
    outcome = pipeline.run(source, rules, Mode(fix=True, unsafe=unsafe))
    safe = pipeline.run(source, rules, Mode(fix=True)) if unsafe else outcome
    fixed_text, safe_fixed = outcome.fixed_text, safe.fixed_text
    safe_text = safe_fixed if safe_fixed not in (text, fixed_text) else None
    applied = outcome.applied
    remaining = tuple(d.code for d in outcome.diagnostics)
    if safety:  # nothing to show: what the fixer makes of it is run only when it changed something
        changed = fixed_text if fixed_text != text else None
        return FixedProgram(changed, flagged_codes, applied, remaining, (), safe_text)
    problems = []
    if rule not in flagged_codes:
        problems.append(f"{rule} does not report the flagged program (reported: {', '.join(flagged_codes) or 'nothing'})")
    if not expect_fix:
        if rule in applied:
            problems.append(f"the spec says {rule} has no fix, but the fixer applied one")
        return FixedProgram(None, flagged_codes, applied, remaining, tuple(problems),
                            safe_fixed if safe_fixed != text else None)
    if outcome.note:
        problems.append(f"fixer: {outcome.note}")
    if fixed_text == text:
        problems.append("the fixer left the program unchanged" + ("" if unsafe else " (safe fixes only)"))
    if rule in remaining:
        problems.append(f"{rule} still reports the fixed program")
    return FixedProgram(fixed_text, flagged_codes, applied, remaining, tuple(problems), safe_text)


def fix_program(program: Program) -> FixedProgram:
    """The program as amplint's fixer rewrites it (unsafe fixes too when the spec says so)."""
    return _fix(program.path, program.text, program.unsafe, program.rule, program.fix, program.safety)


# --- running ----------------------------------------------------------------------------------------------

@dataclass
class RunResult:
    data: dict | None  # the parsed final JSON line
    error: str | None = None  # why there is no data
    returncode: int | None = None
    seconds: float = 0.0
    raised: str | None = None  # the type of the uncaught exception that ended the run (from its traceback)


def raised_by(run: RunResult) -> str | None:
    """The exception a run ended with or reported: uncaught (its traceback's type; a timeout or a run with no
    result counts as such), or caught by the program and reported as `"error": "Type: message"`."""
    if run.data is None:
        return run.raised or run.error or "no result"
    error = run.data.get("error")
    if not isinstance(error, str) or not error:
        return None
    match = _RAISED.match(error.strip())
    return match.group("type") if match else error


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_file(path: Path, device: str, dtype: str, timeout: float = TIMEOUT_S) -> RunResult:
    """Run one program in a fresh interpreter; its last non-empty stdout line must be a JSON object."""
    env = dict(os.environ, AMPLINT_DEVICE=device, AMPLINT_DTYPE=dtype, PYTHONHASHSEED="0",
               OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    path = Path(path).absolute()  # it runs in its own folder: a relative path would be looked for there
    start = time.monotonic()
    try:
        completed = subprocess.run([sys.executable, str(path)], cwd=str(path.parent), env=env,
                                   capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return RunResult(None, f"timed out after {timeout:g} s", None, time.monotonic() - start, "timeout")
    seconds = time.monotonic() - start
    lines = [line for line in completed.stdout.splitlines() if line.strip()]
    if completed.returncode != 0 or not lines:
        detail = _tail(completed.stderr) or _tail(completed.stdout) or "no output"
        last = (_tail(completed.stderr, 1) or "").strip()
        match = _RAISED.match(last) if completed.returncode != 0 else None
        raised = match.group("type") if match else f"exit code {completed.returncode}"
        return RunResult(None, f"exit code {completed.returncode}: {detail}", completed.returncode, seconds, raised)
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError:
        return RunResult(None, f"last line is not JSON: {lines[-1][:200]!r}", completed.returncode, seconds)
    if not isinstance(data, dict):
        return RunResult(None, f"last line is not a JSON object: {lines[-1][:200]!r}", completed.returncode, seconds)
    return RunResult(data, None, completed.returncode, seconds)


@lru_cache(maxsize=None)
def cuda_available() -> bool:
    """Whether torch sees a CUDA device, asked in a subprocess (amplint never imports torch)."""
    try:
        completed = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                                   capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return completed.returncode == 0 and completed.stdout.strip().endswith("True")


def targets(devices: tuple[str, ...] = ("cpu", "cuda")) -> list[tuple[str, str]]:
    """(device, dtype) pairs to run here: CPU always, CUDA only when available."""
    pairs = []
    for device in devices:
        if device == "cuda" and not cuda_available():
            continue
        pairs.extend((device, dtype) for dtype in DEVICE_DTYPES[device])
    return pairs


def evaluate(expression: str, data: dict, device: str, dtype: str) -> tuple[bool, str | None]:
    """Evaluate a spec expression over a run's JSON; (result, error)."""
    try:
        value = eval(expression, {"__builtins__": _BUILTINS, "math": math},  # noqa: S307 - fixture specs
                     {"r": data, "device": device, "dtype": dtype})
    except Exception as error:  # noqa: BLE001 - a broken expression is a failed row, not a crash
        return False, f"{type(error).__name__}: {error}"
    return bool(value), None


# --- rows -------------------------------------------------------------------------------------------------

@dataclass
class Row:
    program: Program
    device: str
    dtype: str
    fixed: FixedProgram
    flagged_run: RunResult | None = None
    fixed_run: RunResult | None = None
    safe_run: RunResult | None = None  # the safely fixed text, when it is neither program (FixedProgram.safe_text)
    problems: list[str] = field(default_factory=list)

    @property
    def confirmed(self) -> bool:
        return not self.problems


def _judge(row: Row) -> Row:
    program, problems = row.program, row.problems
    problems.extend(row.fixed.problems)
    if program.safety:
        problems.extend(_same_results(row))
    else:
        problems.extend(_expectations(row))
    problems.extend(_new_exceptions(row))
    return row


def _expectations(row: Row) -> list[str]:
    """A harm program: the spec's `bad` holds for the flagged run, `good` for the fixed one."""
    program, problems = row.program, []
    for label, run, expression in (("flagged", row.flagged_run, program.bad), ("fixed", row.fixed_run, program.good)):
        if run is None:
            continue
        if run.data is None:
            problems.append(f"{label} run failed: {run.error}")
            continue
        ok, error = evaluate(expression, run.data, row.device, row.dtype)
        if error:
            problems.append(f"{label} run: cannot evaluate {expression!r}: {error}")
        elif not ok:
            problems.append(f"{label} run: expected {expression}")
    if row.fixed_run is None and not row.fixed.problems and program.fix:
        problems.append("fixed run missing")
    return problems


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _same_results(row: Row) -> list[str]:
    """A safety program the fixer changed: both runs give a result, and the same values for the `same` keys."""
    if row.fixed_run is None:
        return []
    problems = [f"{label} run failed: {run.error}"
                for label, run in (("original", row.flagged_run), ("fixed", row.fixed_run)) if run and run.data is None]
    if problems:
        return problems
    before, after = row.flagged_run.data, row.fixed_run.data
    return [f"fixed run: {key} = {after.get(key)!r}, the original gave {before.get(key)!r}"
            for key in row.program.same if not _same(before.get(key), after.get(key))]


def _new_exceptions(row: Row) -> list[str]:
    """Nothing new breaks: a fixed run (the spec's fix, and the safe fixes alone) raises nothing the original run
    did not."""
    if row.flagged_run is None:
        return []
    original = raised_by(row.flagged_run)
    problems = []
    for label, run in (("fixed", row.fixed_run), ("safely fixed", row.safe_run)):
        raised = raised_by(run) if run is not None else None
        if raised is not None and raised != original:
            problems.append(f"the {label} program raises {raised}, the original "
                            + (f"raised {original}" if original else "did not"))
    return problems


def run_rows(programs: list[Program], pairs: list[tuple[str, str]], workers: int = WORKERS,
             timeout: float = TIMEOUT_S, keep: Path | None = None,
             progress: Callable[[str, Row, str, int, int], None] | None = None,
             run_unchanged: bool = False) -> list[Row]:
    """Run every program's flagged and fixed versions (and its safely fixed one when that is a third text) for each
    (device, dtype) it applies to, in a pool. A safety program the fixer leaves alone is not run, unless
    `run_unchanged` (the safety corpus: each original must run).

    `progress(event, row, run, done, total)` is told when a run starts (`"start"`, `run` is "flagged", "fixed" or
    "safely fixed") and when a row is finished (`"done"`, after `done` of the `total` rows)."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="amplint-harness-") as scratch:
        fixed_paths: dict[Path, Path] = {}
        safe_paths: dict[Path, Path] = {}
        for program in programs:
            fixed = fix_program(program)
            folder = (Path(keep) if keep else Path(scratch)) / program.path.parent.parent.name
            if program.fix and fixed.text is not None and not fixed.problems:
                fixed_paths[program.path] = _write(folder / f"{program.path.stem}.py", fixed.text)
            if fixed.safe_text is not None:
                safe_paths[program.path] = _write(folder / f"{program.path.stem}.safe.py", fixed.safe_text)
            for device, dtype in pairs:
                if dtype in program.dtypes_for(device):
                    rows.append(Row(program, device, dtype, fixed))
        lock = threading.Lock()
        pending = {id(row): 0 for row in rows}
        finished = [0]

        def tell(event: str, row: Row, run: str) -> None:
            if progress is not None:
                with lock:
                    progress(event, row, run, finished[0], len(rows))

        def started(row: Row, run: str, path: Path) -> RunResult:
            tell("start", row, run)
            return run_file(path, row.device, row.dtype, timeout)

        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            jobs = {}
            for row in rows:
                path = row.program.path
                runs = (("flagged_run", path), ("fixed_run", fixed_paths.get(path)),
                        ("safe_run", safe_paths.get(path)))
                if row.program.safety and not any(fixed for _, fixed in runs[1:]) and not run_unchanged:
                    finished[0] += 1  # the fix changes nothing: nothing to compare
                    _judge(row)
                    tell("done", row, "")
                    continue
                for attribute, run_path in runs:
                    if run_path is not None:
                        pending[id(row)] += 1
                        jobs[pool.submit(started, row, _RUN_NAMES[attribute], run_path)] = (row, attribute)
            for future in concurrent.futures.as_completed(jobs):
                row, attribute = jobs[future]
                setattr(row, attribute, future.result())
                pending[id(row)] -= 1
                if not pending[id(row)]:
                    with lock:
                        finished[0] += 1
                    _judge(row)
                    tell("done", row, "")
    return rows  # each judged once, when its last run ended


_RUN_NAMES = {"flagged_run": "flagged", "fixed_run": "fixed", "safe_run": "safely fixed"}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def check(program: Program, device: str, dtype: str, timeout: float = TIMEOUT_S) -> Row:
    """One row: the flagged and the fixed program run side by side."""
    return run_rows([program], [(device, dtype)], timeout=timeout)[0]


# --- the evidence table -----------------------------------------------------------------------------------

def _number(value) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value == int(value) and abs(value) < 1e7:
            return str(int(value))
        return f"{value:.4g}"
    return str(value)


UNCHANGED = "not run: amplint's safe fixes leave this guard program as it is"  # a safety program's row, nothing to run


def summarize(program: Program, run: RunResult | None) -> str:
    """A run's cell of the table: the values it printed, or in words why there are none."""
    if run is None:
        return UNCHANGED if program.safety else "not run" if program.fix else "no fix offered"
    if run.data is None:
        return f"failed: {run.error.splitlines()[-1] if run.error else ''}"
    keys = program.show or program.same or tuple(run.data)
    return ", ".join(f"{key}={_number(run.data.get(key))}" for key in keys)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: list[Row]) -> str:
    lines = ["| rule | program | device | dtype | observable | flagged run | fixed run | confirmed |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        confirmed = "yes" if row.confirmed else "NO: " + "; ".join(row.problems)
        flagged, fixed = summarize(row.program, row.flagged_run), summarize(row.program, row.fixed_run)
        if row.program.safety and row.confirmed:
            # a safety program: the same values before and after the fix, or no fix to compare at all
            confirmed = "yes: the same values" if row.flagged_run is not None else "yes: nothing to compare"
            if row.flagged_run is None and row.fixed_run is None:
                fixed = "no fixed version (identical to the original)"
        cells = (row.program.rule, row.program.path.stem, row.device, row.dtype, row.program.observable,
                 flagged, fixed, confirmed)
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 3, 0)] + "..."


def compact(rows: list[Row], width: int | None = None) -> str:
    """The evidence in a terminal: one line per row, no wider than `width` (the terminal's): rule, program,
    device, dtype, confirmed, and as much of each run's values as fits; then why each failed row failed.
    `table` is the whole of it, in Markdown."""
    width = width or shutil.get_terminal_size((120, 24)).columns
    cells = []
    for row in rows:
        flagged, fixed = summarize(row.program, row.flagged_run), summarize(row.program, row.fixed_run)
        if row.program.safety and row.flagged_run is None and row.fixed_run is None:
            flagged, fixed = "not run: the safe fixes leave it as it is", ""
        cells.append((row.program.rule, row.program.path.stem, row.device, row.dtype,
                      "yes" if row.confirmed else "NO", flagged, fixed))
    header = ("rule", "program", "device", vocab.DTYPE, "confirmed", "flagged run", "fixed run")
    fixed_widths = [max(len(line[column]) for line in (header, *cells)) for column in range(5)]
    rest = max(width - sum(fixed_widths) - 2 * 6, 24)
    runs = [rest // 2, rest - rest // 2]
    lines = []
    for line in (header, *cells):
        parts = [text.ljust(size) for text, size in zip(line[:5], fixed_widths)]
        parts += [_fit(line[5], runs[0] - 1).ljust(runs[0] - 1), _fit(line[6], runs[1])]
        lines.append("  ".join(parts).rstrip())
    for row in rows:
        if not row.confirmed:
            lines.append(f"\n{row.program.name} ({row.device}, {row.dtype}) not confirmed: " + "; ".join(row.problems))
    return "\n".join(lines)


class ProgressOnStderr:
    """How far the harness is, on stderr: on a terminal one line rewritten in place (rows done of all, the program
    running), otherwise one line per finished row (a CI log)."""

    def __init__(self, stream=None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.shown = False

    def __call__(self, event: str, row: Row, run: str, done: int, total: int) -> None:
        where = f"{row.program.name} ({row.device}, {row.dtype})"
        if self.terminal:
            text = (f"[{done}/{total} rows] running {where}, {run} program" if event == "start"
                    else f"[{done}/{total} rows] {where}: {'confirmed' if row.confirmed else 'NOT confirmed'}")
            columns = shutil.get_terminal_size((120, 24)).columns
            self.stream.write("\r\033[K" + _fit(text, columns - 1))
            self.shown = True
        elif event == "done":
            self.stream.write(f"[{done}/{total} rows] {where}: {'confirmed' if row.confirmed else 'NOT confirmed'}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amplint.harness", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rule", action="append", default=[], help="only this rule code (repeatable)")
    parser.add_argument("--device", choices=("cpu", "cuda", "all"), default="all")
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per program run")
    parser.add_argument("--fixtures", type=Path, default=FIXTURES, metavar="DIR",
                        help="the folder of rule fixtures, relative to the working folder (default: the `fixtures` "
                             "folder of the clone amplint runs from: an install with `pip install -e`)")
    parser.add_argument("--format", choices=("table", "markdown"), default="table",
                        help="table: one line per row, fitted to the terminal (default); markdown: the whole "
                             "evidence table, with each program's observable (docs/evidence.md)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    parser.add_argument("--keep-fixed", type=Path, metavar="DIR", help="write the fixed programs here")
    parser.add_argument("--plots", type=Path, metavar="DIR", nargs="?", const=Path("plots"),
                        help="draw each pictured program's flagged and fixed runs in DIR (PNG; needs matplotlib); "
                             "without DIR, in `plots` (the clone's .gitignore lists it)")
    args = parser.parse_args(argv)
    try:
        programs = discover(args.fixtures)
    except HarnessError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.rule:
        wanted = {code.upper() for code in args.rule}
        programs = [p for p in programs if p.rule in wanted]
    if not programs:
        print(f"error: no runtime programs found (`{args.fixtures}/*/runtime/*.py`"
              + (f", rule {', '.join(sorted(wanted))}" if args.rule else "") + ")", file=sys.stderr)
        if not args.fixtures.is_dir():  # amplint installed without its clone (`pip install .`)
            print("the programs are in the `fixtures` folder of amplint's clone: install amplint from the clone with "
                  "`pip install -e .`, or name the folder with `--fixtures PATH/TO/CLONE/fixtures`", file=sys.stderr)
        return 2
    if args.plots is not None:
        from amplint import plots
        try:
            plots.require_matplotlib()
        except plots.PlotError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    devices = ("cpu", "cuda") if args.device == "all" else (args.device,)
    pairs = targets(devices)
    progress = None if args.quiet else ProgressOnStderr()
    if progress is not None:
        count = sum(dtype in program.dtypes_for(device) for program in programs for device, dtype in pairs)
        print(f"{len(programs)} program{'' if len(programs) == 1 else 's'}, {count} row{'' if count == 1 else 's'} "
              f"({', '.join(f'{device} {dtype}' for device, dtype in pairs)}): fixing each with amplint, then "
              "running the flagged and the fixed version", file=sys.stderr, flush=True)
    try:
        rows = run_rows(programs, pairs, workers=args.workers, timeout=args.timeout, keep=args.keep_fixed,
                        progress=progress)
    finally:
        if progress is not None:
            progress.close()
    print(table(rows) if args.format == "markdown" else compact(rows))
    if args.plots is not None:
        try:
            written = plots.draw(rows, args.plots)
        except (plots.PlotError, OSError) as error:
            print(f"error: cannot draw the pictures: {error}", file=sys.stderr)
            return 2
        print(f"\n{len(written)} picture{'' if len(written) == 1 else 's'} written to {args.plots}" if written
              else "\nnone of these programs has a picture")
    if "cuda" in devices and not any(device == "cuda" for device, _ in pairs):
        print("\nCUDA not available: the CUDA rows (float16, bfloat16) were not run.")
    failed = [row for row in rows if not row.confirmed]
    print(f"\n{len(rows) - len(failed)}/{len(rows)} rows confirmed.")
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
