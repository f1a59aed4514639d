"""The prefilter never drops a file that a rule flags.

Every fixture file (`fixtures/**/*.py`, present and future), generated variants of each (aliased imports, renamed
variables, the code wrapped in a function or a class, unrelated code around it) and generated AMP programs are
linted with and without the prefilter, and the results must be identical. Each rule is also checked alone, so
that another rule keeping a file cannot hide a rule's own prefilter dropping it.
"""

from __future__ import annotations

import functools
import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amplint import pipeline
from amplint.engine import lint_text
from amplint.index.summary import Summary
from amplint.prefilter import Prefilter, Verdict, prefilter_for
from amplint.rules.islands import disabled_region_possible
from amplint.rules import ALL_RULES
from amplint.rules.base import Rule
from amplint.outcome import Mode
from amplint.pipeline import process_text
from amplint.selection import rules_for
from amplint.source import read_source

REPO = Path(__file__).resolve().parents[1]
_SAFETY_CORPUS = REPO / "fixtures" / "safe-fixes" / "corpus"
# Every fixture but the safety corpus's generated variants (benchmarks/safety_corpus.py: 300+ correct programs of
# ~100 shapes, run before and after --fix elsewhere), of which every 8th is screened here.
FIXTURE_FILES = sorted(p for p in (REPO / "fixtures").rglob("*.py") if p.is_file() and _SAFETY_CORPUS not in p.parents)
FIXTURE_FILES += sorted(_SAFETY_CORPUS.glob("*.py"))[::8]
ALL = [rule() for rule in ALL_RULES]
ERRORS = ("AMP900", "AMP901", "AMP902")
CORE = ("AMP001", "AMP002", "AMP003", "AMP004", "AMP005", "AMP006")  # rules that declare their structure


@functools.lru_cache(maxsize=256)
def _lint_all(text: str) -> tuple:
    return tuple(lint_text(text, "t.py", ALL).diagnostics)


def _lint(text: str, path: str, rules: list, **_options) -> _Result:
    """What the engine reports with `rules`: rules are independent, so it is the all-rules result of the text
    (computed once) restricted to their codes (and the file errors)."""
    codes = {rule.code for rule in rules}
    return _Result([d for d in _lint_all(text) if d.code in codes or d.code in ERRORS])


_SELECT = Prefilter.select


@functools.lru_cache(maxsize=1024)
def _select_alone(prefilter: Prefilter, text: str) -> tuple:
    return _SELECT(prefilter, text)


def _select(prefilter: Prefilter, text: str, view=None) -> tuple:
    """The screen's answer for a text alone (no project view) is a function of the rule set and the text: the
    filtered run and the test's own `decide` ask it once."""
    if view is not None:
        return _SELECT(prefilter, text, view)
    verdict, candidates = _select_alone(prefilter, text)
    return verdict, list(candidates)


@pytest.fixture
def memo_engine(monkeypatch):
    """Both runs of a file (with and without the prefilter) go through `process_text`; the text is analysed
    once, and screened once per rule set."""
    monkeypatch.setattr(pipeline, "lint_text", _lint)
    monkeypatch.setattr(Prefilter, "select", _select)


class _Result:
    def __init__(self, diagnostics):
        self.diagnostics = diagnostics


def _key(diagnostics) -> list:
    return [(d, d.source_line) for d in diagnostics]


def assert_never_dropped(text: str, where: str, alone: bool = True) -> None:
    """All rules together and (`alone`) each rule alone: the prefilter's result equals the unfiltered one, except
    that a file skipped for its words may lose a syntax error (a file is parsed only if some rule could use it).

    All rules together already try each rule's own screen: the engine runs only the rules the screen keeps for the
    file (`Prefilter.select`), so a rule whose screen drops a file it flags loses its finding there too. Each rule
    alone adds the screen of a set of one rule (its words alone decide the first stage)."""
    for rules in [ALL] + ([[rule] for rule in ALL] if alone else []):
        unfiltered = process_text(text, "t.py", rules, Mode(), prefilter=False).diagnostics
        filtered = process_text(text, "t.py", rules, Mode(), prefilter=True).diagnostics
        verdict = prefilter_for(rules).decide(text)
        codes = ",".join(rule.code for rule in rules) if len(rules) == 1 else "all rules"
        if verdict is Verdict.SKIP_WORDS:
            assert filtered == []
            flagged = [d for d in unfiltered if d.code not in ERRORS]
            assert not flagged, f"{where}: {codes}: dropped by words but flagged: {flagged}"
        else:
            assert _key(filtered) == _key(unfiltered), f"{where}: {codes}: {verdict}"


