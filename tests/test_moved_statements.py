"""Fixes that move a statement: its comments go with it, and what it moves past decides how safe the move is.

AMP003 moves a late `scaler.unscale_(optimizer)` before the clip; every statement between them then sees
unscaled gradients. Safe only when those statements are of the update phase (`UpdatePhase`) and read no
`.grad`; unsafe when they may compute from gradients; not offered when they backpropagate, step, update,
scale, unscale or zero gradients, or rebind what the `unscale_` names. AMP011 moves an `unscale_` (and the
clip after it) out of a loop to its step.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from amplint.engine import lint_text
from amplint.fixer import fix_text
from amplint.rules import RULES_BY_CODE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def findings(text: str, code: str) -> list[tuple[int, str | None]]:
    """(line, fix applicability or None) of each finding of rule `code`."""
    return [(d.location.row, d.fix.applicability.value if d.fix else None)
            for d in lint_text(text, "t.py", [RULES_BY_CODE[code]()]).diagnostics if d.code == code]


def late_unscale(between: str) -> str:
    """A loop whose clip comes before the `unscale_`, with `between` (lines) between them."""
    body = "".join(f"        {line}\n" for line in textwrap.dedent(between).strip("\n").splitlines())
    return ("import torch\n\n\ndef train(model, loader, optimizer, scaler, ema, log):\n"
            "    step = 0\n"
            "    first = model.weight.grad\n"
            "    for x, y in loader:\n"
            "        with torch.autocast('cuda', dtype=torch.float16):\n"
            "            loss = model(x).sum()\n"
            "        scaler.scale(loss).backward()\n"
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
            f"{body}"
            "        scaler.unscale_(optimizer)\n"
            "        scaler.step(optimizer)\n"
            "        scaler.update()\n")


@pytest.mark.parametrize("between, applicability", [
    ("", "safe"),
    ("step += 1\nprint(f'loss {loss.item():.3f}', step)", "safe"),
    ("log.add_scalar('loss', loss.item(), step)", "safe"),
    ("torch.nn.utils.clip_grad_value_(model.parameters(), 5.0)", "safe"),  # a second clip: unscaling fixes it too
    ("ema.update(model)", "unsafe"),  # project code: may read the gradients
    ("g = model.weight.grad.detach()", "unsafe"),  # reads a gradient the move divides by the scale
    ("if step % 10 == 0:\n    print(model.weight.grad)", "unsafe"),
    ("print(first.item())", "unsafe"),  # `first` is a gradient tensor (bound at the top), unscaled in place
    ("scaler.scale(loss * 0.1).backward()", None),  # scaled gradients added to unscaled ones
    ("optimizer.zero_grad()", None),
    ("optimizer = ema.optimizer", None),  # the unscale_ would unscale another object
    ("scaler.update()", None),
])
def test_amp003_move_is_safe_only_past_update_phase_code(between: str, applicability: str | None) -> None:
    assert findings(late_unscale(between), "AMP003")[0] == (11, applicability)


@pytest.mark.parametrize("name, applicability", [
    ("AMP003-clip-without-unscale/flagged/unscale_after_clip.py", "safe"),
    ("AMP003-clip-without-unscale/flagged/commented_late_unscale.py", "safe"),
    ("AMP003-clip-without-unscale/flagged/late_unscale_after_ema.py", "unsafe"),
    ("AMP003-clip-without-unscale/flagged/late_unscale_after_second_backward_nofix.py", None),
])
def test_amp003_move_fixtures(name: str, applicability: str | None) -> None:
    assert [fix for _, fix in findings((FIXTURES / name).read_text(encoding="utf-8"), "AMP003")] == [applicability]


def test_amp003_two_clips_before_a_late_unscale_end_up_after_it() -> None:
    text = late_unscale("torch.nn.utils.clip_grad_value_(model.parameters(), 5.0)")
    fixed = fix_text(text, "t.py", rules=[RULES_BY_CODE["AMP003"]()]).text
    assert fixed.replace(text.split("scaler.scale(loss)")[0], "") == (
        "scaler.scale(loss).backward()\n        scaler.unscale_(optimizer)\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "        torch.nn.utils.clip_grad_value_(model.parameters(), 5.0)\n"
        "        scaler.step(optimizer)\n        scaler.update()\n")
    assert findings(fixed, "AMP003") == []


def test_amp003_moved_unscale_takes_its_comments_and_leaves_the_clips() -> None:
    text = late_unscale("")
    text = text.replace("        scaler.unscale_", "        # unscale first\n        scaler.unscale_")
    text = text.replace("        torch.nn.utils.clip", "\n        # clip\n        torch.nn.utils.clip")
    fixed = fix_text(text, "t.py", rules=[RULES_BY_CODE["AMP003"]()]).text
    assert "scaler.scale(loss).backward()\n\n        # unscale first\n        scaler.unscale_(optimizer)\n" \
           "        # clip\n        torch.nn.utils.clip_grad_norm_" in fixed
    assert fixed.count("# unscale first") == 1 and fixed.count("# clip") == 1


def test_amp011_moved_statements_take_their_comments() -> None:
    text = textwrap.dedent("""\
        import torch


        def train(model, optimizer, scaler, batches):
            for x in batches:
                scaler.scale(model(x).sum()).backward()
                # once per step
                scaler.unscale_(optimizer)
                # clip after unscaling
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
    """)
    fixed = fix_text(text, "t.py", rules=[RULES_BY_CODE["AMP011"]()]).text
    assert fixed.endswith(
        "        scaler.scale(model(x).sum()).backward()\n"
        "    # once per step\n    scaler.unscale_(optimizer)\n"
        "    # clip after unscaling\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "    scaler.step(optimizer)\n    scaler.update()\n")


def test_amp011_names_in_comments_and_strings_do_not_hold_back_its_move():
    """Whether the kept clip norm is read again in the loop is asked of the code only: a comment or a string naming
    `norm` is not a read (comments and strings are never code)."""
    from amplint.rules import ALL_RULES

    text = (Path(__file__).resolve().parents[1] / "fixtures/AMP011-unscale-twice/flagged/trainer_micro_batches.py"
            ).read_text(encoding="utf-8")
    commented = text.replace("            norm = torch.nn", "            # norm: logged by the caller\n"
                                                            "            norm = torch.nn").replace(
        "        self.scaler.step(", "        print('norm')\n        self.scaler.step(")
    rules = [rule() for rule in ALL_RULES if rule.code == "AMP011"]
    assert [d.code for d in lint_text(commented, "t.py", rules).diagnostics] == ["AMP011"]
    fixed = fix_text(commented, "t.py", rules)
    assert fixed.applied and "        norm = torch.nn.utils.clip_grad_norm_" in fixed.text
