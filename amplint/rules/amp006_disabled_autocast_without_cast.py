"""AMP006 disabled-autocast-without-cast."""

from __future__ import annotations

from typing import Iterator

from amplint import vocabulary as vocab
from amplint.facts import ModuleFacts
from amplint.facts.islands import island_inputs
from amplint.rules.base import Finding, Rule
from amplint.rules.islands import disabled_region_possible, island_finding
from amplint.rules.screen import Ask, Summary


class DisabledAutocastWithoutCast(Rule):
    """## What it does
    Checks for values the code shows low precision (bfloat16/float16) that come into an `autocast(enabled=False)`
    region (or a function decorated with one) and meet there, uncast, an op that computes in their dtype (a
    reduction, a normalisation, a loss, arithmetic, unary math) or raises on mixed dtypes (an fp32 `nn.Linear`,
    a matmul with a float32 operand). A value is shown low when an op autocast lowers made it (matmul, `@`,
    linear, conv, bmm/addmm/baddbmm, a torch.nn module of autocast's lower-precision list that the code builds)
    under an enabled autocast region in view, or, before the island in the island's own function, under the
    autocast the island itself shows on; or it comes from such a value by ops keeping its dtype (views,
    indexing, arithmetic with Python numbers or other low values); or a project caller passes it to the
    parameter (every call site the project index resolves, in this module or another, through `forward`, a few
    callers up). The output of a module class of this module whose `forward` returns a torch.nn module's output
    (`return self.fc(x)`, `self.fc = nn.Linear(...)`) is what autocast makes of that module's. A value handed
    whole to a method or function of this module (`self._forward_impl(h)`, `self._project(feats[-1])`) is followed
    into its definition, two calls deep: reported when that code computes with the receiving parameter uncast.
    Each finding's notes say where the value became low precision: the op, the autocast region, the call it came
    through, and the callee's line that computes with it.

    ## Why is this bad?
    `autocast(enabled=False)` only stops autocast from casting; it does not cast anything back. PyTorch's docs:
    "you should cast them to float32 before use in the disabled region". The float32 computation the region was
    written for does not happen: an fp32 `nn.Linear` raises `RuntimeError: mat1 and mat2 must have the same
    dtype, but got BFloat16 and Float`, reductions lose precision (measured relative error 1.7e-3 in bfloat16 vs
    1e-8 after `.float()`), and in float16 `h.pow(2).sum()` overflows to `inf`.

    ## Example
    ```python
    import torch
    from torch import nn


    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(512, 512)
            self.head = nn.Linear(512, 10)

        def forward(self, x):
            with torch.autocast(device_type="cuda", dtype=torch.float16):
                features = self.proj(x)
                with torch.autocast(device_type="cuda", enabled=False):
                    return self.head(features)
    ```

    ## Use instead
    ```python
    import torch
    from torch import nn


    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(512, 512)
            self.head = nn.Linear(512, 10)

        def forward(self, x):
            with torch.autocast(device_type="cuda", dtype=torch.float16):
                features = self.proj(x)
                with torch.autocast(device_type="cuda", enabled=False):
                    return self.head(features.float())
    ```

    ## Fix safety
    The fix adds `.float()` at each use inside the region. It is safe only on a value known low precision and
    known to be a floating tensor (the result of a torch op or a torch.nn module that returns one, or of
    dtype-preserving ops on one): there `.float()` does the cast the region was written for. It is unsafe on a
    parameter (the callers seen are not all callers). No fix for a container handed on whole (`head(*levels)`),
    and none where an in-place op in the region writes into the value (`h.mul_(0.5)`, `torch.relu_(h)`,
    `F.dropout(h, inplace=True)`): `.float()` there would write into a temporary copy and silently change the
    result; the help says to cast once before the region (`h = h.float()`).

    ## Limits
    What the code does not show is not reported (AMP015, opt-in, reports it: `amplint rule AMP015`): the output
    of a user module or function (`features = encoder(x)`: its definition is not followed), of a library's
    function, a parameter no project caller is seen passing a low value, a value only handed to a function or
    module of the user's that this module does not define or that does not compute with it (what it computes is
    its definition's), a module class defined in another module unless its `forward` returns only outputs of
    lowering torch.nn modules its class builds (`return self.fc(x)`), a low value combined with a tensor of
    unknown dtype (promotion may make it float32). Not reported, as shown float32 or not floating: values after a float32
    cast (`.float()`, `.double()`, `.to(torch.float32)`, `.type(torch.float32)`, `.type_as(t)` and `.to(t)` with
    `t` float32, a module's `.weight`/`.bias` being float32 unless the code converts the module), after `.to(x)`
    with `x` not shown (a dtype perhaps: unknown), ops given a float32 `dtype=`, ops autocast runs in float32,
    tensor factories, integer and bool values, metadata, a low value combined with a float32 tensor (promotion),
    results of a project function whose every return is computed in its own fp32 region. Not reported either,
    as a low-precision path chosen on purpose: a region that reads the value's own dtype (`if x.dtype is
    torch.bfloat16:`), that casts something to its dtype (`w.to(x.dtype)`, `w.type_as(x)`), the `else` of an `if`
    that casts it to float32 (`if force_fp32: x = x.float() ... else: ...`); values cast to the autocast dtype on
    purpose (`torch.get_autocast_dtype(...)`). Names are followed, not attributes. A region whose body only runs
    autograd (`torch.autograd.grad`, `.backward()`) keeps autograd out of autocast and is not an fp32 region.
    A caller's argument is followed through plain assignments in its function and its own callers' regions
    (three callers up), not through containers, attributes or loops.
    """

    code = "AMP006"
    name = "disabled-autocast-without-cast"
    fix = "sometimes"
    # A disabled region is `autocast(..., enabled=False)` or `False` passed positionally (legacy
    # `autocast(False)`, `torch.autocast("cuda", None, False)`), also through `partial`.
    words = (vocab.AUTOCAST,)
    # A disabled region (a with-statement or a decorator): the region itself says its code runs under an
    # enclosing autocast, whoever opens it.
    requires = Ask(Summary.regions_possible) & Ask(disabled_region_possible)

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for found in island_inputs(facts):
            if found.known:
                yield island_finding(facts, found)