# Variants of a text ---------------------------------------------------------------------------------------------
def _insert_header(text: str, header: str) -> str:
    """Add lines after any `from __future__` imports (which must stay first)."""
    lines = text.splitlines(keepends=True)
    position = 0
    for index, line in enumerate(lines):
        if line.startswith("from __future__"):
            position = index + 1
    return "".join(lines[:position]) + header + "".join(lines[position:])


API_ALIASES = [
    (r"\btorch\.cuda\.amp\.autocast\b", "cuda_ac", "from torch.cuda.amp import autocast as cuda_ac\n"),
    (r"\btorch\.cpu\.amp\.autocast\b", "cpu_ac", "from torch.cpu.amp import autocast as cpu_ac\n"),
    (r"\btorch\.amp\.autocast\b", "amp_ac", "from torch.amp import autocast as amp_ac\n"),
    (r"\btorch\.autocast\b", "ac", "from torch import autocast as ac\n"),
    (r"\btorch\.cuda\.amp\.GradScaler\b", "CudaGS", "from torch.cuda.amp import GradScaler as CudaGS\n"),
    (r"\btorch\.amp\.GradScaler\b", "GS", "from torch.amp import GradScaler as GS\n"),
    (r"\btorch\.GradScaler\b", "TGS", "from torch import GradScaler as TGS\n"),
    (r"\btorch\.nn\.utils\.clip_grad_norm_\b", "cgn", "from torch.nn.utils import clip_grad_norm_ as cgn\n"),
    (r"\btorch\.nn\.utils\.clip_grad_value_\b", "cgv", "from torch.nn.utils import clip_grad_value_ as cgv\n"),
    (r"\btorch\.autograd\.grad\b", "agrad", "from torch.autograd import grad as agrad\n"),
    (r"\btorch\.autograd\.backward\b", "aback", "from torch.autograd import backward as aback\n"),
    (r"\btorch\.no_grad\b", "ng", "from torch import no_grad as ng\n"),
    (r"\btorch\.inference_mode\b", "im", "from torch import inference_mode as im\n"),
]
IMPORT_LINE = re.compile(r"^\s*(?:import|from)\s")


def alias_api(text: str) -> str:
    """`torch.autocast(...)` -> `ac(...)` with `from torch import autocast as ac`, and so on."""
    header = ""
    lines = text.splitlines(keepends=True)
    for pattern, alias, line in API_ALIASES:
        regex = re.compile(pattern)
        changed = False
        for index, source in enumerate(lines):
            if not IMPORT_LINE.match(source) and regex.search(source):
                lines[index] = regex.sub(alias, source)
                changed = True
        if changed:
            header += line
    return _insert_header("".join(lines), header)


def alias_torch(text: str) -> str:
    """`import torch as tt` and `tt.` everywhere outside import lines."""
    out = []
    for line in text.splitlines(keepends=True):
        if IMPORT_LINE.match(line):
            out.append(re.sub(r"^(\s*)import torch(\s*(?:#.*)?)$", r"\1import torch as tt\2", line.rstrip("\r\n"))
                       + line[len(line.rstrip("\r\n")):])
        else:
            out.append(re.sub(r"(?<![\w.])torch\.", "tt.", line))
    return "".join(out)


def alias_modules(text: str) -> str:
    """`import torch.cuda.amp as tca` style module aliases."""
    text = re.sub(r"(?<![\w.])torch\.cuda\.amp\.", "tca.", text)
    text = re.sub(r"(?<![\w.])torch\.amp\.", "tam.", text)
    return _insert_header(text, "import torch.cuda.amp as tca\nimport torch.amp as tam\n")


RENAMES = {"scaler": "gsc", "optimizer": "optim_main", "opt": "opt_b", "loss": "objective", "model": "net",
           "ctx": "context_obj", "x": "inputs_", "self": "this"}


def rename(text: str) -> str:
    for old, new in RENAMES.items():
        text = re.sub(rf"(?<![\w.'\"]){old}\b", new, text)
    return text


def _indent_body(text: str) -> tuple[str, str]:
    lines = text.splitlines(keepends=True)
    future = [line for line in lines if line.startswith("from __future__")]
    rest = "".join(line for line in lines if not line.startswith("from __future__"))
    return "".join(future), textwrap.indent(rest, "    ", lambda line: True) or "    pass\n"


def wrap_function(text: str) -> str:
    future, body = _indent_body(text)
    return f"{future}def _wrapped():\n{body}\n    pass\n"


