"""AMP015 island-input-of-unknown-dtype (opt-in)."""

from __future__ import annotations

from typing import Iterator

from amplint import vocabulary as vocab
from amplint.facts import ModuleFacts
from amplint.facts.islands import island_inputs
from amplint.rules.islands import disabled_region_possible, island_finding
from amplint.rules.base import Finding, Rule
from amplint.rules.screen import Ask, Summary


class IslandInputOfUnknownDtype(Rule):
    """## What it does
    Checks for values that come into an `autocast(enabled=False)` region (or a function decorated with one) and
    are computed with there without a cast, when the code does not show their dtype: a user module's or
    function's output (`features = encoder(x)`, the definition not in view or not telling), a parameter no
    project caller is seen passing a low-precision value, a value handed to a function of the user's. It is
    PyTorch's guidance taken literally ("you should cast them to float32 before use in the disabled region"):
    every floating input of an fp32 region is cast on entry. Opt-in: enable it with `extend-select =
    ["AMP015"]` (a prefix or `ALL` does not); a warning.

    Which code to pick: AMP006 (on by default) reports a value the code shows low precision meeting an op that
    computes in it; it is silent on what it does not know, so it makes no false claim about your dtypes. AMP015
    reports the rest of the contract, for a team that wants every island input cast whatever the analysis can
    prove: some of its findings are float32 already at run time (then `.float()` does nothing), none is a
    claim that a value is low.

    ## Why is this bad?
    `autocast(enabled=False)` does not cast anything back to float32. Whether an input arrives low precision
    depends on code the analysis does not see (what a model returns, what a caller passes under its own
    autocast). Where it does, the region computes in bfloat16/float16 or raises on a float32 weight (measured:
    a criterion summing a float16 prediction gives `inf`, against a finite float32 reference). A cast on entry
    makes the region's precision independent of its callers.

    ## Example
    ```python
    import torch

    def score(encoder, sensitive_op, inputs):
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            features = encoder(inputs)
            with torch.autocast(device_type="cuda", enabled=False):
                return sensitive_op(features)
    ```

    ## Use instead
    ```python
    import torch

    def score(encoder, sensitive_op, inputs):
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            features = encoder(inputs)
            with torch.autocast(device_type="cuda", enabled=False):
                return sensitive_op(features.float())
    ```

    ## Fix safety
    Unsafe: the fix adds `.float()` at each use inside the region, never as a safe fix: the value's type is not shown
    (a user module may return a dict, a tuple or a number: `.float()` raises `AttributeError`), and a float64
    input would be narrowed. No fix for a container handed on whole (`head(*levels)`), nor where an in-place op
    in the region writes into the value (`h.mul_(0.5)`: `h.float().mul_(0.5)` would write into a copy); the help
    says to cast once before the region.

    ## Limits
    The same inputs as AMP006 (see `amplint rule AMP006`): names, not attributes; values shown float32, integer
    or bool, metadata, casts (`.to(x)` with `x` not shown counts as a cast) and values kept low on purpose (a
    branch on the value's own dtype, weights cast to its dtype, the other branch of a float32 cast) are not
    reported. A parameter is reported only where the region uses it as a floating tensor, and not at all when
    every project caller the index resolves (one at least) passes it a float32 cast (`h.float()`, or a name bound
    to one): its dtype is shown. A value AMP006 reports is not reported here.
    """

    code = "AMP015"
    name = "island-input-of-unknown-dtype"
    fix = "unsafe"
    severity = "warning"
    opt_in = True
    words = (vocab.AUTOCAST,)
    requires = Ask(Summary.regions_possible) & Ask(disabled_region_possible)

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for found in island_inputs(facts):
            if not found.known:
                yield island_finding(facts, found)
