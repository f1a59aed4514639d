"""An object is what the code does with it, never what its name looks like.

The facts layer knows an optimizer by use (`ModuleFacts.is_optimizer`: stepped or unscaled by a GradScaler,
`.zero_grad()`, `.param_groups`, built by a known optimizer class); AMP012 asks it, and the prefilter's screen
(`Summary._optimizer_names`) is an upper bound of it with no name-based shortcut. Each case has a pair: flagged
(or kept) by use, silent (or skipped) when only the name matches.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amplint.engine import lint_text
from amplint.facts import ModuleFacts
from amplint.facts import names
from amplint.lazy import libcst as cst
from amplint.index.summary import Summary
from amplint.rules import RULES_BY_CODE

REPO = Path(__file__).resolve().parents[1]


def codes(text: str, code: str) -> list[int]:
    """The lines `code` reports in the text."""
    diagnostics = lint_text(textwrap.dedent(text), "t.py", [RULES_BY_CODE[code]()]).diagnostics
    return [d.location.row for d in diagnostics if d.code == code]


def exact_summary(text: str) -> Summary:
    """A summary that answers from the parsed tree (as the prefilter does for a file that passes its words)."""
    summary = Summary(textwrap.dedent(text))
    summary.exact = True
    summary.parse_tree()
    return summary


# --- AMP012: the optimizer over the half model is the one the scaler steps ---------------------------------------
HALF = """
    import torch
    from project import make_solver, Tracker

    def train(model, loader):
        model.half()
        {bind}
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = model(x).sum()
            scaler.scale(loss).backward()
            scaler.step({stepped})
            scaler.update()
"""


def test_amp012_knows_the_optimizer_by_the_scaler_stepping_it() -> None:
    # a name that says nothing, from a project factory: the scaler steps it, so it is an optimizer
    assert codes(HALF.format(bind="solver = make_solver(model.parameters())", stepped="solver"), "AMP012") == [6]


def test_amp012_ignores_a_name_that_only_looks_like_an_optimizer() -> None:
    bind = "optimizer_stats = Tracker(model.parameters())\n        optimizer = make_solver(master_params)"
    assert codes(HALF.format(bind=bind, stepped="optimizer"), "AMP012") == []


def test_amp012_reads_parameters_in_code_not_in_comments_or_strings() -> None:
    bind = ('optimizer = make_solver(\n            master_params,  # not model.parameters()\n'
            '            "model.parameters()",\n        )')
    assert codes(HALF.format(bind=bind, stepped="optimizer"), "AMP012") == []


# --- the prefilter: a superset of the facts layer, by the same evidence --------------------------------------------
def test_prefilter_keeps_a_stepper_known_by_use() -> None:
    summary = exact_summary("""
        import torch
        from project import make_solver
        def f(model, x):
            solver = make_solver(model)
            solver.zero_grad()
            with torch.autocast("cuda"):
                model(x).sum().backward()
                solver.step()
    """)
    assert "solver" in summary._optimizer_names()
    assert summary.calls_in_region("step", on_stepper=True)


def test_prefilter_skips_a_stepper_known_only_by_its_name() -> None:
    summary = exact_summary("""
        import torch
        def f(model, optimizer_cfg, opt_g, x):
            with torch.autocast("cuda"):
                model(x).sum().backward()
                optimizer_cfg.step()
                opt_g.step()
    """)
    assert not summary._optimizer_names() & {"optimizer_cfg", "opt_g"}
    assert not summary.calls_in_region("step", on_stepper=True)


RECEIVERS = ["optimizer", "opt_g", "solver", "sched", "self.optim", "holder", "thing"]
USES = [
    "{r}.zero_grad()", "scaler.step({r})", "scaler.unscale_({r})", "{r} = torch.optim.SGD(params)",
    "{r} = AdamW(params)", "{r} = make_optimizer(params)", "{r} = create_optimizer_v2(model)",
    "{r} = StepLR(opt, 1)", "for g in {r}.param_groups: pass", "{r}.step()", "print({r})",
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(USES), st.sampled_from(RECEIVERS)), min_size=1, max_size=6))
def test_prefilter_optimizers_are_a_superset_of_the_facts_layer(uses) -> None:
    """Whatever receiver of `.step()` the facts layer takes for an optimizer, the screen keeps."""
    lines = ["import torch", "from torch.optim import AdamW", "from torch.optim.lr_scheduler import StepLR",
             "from timm.optim import create_optimizer_v2", "scaler = torch.amp.GradScaler('cuda')",
             "def train(self, params, model, opt):"]
    lines += ["    " + use.format(r=receiver) for use, receiver in uses]
    lines += ["    " + f"{receiver}.step()" for receiver in RECEIVERS]
    text = "\n".join(lines) + "\n"
    facts = ModuleFacts(cst.parse_module(text))
    screen = exact_summary(text)._optimizer_names()
    for call in facts.calls:
        if call.method == "step" and facts.is_optimizer(call.receiver, call.frame):
            assert call.receiver in screen, text


# --- no identity from a substring of a name ---------------------------------------------------------------------
NAME_SUBSTRING = re.compile(
    r"""["'](?:opt|optim|optimizer|scaler|sched\w*)["']\s+(?:not\s+)?in\b"""  # "optim" in name
    r"""|\.(?:end|start)swith\(\s*\(?\s*["']_?(?:opt|optim|optimizer|scaler)"""  # name.endswith("optimizer")
)