def wrap_class(text: str) -> str:
    future, body = _indent_body(text)
    return f"{future}class _Wrapped:\n{body}\n    pass\n"


UNRELATED = '''
import json
import os


def _unrelated(path, table):
    """Nothing to do with mixed precision, but full of with-statements, .step() and .update() calls."""
    with open(path) as handle:
        data = json.load(handle)
    table.update(data)
    for walker in (os.walk(path),):
        walker.step() if hasattr(walker, "step") else None
    return table


class _Counter:
    def step(self):
        self.count = getattr(self, "count", 0) + 1
        return self.count
'''


def add_unrelated(text: str) -> str:
    return _insert_header(text, UNRELATED + "\n") + "\n" + UNRELATED.replace("_unrelated", "_unrelated_2").replace(
        "_Counter", "_Counter2")


VARIANTS = {
    "alias_api": alias_api,
    "alias_torch": alias_torch,
    "alias_modules": alias_modules,
    "rename": rename,
    "torch_alias_in_class": lambda text: wrap_class(alias_torch(text)),
    "all_together": lambda text: wrap_function(add_unrelated(rename(alias_api(text)))),
}


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: str(p.relative_to(REPO / "fixtures")))
def test_fixture_never_dropped(path, memo_engine):
    """Every variant of a file that some rule flags; the combined variant of the others (lookalikes). Each rule
    alone screens the file and its combined variant; all rules together screen every variant."""
    text = read_source(str(path)).text
    assert_never_dropped(text, str(path))
    flagged = any(d.code not in ERRORS for d in _lint_all(text))
    for name, variant in VARIANTS.items():
        if flagged or name == "all_together":
            assert_never_dropped(variant(text), f"{path} ({name})", alone=name == "all_together")


def test_there_are_fixtures():
    assert len(FIXTURE_FILES) > 50


# Generated programs ---------------------------------------------------------------------------------------------
IMPORTS = [
    "import torch", "import torch as T", "from torch import autocast as ac", "from torch.cuda.amp import autocast",
    "from torch.cuda.amp import autocast as cac, GradScaler", "from torch.amp import GradScaler as GS",
    "import torch.cuda.amp as tca", "from torch.nn.utils import clip_grad_norm_ as cgn",
    "from torch.autograd import grad as agrad", "import functools", "from accelerate import Accelerator",
    "from torch import no_grad", "import contextlib", "from torch.optim import AdamW as mk",
]
SETUP = [
    "scaler = torch.amp.GradScaler('cuda')", "scaler = GradScaler()", "scaler = GS(enabled=False)",
    "scaler = tca.GradScaler()", "opt = torch.optim.SGD(params, lr=0.1)", "optimizer = make()",
    "ctx = torch.autocast('cuda', dtype=torch.bfloat16)", "off = torch.autocast('cuda', enabled=False)",
    "amp_ctx = functools.partial(torch.autocast, 'cuda', dtype=torch.float16)",
    "Ctx = torch.autocast if use_amp else contextlib.nullcontext", "accelerator = Accelerator()",
    "state = {}", "state.update(a=1)", "o = mk(params)", "sched = torch.optim.lr_scheduler.StepLR(opt, 1)",
]
OPENERS = [
    "with torch.autocast('cuda'):", "with T.autocast('cuda', dtype=T.float16):", "with ac('cuda'):",
    "with autocast():", "with cac(enabled=False):", "with tca.autocast(False):", "with ctx:", "with off:",
    "with amp_ctx():", "with Ctx('cuda'):", "with accelerator.autocast():", "with torch.no_grad():",
    "with no_grad():", "with torch.autocast('cuda', None, False):", "with open(path) as f:",
]
STATEMENTS = [
    "loss.backward()", "scaler.scale(loss).backward()", "opt.step()", "optimizer.step()", "scaler.step(opt)",
    "scaler.update()", "scaler.unscale_(opt)", "torch.nn.utils.clip_grad_norm_(params, 1.0)",
    "cgn(params, 1.0)", "agrad(loss, params)", "torch.autograd.backward(loss)", "y = model(x)", "z = y.sum()",
    "w = z.float()", "h = torch.mm(y, y)", "scaler = torch.amp.GradScaler('cuda')", "accelerator.backward(loss)",
    "model.eval()", "q = y.half()", "pass",
    # small recipes on one line, so that a few draws reach the rules that need several steps in order
    "scaler.scale(loss).backward(); torch.nn.utils.clip_grad_norm_(params, 1.0); scaler.step(opt); scaler.update()",
    "scaler = torch.amp.GradScaler('cuda'); scaler.scale(loss).backward(); scaler.step(opt); scaler.update()",
    "h = model(x); w = torch.mm(h, h).sum()",
    # objects known only by their use: a scaler by scale/step/update together, an optimizer by a scaler stepping it
    "o.step()", "sched.step()", "s.update()", "s.scale(loss); s.step(o)", "scaler.step(o)",
    "for opt in opts: scaler.unscale_(opt)", "scaler.unscale_(opt); scaler.unscale_(opt)",
]
DECORATORS = ["@torch.autocast('cuda')", "@ac('cuda', enabled=False)", "@torch.no_grad()", "@staticmethod"]
FUNCTION_NAMES = ["train", "evaluate", "step_fn", "validate", "run"]


