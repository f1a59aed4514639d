"""Proof that safe fixes are safe (DESIGN.md, Fixes): they change nothing in correct code, they keep every comment
that is not on a deleted code line, and what they write compiles and is final.

- Correct code: every clean fixture, one program per correct pattern of AMP_FACTS.md and a corpus of real-world
  style training programs (fixtures/correct-programs/, see its README) are fixed with every rule's safe fixes:
  nothing may change. The corpus programs must not be flagged at all.
- Comments: every flagged fixture (and flagged notebook) is fixed with `--fix --unsafe-fixes`; the comments
  before and after are the same multiset except those listed in DELETED_COMMENTS (each on a code line the fix
  deletes, which the test checks) and COPIED_COMMENTS.
- Generated programs (hypothesis): small training functions with comments, schedulers and non-tensor values.
  Correct ones are left alone by safe fixes; any one's fixed text compiles, is final, and keeps its comments.

The runtime half of the proof (a safely fixed program raises nothing new) is in amplint/harness.py and
tests/test_runtime.py.
"""

from __future__ import annotations

import io
import json
import sys
import tokenize
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from amplint.engine import lint_text
from amplint.fixer import compile_error, fix_text, parse_error
from amplint.pipeline import process_text as process_notebook_text
from amplint.sources.notebook import parse_notebook
from amplint.rules import ALL_RULES
from amplint.outcome import Mode
from test_fixtures import FIXTURES, fixture_files, fixture_id, with_known_failures

RULES = [rule() for rule in ALL_RULES]
CORPUS = FIXTURES / "correct-programs"
CORRECT = sorted(CORPUS.glob("*.py"))
NOTEBOOKS = FIXTURES / "notebooks"

# fixture path -> what a rule gets wrong on it today (strict xfails: the suite turns red once it is fixed; then
# remove the entry). KNOWN_FLAGGED: the program is reported; KNOWN_CHANGED: a safe fix changes it.
KNOWN_FLAGGED: dict[str, str] = {}
KNOWN_CHANGED: dict[str, str] = {}


# --- correct code: nothing to fix --------------------------------------------------------------------------

def assert_safe_fixes_change_nothing(text: str, filename: str) -> None:
    outcome = fix_text(text, filename, rules=RULES, unsafe=False)
    applied = [f"{d.location.row}:{d.location.column} {d.code} {d.fix.message}" for d in outcome.applied]
    assert applied == [] and outcome.text == text, "a safe fix changed correct code"


@pytest.mark.parametrize("path", with_known_failures(fixture_files("clean") + CORRECT, KNOWN_CHANGED))
def test_safe_fixes_change_nothing_in_correct_code(path: Path) -> None:
    assert_safe_fixes_change_nothing(path.read_text(encoding="utf-8"), str(path))


@pytest.mark.parametrize("path", with_known_failures(CORRECT, KNOWN_FLAGGED))
def test_correct_program_is_not_flagged(path: Path) -> None:
    diagnostics = lint_text(path.read_text(encoding="utf-8"), str(path), RULES).diagnostics
    assert [f"{d.location.row}:{d.location.column} {d.code} {d.message}" for d in diagnostics] == []