def test_no_rule_or_fact_knows_an_optimizer_or_scaler_by_a_substring_of_its_name() -> None:
    sources = [*sorted((REPO / "amplint" / "facts").glob("*.py")), *sorted((REPO / "amplint" / "rules").glob("*.py")),
               REPO / "amplint" / "prefilter.py"]
    found = [f"{path.name}: {match.group(0)}" for path in sources
             for match in NAME_SUBSTRING.finditer(path.read_text(encoding="utf-8"))]
    assert found == []
    assert not hasattr(names, "is_optimizer_name") and not hasattr(names, "is_optimizer_class")


def test_name_substring_check_can_fail() -> None:
    assert NAME_SUBSTRING.search('return "optimizer" in last')
    assert NAME_SUBSTRING.search('last.endswith(("_opt", "_optim"))')


@pytest.mark.parametrize("last, expected", [
    ("AdamW", True), ("create_optimizer_v2", True), ("create_optimizer", True),
    ("get_optimizer_and_scheduler", False), ("build_optimizer", False), ("optimizer", False),
])
def test_the_screen_for_constructions_reads_the_facts_lists(last: str, expected: bool) -> None:
    assert names.may_build_optimizer(last) is expected


# --- the names of the objects change nothing ---------------------------------------------------------------
PROGRAM = """
    import torch
    from training.setup import get_optimizer_and_scheduler, make_warmup


    def train(model, loader, args):
        {opt}, {sched} = get_optimizer_and_scheduler(model, args)
        {warm} = make_warmup({opt})
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            {opt}.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).sum()
            scaler.scale(loss).backward()
            scaler.step({opt})
            scaler.update()
            {sched}.step()
            {warm}.step()


    def finetune(model, batch, {opt}, {sched}):
        scaler = torch.amp.GradScaler("cuda")
        {opt}.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch).sum()
        scaler.scale(loss).backward()
        {sched}.step()
        {opt}.step()
"""
NAMES = ["optimizer", "lr_scheduler", "opt_scheduler", "warmup", "scheduler", "optim", "solver", "sched", "opt"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.permutations(NAMES))
def test_findings_do_not_depend_on_the_names_of_the_objects(names) -> None:
    """The standard recipe with a factory's optimizer and scheduler and a warm-up object, under any names: only
    the optimizer's bypassing step (known by its zero_grad) is reported, whatever the objects are called."""
    opt, sched, warm = names[:3]
    text = textwrap.dedent(PROGRAM.format(opt=opt, sched=sched, warm=warm))
    diagnostics = lint_text(text, "t.py", [RULES_BY_CODE[code]() for code in ("AMP002", "AMP008", "AMP010")])
    assert [(d.code, d.location.row) for d in diagnostics.diagnostics] == [("AMP008", 28)], text



# --- comments are never code: a comment inside an expression changes no finding ----------------------------------
COMMENTED = {
    "AMP009": ("""import torch


def train(model, loader, optimizer, criterion):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            out = model(x)
        loss = criterion(
            out, y,  # averaged, not scaled
        )
        loss.backward()
        scaler.step(optimizer)
        scaler.update()
""", [12]),  # "scaled" in a comment of the loss's value: the loss is still unscaled
    "AMP012": ("""import torch


def train(model, loader, device):
    model.half()
    model.to(
        device,  # float32 master weights are kept by the optimizer
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""", [5]),  # "float32" in a comment of a `.to(...)`: the model is not converted back
    "AMP004": ("""import torch


def train(model, loader, optimizer):
    for x, y in loader:
        scaler = (torch.amp.GradScaler("cuda")  # the scaler is None only on the first batch: `scaler or`
                  )
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""", [6]),  # "scaler", "None", "or" in a comment of the construction: no lazy `scaler or ...` guard
}


@pytest.mark.parametrize("code", sorted(COMMENTED))
def test_a_comment_inside_the_code_changes_no_finding(code: str) -> None:
    text, rows = COMMENTED[code]
    assert codes(text, code) == rows
    # without the comment the finding is the same: the rule reads the code only
    uncommented = "\n".join(line.split("  #")[0] for line in text.splitlines()) + "\n"
    assert codes(uncommented, code) == rows