@st.composite
def programs(draw) -> str:
    lines = list(draw(st.lists(st.sampled_from(IMPORTS), max_size=5, unique=True)))
    lines += draw(st.lists(st.sampled_from(SETUP), max_size=4))
    in_class = draw(st.booleans())
    if in_class:
        lines.append("class Trainer:")
    base = "    " if in_class else ""
    defined = []
    for _ in range(draw(st.integers(1, 3))):
        indent = base
        if draw(st.booleans()) or in_class:
            for decorator in draw(st.lists(st.sampled_from(DECORATORS), max_size=1)):
                lines.append(base + decorator)
            name = draw(st.sampled_from(FUNCTION_NAMES))
            defined.append(name)
            lines.append(f"{base}def {name}({'self, ' if in_class else ''}params, loss, x):")
            indent = base + "    "
        if draw(st.booleans()):
            lines.append(f"{indent}for batch in loader:")
            indent += "    "
        statements = STATEMENTS + ([s.replace("scaler", "self.scaler") for s in STATEMENTS if "scaler" in s]
                                   + [f"self.{name}(params, loss, x)" for name in defined] if in_class else
                                   [f"{name}(params, loss, x)" for name in defined])
        before = draw(st.lists(st.sampled_from(statements), max_size=2))
        lines += [indent + s for s in before]
        if draw(st.booleans()):
            lines.append(indent + draw(st.sampled_from(OPENERS)))
            inner = draw(st.lists(st.sampled_from(statements), min_size=1, max_size=4))
            lines += [indent + "    " + s for s in inner]
            if draw(st.booleans()):
                lines.append(indent + "    " + draw(st.sampled_from(OPENERS)))
                lines += [indent + "        " + s for s in draw(st.lists(st.sampled_from(statements), min_size=1,
                                                                             max_size=3))]
        after = draw(st.lists(st.sampled_from(statements), min_size=1, max_size=3))
        lines += [indent + s for s in after]
    if defined and draw(st.booleans()):
        call = f"Trainer().{defined[-1]}" if in_class else defined[-1]
        if draw(st.booleans()):
            lines += ["for batch in loader:", f"    {call}(params, loss, x)"]
        else:
            lines += [draw(st.sampled_from(OPENERS)), f"    {call}(params, loss, x)"]
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(program=programs())
def test_generated_programs_never_dropped(memo_engine, program):
    assert_never_dropped(program, f"generated program:\n{program}")


def test_generated_programs_do_get_flagged():
    """The generator reaches the rules (else the property above would prove nothing)."""
    program = ("import torch\nscaler = torch.amp.GradScaler('cuda')\nfor batch in loader:\n"
               "    with torch.autocast('cuda'):\n        scaler.scale(loss).backward()\n"
               "        torch.nn.utils.clip_grad_norm_(params, 1.0)\n        scaler.step(opt)\n"
               "    scaler = torch.amp.GradScaler('cuda')\n    scaler.update()\n")
    codes = {d.code for d in lint_text(program, "t.py", ALL).diagnostics}
    assert {"AMP001", "AMP002", "AMP004"} <= codes
    assert_never_dropped(program, "example")


# The stages one by one --------------------------------------------------------------------------------------------
def _verdict(text: str, *codes: str) -> Verdict:
    rules = [rule for rule in ALL_RULES if not codes or rule.code in codes]
    return Prefilter(rules).decide(text)


def _analysed_and_flagged(text: str, code: str) -> tuple[bool, bool]:
    """Does the prefilter send the text to the engine for this rule alone, and does the rule flag it there?"""
    rules = [rule() for rule in ALL_RULES if rule.code == code]
    return _verdict(text, code) is Verdict.ANALYSE, bool(lint_text(text, "t.py", rules).diagnostics)


