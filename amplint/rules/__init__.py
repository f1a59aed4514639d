"""The rule registry: every rule amplint has, and selection by code, prefix or name."""

from __future__ import annotations

from amplint.rules.amp001_backward_in_autocast import BackwardInAutocast
from amplint.rules.amp002_step_in_autocast import StepInAutocast
from amplint.rules.amp003_clip_without_unscale import ClipWithoutUnscale
from amplint.rules.amp004_scaler_per_iteration import ScalerPerIteration
from amplint.rules.amp005_scaler_in_inference import ScalerInInference
from amplint.rules.amp006_disabled_autocast_without_cast import DisabledAutocastWithoutCast
from amplint.rules.amp007_deprecated_amp_api import DeprecatedAmpApi
from amplint.rules.amp008_step_bypasses_scaler import StepBypassesScaler
from amplint.rules.amp009_unscaled_backward import UnscaledBackward
from amplint.rules.amp010_step_without_update import StepWithoutUpdate
from amplint.rules.amp011_unscale_twice import UnscaleTwice
from amplint.rules.amp012_half_model_with_scaler import HalfModelWithScaler
from amplint.rules.amp013_scaler_with_bfloat16 import ScalerWithBfloat16
from amplint.rules.amp014_autocast_device_mismatch import AutocastDeviceMismatch
from amplint.rules.base import Rule

ALL_RULES: tuple[type[Rule], ...] = (
    BackwardInAutocast,
    StepInAutocast,
    ClipWithoutUnscale,
    ScalerPerIteration,
    ScalerInInference,
    DisabledAutocastWithoutCast,
    DeprecatedAmpApi,
    StepBypassesScaler,
    UnscaledBackward,
    StepWithoutUpdate,
    UnscaleTwice,
    HalfModelWithScaler,
    ScalerWithBfloat16,
    AutocastDeviceMismatch,
)
RULES_BY_CODE: dict[str, type[Rule]] = {rule.code: rule for rule in ALL_RULES}
RULES_BY_NAME: dict[str, type[Rule]] = {rule.name: rule for rule in ALL_RULES}


class UnknownSelector(ValueError):
    """A code, prefix or name that matches no rule."""


def matching(selector: str) -> list[type[Rule]]:
    """Rules a selector names: `ALL`, a full code, a code prefix (`AMP00`), or a kebab-case name."""
    selector = selector.strip()
    if selector.upper() == "ALL":
        return list(ALL_RULES)
    if selector in RULES_BY_NAME:
        return [RULES_BY_NAME[selector]]
    found = [rule for rule in ALL_RULES if rule.code.startswith(selector.upper())] if selector[:1].isalpha() else []
    if not found or not selector.upper().startswith("AMP"):
        raise UnknownSelector(selector)
    return found


def lookup(code_or_name: str) -> type[Rule]:
    rule = RULES_BY_CODE.get(code_or_name.upper()) or RULES_BY_NAME.get(code_or_name)
    if rule is None:
        raise UnknownSelector(code_or_name)
    return rule


def select(select: list[str] | None, ignore: list[str], extend_select: list[str] | None = None) -> list[type[Rule]]:
    """The rules enabled by select/extend-select/ignore, in registry order."""
    chosen: set[type[Rule]] = set()
    for selector in (select if select is not None else ["ALL"]):
        chosen.update(matching(selector))
    for selector in extend_select or []:
        chosen.update(matching(selector))
    for selector in ignore:
        chosen.difference_update(matching(selector))
    return [rule for rule in ALL_RULES if rule in chosen]
