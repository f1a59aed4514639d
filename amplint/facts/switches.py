"""Code that runs only on one side of a mixed-precision switch: under an `if` testing the scaler itself
(`if scaler is not None:`) or a switch whose words say AMP (`use_amp`, `args.fp16`, `self.mixed_precision`).
Rules stay silent on such code rather than presume which side runs: a backward left unscaled on the side
where no scaler exists is correct."""

from __future__ import annotations

import re

from amplint.facts.model import Event, FrameKind
from amplint.facts.module import ModuleFacts
from amplint.facts.names import code_words


AMP_SWITCH = re.compile(r"(?<![a-z])(amp|fp16|bf16|half|mixed|precision|scaler|scaling|autocast)(?![a-z])")


def guarded_by_amp_test(facts: ModuleFacts, code: Event, other: Event, scaler: str) -> bool:
    """Is `code` inside an `if` (that `other` is not in) testing the scaler or an AMP switch (`use_amp`,
    `args.fp16`, `scaler is not None`, `self.mixed_precision`...)?"""
    name = scaler.rsplit(".", 1)[-1].lower()
    for frame in code.frame.ancestors():
        if frame.kind is FrameKind.FUNCTION:
            break
        if frame.kind is FrameKind.IF and not other.frame.is_within(frame):
            test = " ".join(code_words(frame.node.test)).lower()  # the test's code: a comment says nothing
            if AMP_SWITCH.search(test.replace("_", " ")) or re.search(rf"(?<![\w.]){re.escape(name)}\b", test):
                return True
    return False