def test_plain_code_is_skipped_by_words():
    assert _verdict("import os\nprint(os.getcwd())\n") is Verdict.SKIP_WORDS


def test_alias_imported_from_a_legacy_module_is_analysed():
    text = ("from torch.cuda.amp import autocast as ac\n"
            "def train(loss):\n    with ac():\n        loss.backward()\n")
    assert _verdict(text, "AMP001") is Verdict.ANALYSE
    assert [d.code for d in lint_text(text, "t.py", [r() for r in ALL_RULES if r.code == "AMP001"]).diagnostics] \
        == ["AMP001"]


def test_words_only_in_comments_and_strings_are_skipped_by_structure():
    text = '"""Explains torch.autocast and GradScaler; call loss.backward() after it."""\nimport torch\nx = 1\n'
    assert _verdict(text, *CORE) is Verdict.SKIP_STRUCTURE


@pytest.mark.parametrize("body, analysed", [
    ("with torch.autocast('cuda'):\n    pass\n", False),
    ("from torch.cuda import amp\nwith amp.autocast():\n    pass\n", True),
    ("import torch.cuda.amp as tca\nscaler = tca.GradScaler()\n", True),
    ("@torch.cuda.amp.custom_fwd\ndef forward(ctx, x):\n    return x\n", True),
    ("import functools\nctx = functools.partial(torch.cuda.amp.autocast, dtype=torch.bfloat16)\n", True),
    ("from torch.cpu.amp import autocast as cpu_ac\nwith cpu_ac():\n    pass\n", True),
])
def test_deprecated_api_needs_a_call_decorator_or_partial(body, analysed):
    text = "import torch\n" + body
    assert _analysed_and_flagged(text, "AMP007") == (analysed, analysed)  # the structure decides exactly


@pytest.mark.parametrize("body", [
    "LEGACY = (torch.cuda.amp.autocast, torch.cpu.amp.autocast)\n",  # a table nothing reads
    "def f(x):\n    return isinstance(x, torch.cuda.amp.GradScaler)\n",
])
def test_a_deprecated_reference_that_may_be_a_value_is_analysed_and_warns_nothing(body):
    """A legacy class named as a value may be handed on (a registry, a factory: AMP007 without a fix), which the
    screen cannot tell from a table nothing reads or an isinstance check: the file is analysed, and the analysis
    finds nothing."""
    assert _analysed_and_flagged("import torch\n" + body, "AMP007") == (True, False)


@pytest.mark.parametrize("body, analysed", [
    ("def f(device_type):\n    with torch.autocast(device_type):\n        pass\n", False),
    ("with torch.autocast('cuda', dtype=torch.float16):\n    pass\n", False),
    ("with torch.autocast('cpu', dtype=torch.bfloat16):\n    pass\n", False),
    ("with torch.autocast(*args, **kwargs):\n    pass\n", False),
    ("with torch.autocast():\n    pass\n", True),
    ("with torch.autocast(torch.bfloat16):\n    pass\n", True),
    ("with torch.autocast(True):\n    pass\n", True),
    ("with torch.autocast(torch.device('cuda')):\n    pass\n", True),
    ("device = torch.device('cuda')\nwith torch.autocast(device_type=device):\n    pass\n", True),
    ("with torch.autocast('cpu', dtype=torch.float32):\n    pass\n", True),
    ("with torch.cpu.amp.autocast(dtype=torch.float32):\n    pass\n", True),
    ("import functools\nac = functools.partial(torch.autocast, torch.device('cuda'))\n", True),
    ("from torch import autocast as ac\nwith ac():\n    pass\n", True),
])
def test_autocast_device_needs_a_suspect_device(body, analysed):
    text = "import torch\n" + body
    assert _analysed_and_flagged(text, "AMP014") == (analysed, analysed)  # the structure decides exactly


def test_an_annotated_device_parameter_is_analysed_and_not_known():
    """`d: torch.device` is an annotation, not a fact (callers may pass "cuda"): screened in, silent."""
    text = "import torch\ndef f(d: torch.device):\n    with torch.autocast(d):\n        pass\n"
    assert _analysed_and_flagged(text, "AMP014") == (True, False)


def test_syntax_error_goes_to_the_engine():
    text = "import torch\nwith torch.autocast('cuda'):\n    loss.backward(\n"
    assert _verdict(text) is Verdict.ANALYSE
    outcome = process_text(text, "t.py", ALL, Mode())
    assert [d.code for d in outcome.diagnostics] == ["AMP900"]


