"""`amplint rule` with no argument lists the rules: code, name, fix, default on or off (one line each)."""

from __future__ import annotations

from pathlib import Path

from samples import invoke_in

from amplint import rules as registry


def test_rule_without_an_argument_lists_every_rule(tmp_path: Path):
    result = invoke_in(tmp_path, ["rule"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["code", "name", "fix", "default"]
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.startswith("AMP")}
    assert list(rows) == [ref.code for ref in registry.CATALOG]
    on = {ref.code for ref in registry.select(None, [], [])}
    for ref in registry.CATALOG:
        assert rows[ref.code] == [ref.code, ref.name, ref.fix, "on" if ref.code in on else "off"]