@pytest.mark.parametrize("path", sorted((NOTEBOOKS / "clean").glob("*.ipynb")), ids=lambda p: p.name)
def test_safe_fixes_change_nothing_in_clean_notebooks(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    outcome = process_notebook_text(text, str(path), RULES, Mode(fix=True))
    assert outcome.fixed_text == text and not outcome.fixed


# Each file of the corpus, and what it must contain to be the program it claims to be.
CORPUS_SHAPES = {
    "factory_scheduler_loop.py": ("optimizer, lr_scheduler = get_optimizer_and_scheduler(", "grad_scaler.step(optimizer)",
                                  "grad_scaler.update()", "lr_scheduler.step()"),
    "dict_and_dataclass_outputs.py": ("@dataclass", "return {", "enabled=False", "heads_loss(outputs, labels)"),
    "commented_out_code.py": ("# loss.backward()", "# optimizer.step()", "# scaler = torch.cuda.amp.GradScaler()"),
    "closure_optimizer.py": ("torch.optim.LBFGS", "optimizer.step(closure)"),
    "contextmanager_step.py": ("@contextmanager", "        yield state"),
}


def test_corpus_has_every_pattern_and_shape() -> None:
    names = {path.name for path in CORRECT}
    patterns = sorted(name[7:9] for name in names if name.startswith("pattern"))
    assert patterns == [f"{n:02d}" for n in range(1, 16)], "one program per AMP_FACTS.md correct pattern (1-15)"
    for name, snippets in CORPUS_SHAPES.items():
        text = (CORPUS / name).read_text(encoding="utf-8")
        assert all(snippet in text for snippet in snippets), name


def test_correct_code_check_can_fail() -> None:
    """The check above sees a safe fix: the recipe with its backward moved into the region is changed."""
    text = (CORPUS / "pattern01_recipe.py").read_text(encoding="utf-8")
    broken = text.replace("            loss = loss_fn(outputs, targets)\n        scaler.scale(loss).backward()\n",
                          "            loss = loss_fn(outputs, targets)\n            scaler.scale(loss).backward()\n")
    assert broken != text
    with pytest.raises(AssertionError, match="changed correct code"):
        assert_safe_fixes_change_nothing(broken, "pattern01_recipe.py")


# --- comments survive ---------------------------------------------------------------------------------------

def comments(text: str) -> Counter:
    """The comment tokens of a source (never text in strings), as a multiset."""
    return Counter(token.string for token in tokenize.generate_tokens(io.StringIO(text).readline)
                   if token.type == tokenize.COMMENT)


def comment_lines(text: str) -> dict[str, list[str]]:
    """comment -> the code before it on each line where it ends a line of code (own-line comments: none)."""
    lines = text.splitlines()
    found: dict[str, list[str]] = {}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            code = lines[token.start[0] - 1][: token.start[1]].strip()
            if code:
                found.setdefault(token.string, []).append(code)
    return found


def code_lines(text: str) -> Counter:
    """Every line's code without its comment, stripped, as a multiset."""
    lines = text.splitlines()
    cut = {token.start[0]: token.start[1] for token in tokenize.generate_tokens(io.StringIO(text).readline)
           if token.type == tokenize.COMMENT}
    return Counter(line[: cut.get(row, len(line))].strip() for row, line in enumerate(lines, 1))


# fixture -> the comments `--fix --unsafe-fixes` deletes with their code line (the test checks the line is gone).
DELETED_COMMENTS: dict[str, list[str]] = {
    "AMP005-scaler-in-inference/flagged/commented_scale.py": ["# expect: AMP005:14", "# expect: AMP005:22"],
    "AMP005-scaler-in-inference/flagged/inference_mode_block.py": ["# expect: AMP005:18"],
    "AMP005-scaler-in-inference/flagged/evaluator_method_in_training_module.py": ["# expect: AMP005:18"],
    "AMP005-scaler-in-inference/flagged/inference_main_legacy.py": ["# expect: AMP005:14"],
    "AMP005-scaler-in-inference/flagged/run_validation_unused.py": ["# expect: AMP005:18"],
    "AMP005-scaler-in-inference/flagged/sample_builds_bare_scaler.py": ["# expect: AMP005:5"],
    "AMP005-scaler-in-inference/flagged/script_model_eval_module_level.py": ["# expect: AMP005:14"],
    "AMP005-scaler-in-inference/flagged/user_eval_function_not_builtin.py": ["# expect: AMP005:14"],
    "AMP011-unscale-twice/flagged/clip_per_submodule.py": ["# expect: AMP011:9"],
    "AMP011-unscale-twice/flagged/unscale_again_before_step.py": ["# expect: AMP011:5"],
    "AMP013-scaler-with-bfloat16/flagged/comment_inside_call.py": ["# expect: AMP013:14",
                                                                   "# kept from the fp16 days"],
    "AMP013-scaler-with-bfloat16/flagged/comment_names_float16.py": ["# expect: AMP013:14"],
    "AMP013-scaler-with-bfloat16/flagged/commented_alternatives.py": ["# expect: AMP013:14",
                                                                      "# called once per step"],
    "AMP013-scaler-with-bfloat16/flagged/commented_out_fp16_branch.py": ["# expect: AMP013:14"],
    "AMP013-scaler-with-bfloat16/flagged/cpu_default_with_todo.py": ["# expect: AMP013:14"],
    "AMP013-scaler-with-bfloat16/flagged/method_docstring_half.py": ["# expect: AMP013:23"],
    "AMP013-scaler-with-bfloat16/flagged/module_docstring_fp16.py": ["# expect: AMP013:14"],
    "AMP013-scaler-with-bfloat16/flagged/cpu_default_dtype.py": ["# expect: AMP013:14"],
    "AMP013-scaler-with-bfloat16/flagged/cuda_bf16_loop.py": ["# expect: AMP013:14"],
    "AMP013-scaler-with-bfloat16/flagged/decorated_forward.py": ["# expect: AMP013:14"],
    "AMP013-scaler-with-bfloat16/flagged/module_level_script.py": ["# expect: AMP013:10"],
    "AMP013-scaler-with-bfloat16/flagged/partial_factory.py": ["# expect: AMP013:14"],
    "AMP013-scaler-with-bfloat16/flagged/trainer_attributes.py": ["# expect: AMP013:23"],
}
# fixture -> comments a fix repeats: splitting a region reopens it with its `with` line, trailing comment included.
COPIED_COMMENTS: dict[str, list[str]] = {}
# fixture -> (own-line comment, the code line right below it) for statements a fix moves: after fixing, each comment
# is still right above its code, at its indentation (a moved statement takes its comments along).
MOVED_COMMENTS: dict[str, list[tuple[str, str]]] = {
    "AMP003-clip-without-unscale/flagged/commented_late_unscale.py": [
        ("# unscale before the step (see the AMP recipe)", "scaler.unscale_(optimizer)"),
        ("# keep the update small early in training",
         "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # expect: AMP003:9")],
    "AMP011-unscale-twice/flagged/commented_micro_batch.py": [
        ("# unscale so that the clip sees true gradients", "scaler.unscale_(optimizer)  # expect: AMP011:9"),
        ("# clip the accumulated gradients (max norm from the paper)",
         "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"),
        ("# one step per batch of micro-batches", "scaler.step(optimizer)")],
}
# fixture -> what a fix does to its comments today that it should not (strict xfails; remove once fixed).
KNOWN_COMMENT_FAILURES: dict[str, str] = {}


def check_comments(before: str, after: str, deleted: list[str], copied: list[str]) -> None:
    lost, added = comments(before) - comments(after), comments(after) - comments(before)
    assert dict(lost) == dict(Counter(deleted)), "comments lost (or kept) other than those listed as deleted"
    assert dict(added) == dict(Counter(copied)), "comments added other than those listed as copied"
    code_before, code_after, on_lines = code_lines(before), code_lines(after), comment_lines(before)
    for comment in deleted:
        assert on_lines.get(comment), f"{comment!r} is listed as deleted with its code but is an own-line comment"
        assert any(code_after[code] < code_before[code] for code in on_lines[comment]), \
            f"{comment!r} is gone but its code line is still there"


def check_moved_comments(after: str, pairs: list[tuple[str, str]]) -> None:
    """Each comment is right above its code line, at the same indentation."""
    lines = after.splitlines()
    for comment, code in pairs:
        at = [row for row, line in enumerate(lines) if line.strip() == comment]
        assert len(at) == 1, f"{comment!r} is not once on a line of its own"
        below = lines[at[0] + 1] if at[0] + 1 < len(lines) else ""
        assert below.strip() == code, f"{comment!r} did not travel with {code!r}"
        assert below[: len(below) - len(below.lstrip())] == lines[at[0]][: len(lines[at[0]]) - len(
            lines[at[0]].lstrip())], f"{comment!r} is not at the indentation of {code!r}"


@pytest.mark.parametrize("path", with_known_failures(fixture_files("flagged"), KNOWN_COMMENT_FAILURES))
def test_fix_keeps_every_comment_not_on_a_deleted_line(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    outcome = fix_text(text, str(path), rules=RULES, unsafe=True)
    check_comments(text, outcome.text, DELETED_COMMENTS.get(fixture_id(path), []),
                   COPIED_COMMENTS.get(fixture_id(path), []))
    check_moved_comments(outcome.text, MOVED_COMMENTS.get(fixture_id(path), []))


@pytest.mark.parametrize("path", sorted((NOTEBOOKS / "flagged").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_fix_keeps_every_comment(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    outcome = process_notebook_text(text, str(path), RULES, Mode(fix=True, unsafe=True))
    assert outcome.fixed, "the flagged notebook is fixed"
    check_comments(parse_notebook(text).text, parse_notebook(outcome.fixed_text).text, [], [])


def test_comment_check_can_fail() -> None:
    before = "x = 1  # one\n# own line\ny = 2  # two\n"
    check_comments(before, "# own line\ny = 2  # two\n", ["# one"], [])
    with pytest.raises(AssertionError, match="lost"):
        check_comments(before, "x = 1  # one\ny = 2  # two\n", [], [])  # an own-line comment dropped
    with pytest.raises(AssertionError, match="still there"):
        check_comments(before, "x = 1\n# own line\ny = 2  # two\n", ["# one"], [])  # the code line stayed


def test_every_listed_fixture_exists() -> None:
    names = {fixture_id(path) for path in fixture_files("flagged")}
    listed = set(DELETED_COMMENTS) | set(COPIED_COMMENTS) | set(MOVED_COMMENTS) | set(KNOWN_COMMENT_FAILURES)
    assert sorted(listed - names) == []
    known = set(KNOWN_FLAGGED) | set(KNOWN_CHANGED)
    assert sorted(known - {fixture_id(p) for p in fixture_files("clean") + CORRECT}) == []


# --- generated programs ------------------------------------------------------------------------------------

# A correct training step, in order; each slot may receive benign statements (comments, schedulers, values that
# are not tensors) that no rule may act on.
RECIPE = (
    "optimizer.zero_grad(set_to_none=True)",
    'with torch.autocast("cuda", dtype=torch.float16):',
    "    outputs = model(inputs)",
    "    loss = loss_fn(outputs, targets)",
    "scaler.scale(loss).backward()",
    "scaler.unscale_(optimizer)",
    "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
    "scaler.step(optimizer)",
    "scaler.update()",
)
BENIGN = (
    "# a comment about {name}",
    "# loss.backward()",
    "# scaler.step(optimizer)",
    "# optimizer.step()",
    "lr_scheduler.step()",
    "scheduler.step(epoch)",
    "warmup.step()",
    "step += 1",
    "count = len(targets)",
    'stats = {"loss": 0.0, "count": 0}',
    'stats["count"] += 1',
    "labels = targets.long()",
    "mask = targets > 0",
    "lr = lr_scheduler.get_last_lr()[0]",
    'name = "scaler.step(optimizer)"',
    "print(step, lr_scheduler.get_last_lr())",
)
# Benign statements that may also stand inside the autocast region (no backward, step or scaler there).
BENIGN_IN_REGION = (
    "# a comment about {name}",
    "# loss.backward()",
    "count = len(targets)",
    "labels = targets.long()",
    "mask = targets > 0",
    'stats = {"loss": 0.0, "count": 0}',
    "    # an indented comment",
)
TRAILING = ("", "  # trailing", "  # loss.backward() was here")


@st.composite
def correct_steps(draw) -> str:
    lines = ["import torch", "", "", "def train(model, loader, optimizer, lr_scheduler, scheduler, warmup, scaler,",
             "          loss_fn, max_norm, epoch, step=0):", "    for inputs, targets in loader:"]
    for index, statement in enumerate(RECIPE):
        in_region = statement.startswith("    ")
        pool = BENIGN_IN_REGION if in_region else BENIGN
        for extra in draw(st.lists(st.sampled_from(pool), max_size=2)):
            pad = "    " if in_region and not extra.startswith("    ") else ""
            lines.append("        " + pad + extra.replace("{name}", str(index)))
        lines.append("        " + statement + draw(st.sampled_from(TRAILING)))
    for extra in draw(st.lists(st.sampled_from(BENIGN), max_size=3)):
        lines.append("        " + extra.replace("{name}", "end"))
    return "\n".join(lines) + "\n"


# Bounded and cheap: ~0.2-0.5 s per example; no shrinking (a failure prints its program as generated).
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow],
               phases=[Phase.explicit, Phase.reuse, Phase.generate])


@FEW
@given(correct_steps())
def test_safe_fixes_leave_generated_correct_steps_alone(text: str) -> None:
    assert compile_error(text, "generated.py") is None
    assert_safe_fixes_change_nothing(text, "generated.py")


# Statements in any order (most are mistakes somewhere): each carries an own-line comment above it or none, so the
# comments a fix may delete (trailing ones on deleted lines) never arise and every comment must survive.
ANY_STATEMENT = (
    "outputs = model(inputs)",
    "loss = loss_fn(outputs, targets)",
    "loss.backward()",
    "scaler.scale(loss).backward()",
    "scaler.unscale_(optimizer)",
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
    "scaler.step(optimizer)",
    "scaler.update()",
    "optimizer.step()",
    "lr_scheduler.step()",
    'scaler = torch.amp.GradScaler("cuda")',
    "count = len(targets)",
    'stats["loss"] = loss.item()',
    "labels = targets.long()",
)
OPENERS = ('with torch.autocast("cuda", dtype=torch.float16):', 'with torch.autocast("cuda", dtype=torch.bfloat16):',
           'with torch.autocast("cuda", enabled=False):', "for inputs, targets in loader:", "if step % 2:")


@st.composite
def mixed_programs(draw) -> str:
    lines = ["import torch", "", "", "def train(model, loader, optimizer, lr_scheduler, scaler, loss_fn, stats,",
             "          inputs, targets, step=0):"]
    depth = 1
    for number in range(draw(st.integers(2, 9))):
        if draw(st.integers(0, 3)) == 0 and depth < 4:
            lines.append("    " * depth + draw(st.sampled_from(OPENERS)))
            depth += 1
        if draw(st.booleans()):
            lines.append("    " * depth + f"# note {number}")
        lines.append("    " * depth + draw(st.sampled_from(ANY_STATEMENT)))
        if depth > 1 and draw(st.integers(0, 2)) == 0:
            depth = draw(st.integers(1, depth - 1))
    return "\n".join(lines) + "\n"


@FEW
@given(mixed_programs(), st.booleans())
def test_fixed_generated_code_compiles_is_final_and_keeps_comments(text: str, unsafe: bool) -> None:
    assert compile_error(text, "generated.py") is None
    outcome = fix_text(text, "generated.py", rules=RULES, unsafe=unsafe)
    assert parse_error(outcome.text) is None and compile_error(outcome.text, "generated.py") is None
    again = fix_text(outcome.text, "generated.py", rules=RULES, unsafe=unsafe)
    assert again.text == outcome.text and not again.applied, "fixing the fixed text changed it again"
    assert comments(outcome.text) == comments(text), "an own-line comment was lost or repeated"


# --- the safety corpus: correct CPU programs run before and after the safe fixes --------------------------------
# fixtures/safe-fixes/corpus/ holds 323 programs written by benchmarks/safety_corpus.py (`--write`); the script runs
# all of them (`python benchmarks/safety_corpus.py`: each original, and each program a safe fix changes, fixed).
# Here: the files are what the script writes, and a fixed sample is fixed and, when a safe fix changes it, run.

def _corpus_script():
    import importlib.util

    path = FIXTURES.parent / "benchmarks" / "safety_corpus.py"
    spec = importlib.util.spec_from_file_location("safety_corpus", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("safety_corpus", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SAFETY_CORPUS = FIXTURES / "safe-fixes" / "corpus"
CORPUS_PROGRAMS = sorted(SAFETY_CORPUS.glob("*.py"))
# Every 32nd program, and the shapes a safe fix once broke (AMP003 after an unscale through a lambda, a nested
# function, a GradScaler subclass's method or a dict of lambda hooks: `unscale_() has already been called`; AMP010
# after a subclass's own update: `No inf checks were recorded prior to update`).
CORPUS_SAMPLE = sorted(set(CORPUS_PROGRAMS[::32]) | {SAFETY_CORPUS / f"amp003_unscale_{shape}_sgd.py" for shape in
                                                      ("lambda", "nested_function", "subclass_method",
                                                       "hooks_dict_on_self")}
                       | {SAFETY_CORPUS / "amp010_update_subclass_method_sgd.py"})


def test_safety_corpus_is_what_its_script_writes() -> None:
    written = {item.name: item for item in _corpus_script().programs()}
    assert len(written) >= 150 and sorted(written) == [path.stem for path in CORPUS_PROGRAMS]
    for path in CORPUS_PROGRAMS:
        item = written[path.stem]
        assert path.read_text(encoding="utf-8") == item.text, \
            f"{path.name}: run `python benchmarks/safety_corpus.py --write`"
        assert json.loads(path.with_suffix(".expect.json").read_text(encoding="utf-8")) == item.spec
    rules = {item.spec["rule"] for item in written.values()}
    assert {"AMP001", "AMP002", "AMP003", "AMP004", "AMP005", "AMP006", "AMP007", "AMP008", "AMP009", "AMP010",
            "AMP011", "AMP014"} <= rules, "every rule with a safe fix"


@pytest.fixture(scope="module")
def corpus_runs():
    """Program runs forked from an interpreter that imported torch once (tests/preloaded.py)."""
    import os
    import subprocess
    import types

    from amplint import harness
    from preloaded import Preloaded

    runner = Preloaded(dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1"))
    saved = harness.subprocess
    harness.subprocess = types.SimpleNamespace(run=runner.run, TimeoutExpired=subprocess.TimeoutExpired)
    yield harness
    harness.subprocess = saved
    runner.close()


@pytest.mark.runtime
@pytest.mark.parametrize("path", CORPUS_SAMPLE, ids=lambda path: path.stem)
def test_safe_fixes_keep_a_corpus_program_running_the_same(path: Path, corpus_runs) -> None:
    harness = corpus_runs
    program = harness.load_program(path)
    row = harness.run_rows([program], [("cpu", program.dtypes[0])], workers=1, timeout=600.0, run_unchanged=True)[0]
    assert row.flagged_run is not None and row.flagged_run.data is not None, f"the original fails: {row.flagged_run}"
    assert row.confirmed, "; ".join(row.problems)