def test_null_byte_goes_to_the_engine():
    text = "import torch\nwith torch.autocast('cuda'):\n    loss.backward()\x00\n"
    assert _verdict(text) is Verdict.ANALYSE


def test_file_noqa_is_skipped_early():
    text = "# amplint: noqa\nimport torch\nwith torch.autocast('cuda'):\n    loss.backward()\n"
    assert _verdict(text) is Verdict.SKIP_NOQA
    assert process_text(text, "t.py", ALL, Mode(), prefilter=False).diagnostics == []


def test_a_rule_that_declares_nothing_is_always_analysed():
    class Anything(Rule):
        code = "AMP999"
        name = "anything"

        def check(self, facts):
            return iter(())

    assert Prefilter([Anything]).decide("x = 1\n") is Verdict.ANALYSE
    assert Prefilter([*ALL_RULES, Anything]).decide("x = 1\n") is Verdict.ANALYSE


def test_a_rule_with_words_but_no_structure_is_analysed_when_a_word_is_there():
    class Words(Rule):
        code = "AMP998"
        name = "words"
        words = ("half",)

        def check(self, facts):
            return iter(())

    assert Prefilter([Words]).decide("x = 1\n") is Verdict.SKIP_WORDS
    assert Prefilter([Words]).decide("# half\n") is Verdict.ANALYSE


def test_no_enabled_rule_skips_everything():
    assert Prefilter([]).decide("import torch\nwith torch.autocast('cuda'):\n    loss.backward()\n").skipped


def test_fix_mode_returns_the_text_unchanged_for_skipped_files():
    outcome = process_text("import os\n", "t.py", ALL, Mode(fix=True))
    assert outcome.fixed_text == "import os\n" and outcome.diagnostics == [] and outcome.fixed == 0


@pytest.mark.parametrize("path", FIXTURE_FILES[::3], ids=lambda p: str(p.relative_to(REPO / "fixtures")))
def test_text_mode_is_an_upper_bound_of_exact_mode(path):
    """`maybe_applies` is monotone: whatever it says yes to with the parsed tree, it says yes to from the text."""
    text = read_source(str(path)).text
    for rule in ALL_RULES:
        text_summary, exact_summary = Summary(text), Summary(text)
        exact_summary.exact = True
        if rule.maybe_applies(exact_summary):
            assert rule.maybe_applies(text_summary), rule.code


def test_summary_questions():
    text = textwrap.dedent("""\
        import torch.cuda.amp as tca
        from torch.autograd import grad as g
        from . import local

        @tca.autocast(False)
        def train(x):
            with open(x):
                y = x.scale(2)
            return g(y)

        value = state.update()
        # step() in a comment
        """)
    summary = Summary(text)
    summary.exact = True
    assert summary.mentions("autocast") and summary.imports_module("torch") and summary.imports_module("torch.cuda")
    assert not summary.imports_module("local")
    assert summary.imports_name("grad") and summary.uses_api("grad") and summary.calls("g")
    assert summary.calls_method("scale") and not summary.calls_method("step")
    assert summary.calls_method_outside_functions("update") and not summary.calls_method_outside_functions("scale")
    assert summary.defines_function(re.compile("train")) and not summary.defines_function(re.compile("eval"))
    assert not summary.accelerator_named()
    assert summary.regions_possible() and disabled_region_possible(summary)
    assert summary.calls_in_region("grad") and summary.calls_in_region("scale")  # the decorated function
    assert not summary.calls_in_region("update")  # module level, no region there


def _exact(text: str) -> Summary:
    summary = Summary(textwrap.dedent(text))
    summary.exact = True
    return summary


def test_regions_through_names_and_callers():
    summary = _exact("""\
        import torch
        ctx = torch.autocast("cuda")

        def inner(loss):
            loss.backward()

        def middle(loss):
            inner(loss)

        def outer(loss):
            with ctx:
                middle(loss)
            optimizer.step()

        with open(p):
            scaler.update()
        """)
    assert summary.regions_possible()
    assert summary.calls_in_region("backward")  # two calls deep
    assert not summary.calls_in_region("step")  # after the block
    assert not summary.calls_in_region("update")  # `open` opens no region


def test_no_region_without_an_opener():
    summary = _exact("""\
        import torch
        from torch import autocast
        x = torch.autocast
        with open(p):
            loss.backward()
        """)
    assert not summary.regions_possible()  # `with open(p)` cannot open one, and nothing is decorated
    assert _exact("import torch\nwith autocast():\n    pass\n").regions_possible()
    assert _exact("import torch\nfrom torch import autocast as ac\nwith ac():\n    pass\n").regions_possible()
    assert _exact("import torch\nwith torch.no_grad():\n    torch.autocast\n").regions_possible() is False


