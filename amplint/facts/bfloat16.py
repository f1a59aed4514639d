"""Where a module's autocast regions run in bfloat16, and whether float16 may be in play: what a GradScaler serves.

Loss scaling matters for float16 only (bfloat16 has float32's exponent range: nothing underflows). Asked: which
regions the module's calls open and the dtype each runs in (`opened_regions`, `region_dtype`), whether the
module's code names float16 anywhere (`float16_in_code`), and, across the project, the bfloat16 regions the
functions a module calls open (`bfloat16_regions_reached`) or those of the modules calling a function that builds a
scaler and hands it on (`bfloat16_regions_of_callers`).
"""

from __future__ import annotations

import os
import re

from amplint.lazy import libcst as cst

from amplint import calls
from amplint.facts.model import Region, RegionState
from amplint.facts.module import ModuleFacts
from amplint.facts.names import code_words
from amplint.facts.scalers import scaler_builders_handing_on
from amplint.vocabulary import Effect

# Any of these in the module's code (a name, a string value: `code_words`) means float16 may be in play
# somewhere: stay silent. `torch.float16`, `args.fp16`, `"--fp16"`, `x.half()`, `torch.half`, `"half"`.
FLOAT16_WORD = re.compile(r"(?<![bB])float16|fp16|(?:^|\.)half$")
FLOAT16_TEXT = re.compile(r"(?<![bB])float16|fp16|half")  # a superset of the words, searched in the text first


def float16_in_code(facts: ModuleFacts) -> bool:
    """Does the module's code name float16 anywhere (not its comments or docstrings: a comment mentioning
    `torch.float16` runs nothing)? The text is searched first: no word there, none in the code."""
    if not FLOAT16_TEXT.search(facts.source):
        return False
    return any(FLOAT16_WORD.search(word) for word in code_words(facts.module))


def opened_regions(facts: ModuleFacts) -> list[Region]:
    """The autocast regions the module's calls open (any call that makes one, not only with-items), enabled or
    possibly enabled (not those written disabled), in source order."""
    regions = []
    for call in facts.calls:
        region = facts.classify_context(call.node, call.frame)
        if isinstance(region, Region) and region.opener is call.node and region.state is not RegionState.OFF:
            regions.append(region)
    return regions


def region_dtype(facts: ModuleFacts, region: Region) -> str | None:
    """The low dtype a region runs in: the one it names, else what its autocast call shows (`calls.Autocast.
    runs_in`, the index's reading too: no dtype given is the device's default, CPU's bfloat16); None when not
    known (a dtype passed as a variable, `dtype=torch.float32`, an opener that is not a call)."""
    if region.dtype is not None:
        return region.dtype
    return calls.autocast_call(facts.shape(region.opener)).runs_in if isinstance(region.opener, cst.Call) else None


def bfloat16_regions_reached(view) -> tuple[str, int] | None:
    """For a module that opens no region itself: (module name, line) of a bfloat16 region that a function it calls
    opens (a few calls deep, in the project: a decorated `forward` of another module), when every region its calls
    reach is bfloat16; None when none is, or one is float16 or of a dtype not known."""
    from amplint.index.project import calls_leaving

    if view is None:
        return None
    found = None
    for _, _, target in calls_leaving(view, "callee"):
        if view.reaches(target, (Effect.OTHER_REGION,)) is not None:
            return None
        reached = view.reaches(target, (Effect.BFLOAT16_REGION,))
        if reached is not None and found is None:
            doer = reached[0][-1]
            summary = view.function(doer)
            found = (view.project.names.get(doer.module, "?"), summary.lines.get(Effect.BFLOAT16_REGION, summary.line))
    return found


def bfloat16_regions_of_callers(view, callers_of, qualname: str | None = None) -> tuple[str, int] | None:
    """For a module building a scaler in a function that hands it on (returns or stores it:
    `scaler_builders_handing_on`; the function `qualname`, else any): (file name, line) of a bfloat16 region of the
    modules calling that function (`callers_of(view, qualname)`: the (path, index record) of each), when every
    module calling it opens only bfloat16 regions and names no float16 in its text; None when a caller is not
    found, opens a region of another or unknown dtype, or may say float16."""
    builders = scaler_builders_handing_on(view, qualname)
    if builders is None:
        return None
    found = None
    for name in builders:
        callers = callers_of(view, name)
        if not callers:
            return None
        for path, caller in callers:
            text = view.text(path) or ""
            if FLOAT16_TEXT.search(text) or any(Effect.OTHER_REGION in f.does for f in caller.functions.values()):
                return None
            lines = [f.lines[Effect.BFLOAT16_REGION] for f in caller.functions.values()
                     if Effect.BFLOAT16_REGION in f.does]
            if not lines:
                return None
            found = found or (os.path.basename(path), min(lines))
    return found
