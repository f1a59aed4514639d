"""The command line's output details: `--show-fixes` prints the patch, `-q` keeps the frames apart, configuration
errors without click's usage header, binary files named as such, the per-file-ignores message."""

from __future__ import annotations

from pathlib import Path

from samples import CLIP, FLAGGED, invoke_in


def test_show_fixes_prints_the_patch_under_each_finding(tmp_path):
    (tmp_path / "train.py").write_text(CLIP)
    output = invoke_in(tmp_path, ["check", "train.py", "--no-cache", "--show-fixes"]).output
    lines = output.splitlines()
    at = lines.index("  = help: Insert `scaler.unscale_(optimizer)` before the clip (safe fix)")
    assert lines[at + 1] == "    @@ -9 +9,2 @@"
    assert lines[at + 2].startswith("    +") and "scaler.unscale_(optimizer)" in lines[at + 2]
    assert lines[at + 3].startswith("     ") and "clip_grad_norm_" in lines[at + 3]
    assert "@@" not in invoke_in(tmp_path, ["check", "train.py", "--no-cache"]).output


def test_quiet_full_format_keeps_blank_lines_between_findings(tmp_path):
    (tmp_path / "a.py").write_text(FLAGGED)
    (tmp_path / "b.py").write_text(CLIP)
    output = invoke_in(tmp_path, ["check", "a.py", "b.py", "--no-cache", "-q"]).output
    assert "Found" not in output
    assert "\n\nb.py:9:9: AMP003" in output  # the frames stay apart
    concise = invoke_in(tmp_path, ["check", "a.py", "b.py", "--no-cache", "-q", "--output-format", "concise"]).output
    assert "\n\n" not in concise and len(concise.splitlines()) == 2


def test_configuration_errors_have_no_usage_header(tmp_path):
    (tmp_path / "train.py").write_text(FLAGGED)
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nper-file-ignores = "tests/*"\n')
    result = invoke_in(tmp_path, ["check", "train.py"])
    assert result.exit_code == 2
    assert "Usage:" not in result.output and "--help" not in result.output
    assert result.output.startswith("amplint: error: ")
    assert "`per-file-ignores` must be a table of glob = [codes]" in result.output
    assert "not a string" in result.output
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nper-file-ignores = { "a" = "AMP001" }\n')
    result = invoke_in(tmp_path, ["check", "train.py"])
    assert "must be a table of glob = [codes]" in result.output and "not a table whose values" in result.output


def test_binary_files_are_named_as_such(tmp_path: Path):
    (tmp_path / "image.py").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00autocast\xff")
    (tmp_path / "junk.py").write_bytes(b"\xff\xfe\xfa autocast GradScaler\n")
    result = invoke_in(tmp_path, ["check", "image.py", "junk.py", "--no-cache", "--output-format", "concise"])
    assert "image.py:1:1: AMP901 binary or not Python source" in result.output
    assert "junk.py:1:1: AMP901 binary or not Python source" in result.output
    assert "cannot determine the encoding" not in result.output