def test_disabled_regions():
    assert disabled_region_possible(_exact("import torch\nwith torch.autocast('cuda', enabled=False):\n    pass\n"))
    assert disabled_region_possible(
        _exact("from functools import partial as p\nimport torch\nf = p(torch.autocast, 'cuda', None, False)\n"))
    assert not disabled_region_possible(_exact("import torch\nwith torch.autocast('cuda'):\n    print(x, False)\n"))


@pytest.mark.parametrize("body, analysed, flagged", [
    # (`h.sum()`: a method of a computed value, a use whatever its type. A parameter counts only where used as a
    # floating tensor, `x.pow(2)`, not handed to a user function nor `.sum()`, as a bool mask is too:
    # amplint/facts/dtypes.py)
    # a disabled block alone: analysed (its callers run it under autocast), a parameter handed on: nothing
    ("def f(model, x):\n    with torch.autocast('cuda', enabled=False):\n        return model(x)\n", True, False),
    # ... a parameter computed with: reported
    ("def f(model, x):\n    with torch.autocast('cuda', enabled=False):\n        return x.pow(2)\n", True, True),
    # ... what the function computed before it: reported
    ("def f(model, x):\n    h = model(x)\n    with torch.autocast('cuda', enabled=False):\n        return h.sum()\n",
     True, True),
    # after an active one (a sibling): what that one made low precision is still low precision
    ("def f(model, x):\n    with torch.autocast('cuda'):\n        h = model(x)\n"
     "    with torch.autocast('cuda', enabled=False):\n        return h.sum()\n", True, True),
    # nested in the same function: analysed, and reported
    ("def f(model, x):\n    with torch.autocast('cuda'):\n        h = model(x)\n"
     "        with torch.autocast('cuda', enabled=False):\n            return h.sum()\n", True, True),
    # nested through a name bound to an opener
    ("def f(model, x):\n    ctx = torch.autocast('cuda')\n    with ctx:\n        h = model(x)\n"
     "        with torch.autocast('cuda', enabled=False):\n            return h.sum()\n", True, True),
    # inside a function decorated with an active autocast
    ("@torch.autocast('cuda')\ndef f(model, x):\n    h = model(x)\n"
     "    with torch.autocast('cuda', enabled=False):\n        return h.sum()\n", True, True),
    # a function decorated with a disabled autocast: its parameters come in from the callers' autocast
    ("@torch.autocast('cuda', enabled=False)\ndef head_fp32(h):\n    return h.pow(2).sum()\n"
     "def f(model, x):\n    return head_fp32(model(x))\n", True, True),
    ("@torch.autocast('cuda', enabled=False)\ndef head_fp32(h):\n    return h.sum()\n", True, False),
    # a region in a nested def: the def's own island, its parameter computed with
    ("def f(model, x):\n    with torch.autocast('cuda'):\n        def g(h):\n"
     "            with torch.autocast('cuda', enabled=False):\n                return h.exp()\n", True, True),
    # no disabled region: not analysed
    ("def f(model, x):\n    with torch.autocast('cuda'):\n        return model(x).exp()\n", False, False),
])
def test_disabled_autocast_needs_a_nested_region(body, analysed, flagged):
    """`flagged`: by the island contract (AMP015: an input of unknown dtype uncast); none of these values is known
    low precision (a user module's output, a parameter no caller shows), so AMP006 is silent on all of them."""
    text = "import torch\n" + body
    assert _analysed_and_flagged(text, "AMP015") == (analysed, flagged)
    assert _analysed_and_flagged(text, "AMP006") == (analysed, False)


def test_a_value_an_op_made_low_is_analysed_and_reported():
    text = ("import torch\ndef f(x, w):\n    with torch.autocast('cuda'):\n        h = torch.mm(x, w)\n"
            "        with torch.autocast('cuda', enabled=False):\n            return h.sum()\n")
    assert _analysed_and_flagged(text, "AMP006") == (True, True)


SCALER = "import torch\nscaler = torch.amp.GradScaler('cuda')\n"


