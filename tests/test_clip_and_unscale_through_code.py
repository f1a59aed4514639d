"""AMP003 through calls and AMP011's conditional unscale_: the boundaries the fixtures do not pin one by one."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint.cli import main
from amplint.engine import lint_text
from amplint.rules import RULES_BY_CODE

REPO = Path(__file__).resolve().parents[1]
AMP003 = REPO / "fixtures" / "AMP003-clip-without-unscale"


def codes(text: str, code: str) -> list[int]:
    result = lint_text(textwrap.dedent(text), "t.py", [RULES_BY_CODE[code]()])
    return [d.location.row for d in result.diagnostics if d.code == code]


def test_a_same_module_helper_is_reported_once_when_a_folder_is_linted(tmp_path):
    """The facts layer follows same-module helpers; the project index must not report them a second time."""
    for name in ("helper_method_same_class.py", "helper_chain_same_module.py", "step_helper_same_class_nofix.py"):
        shutil.copy(AMP003 / "flagged" / name, tmp_path / name)
    result = CliRunner().invoke(main, ["check", "--no-cache", "--select", "AMP003", "--output-format", "json",
                                       str(tmp_path)], catch_exceptions=False)
    found = sorted((Path(d["filename"]).name, d["location"]["row"]) for d in json.loads(result.output))
    assert found == [("helper_chain_same_module.py", 22), ("helper_method_same_class.py", 17),
                     ("step_helper_same_class_nofix.py", 23)]


HELPER = """
import torch


def clip(model):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)


def train(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        {between}
        scaler.step(optimizer)
        scaler.update()
"""


@pytest.mark.parametrize("between, rows", [
    ("clip(model)", [14]),
    ("scaler.unscale_(optimizer); clip(model)", []),  # unscaled first
    ("scaler.update(); clip(model)", []),  # the record starts again
    ("print(model)", []),  # no helper
    ("clip", []),  # not a call
])
def test_a_helper_clip_between_the_backward_and_the_step(between, rows):
    assert codes(HELPER.replace("{between}", between), "AMP003") == rows


LOOP = """
import torch


class Trainer:
    def __init__(self, model, optimizer, clip=1.0, accum=4):
        self.model, self.optimizer, self.clip, self.accum = model, optimizer, clip, accum
        self.scaler = torch.amp.GradScaler("cuda")

    def reset(self):
        self.every = 2

    def fit(self, loader, clip, cfg, key, flags):
        for i, (x, y) in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x, y) / self.accum
            self.scaler.scale(loss).backward()
            if {test}:
                self.scaler.unscale_(self.optimizer)
            if (i + 1) % self.accum == 0:
                self.scaler.step(self.optimizer)
                self.scaler.update()
"""


@pytest.mark.parametrize("test, flagged", [
    ("clip", True),  # a parameter: the same every micro-batch
    ("self.clip is not None", True),  # set only in __init__
    ('cfg["clip"] > 0', True),  # a literal subscript
    ("clip and (i + 1) % self.accum == 0", False),  # reads the loop's target: may be the boundary
    ("self.every", False),  # assigned by another method
    ("cfg[key]", False),  # a subscript by a name
    ('flags.get("clip")', False),  # a call
    ("(i + 1) % self.accum == 0", False),  # the step's own boundary
])
def test_a_conditional_unscale_is_flagged_only_under_a_test_the_same_every_iteration(test, flagged):
    assert bool(codes(LOOP.replace("{test}", test), "AMP011")) is flagged


# torch 2.6's split clip: the fix's `unscale_` goes before the norm is measured, only where that place is known.
SPLIT = """
import torch
from torch.nn.utils import clip_grads_with_norm_, get_total_norm


def step(model, batch, optimizer, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch).mean()
    scaler.scale(loss).backward()
    params = [p for p in model.parameters() if p.grad is not None]
    {norm}
    {between}
    clip_grads_with_norm_(params, 1.0, {total})
    scaler.step(optimizer)
    scaler.update()
"""


def split_fix(norm: str, total: str, between: str = "") -> str | None:
    """The statement the fix inserts `unscale_` before (its text), or None when no fix is offered."""
    from amplint.fixer import fix_text

    text = SPLIT.format(norm=norm, total=total, between=between)
    rows = codes(text, "AMP003")
    assert len(rows) == 1, rows  # reported either way
    fixed = fix_text(text, "t.py", rules=[RULES_BY_CODE["AMP003"]()], unsafe=True).text
    if fixed == text:
        return None
    lines = fixed.splitlines()
    inserted = next(i for i, line in enumerate(lines) if "unscale_(optimizer)" in line)
    return lines[inserted + 1].strip()


@pytest.mark.parametrize("norm, total, between, before", [
    ("total = get_total_norm([p.grad for p in params])", "total", "", "total = get_total_norm("),
    ("grads = [p.grad for p in params]\n    total = get_total_norm(grads)", "total", "", "total = get_total_norm("),
    ("", "get_total_norm(p.grad for p in params)", "", "clip_grads_with_norm_("),  # measured where it clips
    ("total = get_total_norm([p.grad for p in params])", "total", "print(total)", None),  # a statement between
    ("total = get_total_norm([p.grad.clone() for p in params])", "total", "", None),  # copies: not reached
    ("total = compute_norm(params)", "total", "", None),  # a norm from elsewhere
    ("total = get_total_norm([p.grad for p in params])\n    total = total * 2", "total", "", None),  # bound twice
])
def test_the_split_clip_is_fixed_before_its_norm_only(norm, total, between, before):
    got = split_fix(norm, total, between)
    assert got is None if before is None else got is not None and got.startswith(before)


# A clip kept on the object: `None` until configured counts as no value; anything else bound there is not a clip.
STORED = """
from functools import partial
import torch
from torch.nn.utils import clip_grad_norm_


class Trainer:
    def __init__(self, model, optimizer, max_norm):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler("cuda")
        {binding}

    def step(self, loss):
        self.scaler.scale(loss).backward()
        if self.clip_fn is not None:
            self.clip_fn(self.model.parameters())
        self.scaler.step(self.optimizer)
        self.scaler.update()
"""


@pytest.mark.parametrize("binding, rows", [
    ("self.clip_fn = partial(clip_grad_norm_, max_norm=max_norm) if max_norm else None", [16]),
    ("self.clip_fn = None\n        if max_norm:\n            self.clip_fn = partial(clip_grad_norm_, max_norm=1.0)",
     [18]),
    ("self.clip_fn = None", []),  # never a clip
    ("self.clip_fn = partial(clip_grad_norm_, max_norm=1.0) if max_norm else print", []),  # maybe not a clip
    ("self.clip_fn = None if max_norm else None", []),
])
def test_a_stored_clip_none_until_configured(binding, rows):
    assert codes(STORED.format(binding=binding), "AMP003") == rows
