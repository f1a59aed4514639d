"""AMP007's message says when the deprecated spelling warns: a decorator, called or not, warns once, when it is
applied (measured with torch 2.13: `@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)` gives one FutureWarning
where the function is defined and none over three calls); a call in the code warns each time it runs."""

from __future__ import annotations

from amplint.engine import lint_text
from amplint.rules import RULES_BY_CODE

SOURCE = """import torch


@torch.cuda.amp.custom_fwd
def plain(ctx, x):
    return x


@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
def cast(ctx, x):
    return x


def step(model, x):
    with torch.cuda.amp.autocast():
        return model(x)
"""


def test_a_decorator_warns_when_the_function_is_defined_a_call_on_each_call():
    messages = {d.location.row: d.message for d in lint_text(SOURCE, "m.py", [RULES_BY_CODE["AMP007"]()]).diagnostics}
    assert messages[4].endswith("warns when the function is defined"), messages
    assert messages[9].endswith("warns when the function is defined"), messages
    assert messages[15].endswith("warns on each call"), messages