@pytest.mark.parametrize("body, analysed, flagged", [
    # one unscale_ per optimizer, nothing else in the function: nothing can repeat it
    ("def unscale_all(optimizers):\n    for opt in optimizers:\n        scaler.unscale_(opt)\n", False, False),
    ("def unscale(opt):\n    scaler.unscale_(opt)\n", False, False),
    # twice in one function: analysed, and reported
    ("def f(opt):\n    scaler.unscale_(opt)\n    scaler.unscale_(opt)\n", True, True),
    # with the step of the same function: analysed, silent (the documented order)
    ("def f(opt):\n    scaler.unscale_(opt)\n    scaler.step(opt)\n    scaler.update()\n", True, False),
    # in a loop over batches (accumulation without a step every iteration): analysed, reported
    ("def f(opt, batches):\n    for i, batch in enumerate(batches):\n        scaler.unscale_(opt)\n"
     "        if i % 4 == 3:\n            scaler.step(opt)\n            scaler.update()\n", True, True),
    # a loop over optimizers inside a loop over batches: the outer loop repeats it
    ("def f(optimizers, batches):\n    for batch in batches:\n        for opt in optimizers:\n"
     "            scaler.unscale_(opt)\n", True, False),
])
def test_unscale_twice_needs_a_repeat(body, analysed, flagged):
    text = SCALER + body
    assert _analysed_and_flagged(text, "AMP011") == (analysed, flagged)


@pytest.mark.parametrize("body, analysed", [
    # a scheduler's step and a dict's update under autocast: neither is an optimizer's nor a scaler's
    ("def sample(self, latents):\n    with torch.autocast('cuda'):\n        latents = self.scheduler.step(latents)\n"
     "        self.cache.update(latents=latents)\n", False),
    ("def f(model, optimizer, x):\n    optimizer.zero_grad()\n    with torch.autocast('cuda'):\n"
     "        model(x).sum().backward()\n        optimizer.step()\n", True),
    # bound to an optimizer class through an import alias
    ("from torch.optim import AdamW as make\nmodel = torch.nn.Linear(2, 2)\no = make(model.parameters())\n"
     "with torch.autocast('cuda'):\n    o.step()\n", True),
    # known as an optimizer because a scaler steps it
    ("scaler = torch.amp.GradScaler('cuda')\ndef f(trainer_state):\n    with torch.autocast('cuda'):\n"
     "        trainer_state.step()\n    scaler.step(trainer_state)\n", True),
    # a scaler known only by being scaled, stepped and updated, updated in the region
    ("def f(s, o, loss):\n    with torch.autocast('cuda'):\n        s.update()\n"
     "    s.scale(loss)\n    s.step(o)\n", True),
    # named like an optimizer, used like nothing in particular: the name alone is no reason to analyse
    ("def f(model, optimizer_cfg, opt, x):\n    with torch.autocast('cuda'):\n        model(x).sum().backward()\n"
     "        optimizer_cfg.step()\n        opt.step()\n", False),
    # named like nothing in particular, used like an optimizer (a project factory's result, zeroed)
    ("from project import make_solver\ndef f(model, x):\n    solver = make_solver(model)\n    solver.zero_grad()\n"
     "    with torch.autocast('cuda'):\n        model(x).sum().backward()\n        solver.step()\n", True),
])
def test_step_in_autocast_needs_an_optimizer_or_scaler(body, analysed):
    text = "import torch\n" + body
    assert _analysed_and_flagged(text, "AMP002") == (analysed, analysed)  # the structure decides exactly


def test_regex_questions_do_not_backtrack_on_comment_lines():
    text = "x = scale # " + "#" * 5000 + ")" * 5000 + "\n"
    assert not Summary(text).has_token("scale", kind="call")


# One parse, one visit, rules once -------------------------------------------------------------------------------
def test_the_engine_parses_and_collects_once_per_file(monkeypatch):
    import libcst

    from amplint import engine
    from amplint.facts import collect

    parses, collectors = [], []
    original_parse, original_init = libcst.parse_module, collect.Collector.__init__

    def counting_parse(*args, **kwargs):
        parses.append(1)
        return original_parse(*args, **kwargs)

    def counting_init(self, *args, **kwargs):
        collectors.append(1)
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(engine.cst, "parse_module", counting_parse)
    monkeypatch.setattr(collect.Collector, "__init__", counting_init)
    text = read_source(str(REPO / "examples" / "train_amp.py")).text
    diagnostics = lint_text(text, "train_amp.py", ALL).diagnostics
    assert diagnostics and len(parses) == 1 and len(collectors) == 1


def test_rules_are_instantiated_once_per_process():
    from amplint.config import Settings

    first = rules_for("a.py", list(ALL_RULES), Settings())
    second = rules_for("b.py", list(ALL_RULES), Settings())
    assert all(a is b for a, b in zip(first, second, strict=True))
    assert prefilter_for(first) is prefilter_for(second)
