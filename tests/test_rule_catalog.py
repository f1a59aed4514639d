"""The rule catalog (amplint/rules/catalog.py) is what the rule modules declare, and a run imports a rule's module
only for a file that may need it: a file without a word of any rule imports no rule module and no libcst."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from amplint import rules as registry
from amplint.config import Settings
from amplint.outcome import Mode
from amplint.pipeline import process_text
from amplint.selection import LazyRule, all_rules, loaded, rules_for, screen

REPO = Path(__file__).resolve().parent.parent
CLASSES = registry.ALL_RULES


def test_the_catalog_is_generated_from_the_rule_modules():
    assert registry.CATALOG_PATH.read_text(encoding="utf-8") == registry.catalog_source(), \
        "amplint/rules/catalog.py is out of date: run `python -m amplint.rules`"


def test_each_entry_is_its_class():
    modules = sorted(path.stem for path in (REPO / "amplint" / "rules").glob("amp[0-9]*.py"))
    assert [ref.module for ref in registry.CATALOG] == modules
    for ref, rule in zip(registry.CATALOG, CLASSES, strict=True):
        assert ref.load() is rule
        assert (ref.code, ref.name, ref.words, ref.min_torch, ref.fix, ref.severity) == \
            (rule.code, rule.name, rule.words, rule.min_torch, rule.fix, rule.severity)
    assert [ref.code for ref in registry.CATALOG] == sorted(ref.code for ref in registry.CATALOG)


def test_an_entry_answers_for_its_class():
    ref = registry.lookup("AMP003")
    assert ref is registry.lookup("clip-without-unscale") is registry.REFS_BY_CODE["AMP003"]
    assert ref.documentation() == ref.load().documentation() and ref.requires is ref.load().requires
    assert type(ref()) is ref.load()
    assert pickle.loads(pickle.dumps(ref)) is ref
    assert [r.code for r in registry.matching("AMP01")] == ["AMP010", "AMP011", "AMP012", "AMP013", "AMP014"]
    # an opt-in rule: enabled only by its own code or name, covered by any selector that disables
    assert [r.code for r in registry.matching("AMP01", opt_in=True)][-1] == "AMP015"
    assert [r.code for r in registry.matching("AMP015")] == ["AMP015"]
    assert "AMP015" not in [r.code for r in registry.select(None, [])]
    assert "AMP015" in [r.code for r in registry.select(None, [], ["island-input-of-unknown-dtype"])]
    assert "AMP015" not in [r.code for r in registry.select(["AMP015"], ["AMP01"])]
    with pytest.raises(registry.UnknownSelector):
        registry.matching("AMP099")


def test_stand_ins_are_the_rules_they_stand_for():
    handed = rules_for("x.py", list(registry.CATALOG), Settings())
    assert all(isinstance(rule, LazyRule) for rule in handed)
    assert handed == rules_for("y.py", list(registry.CATALOG), Settings())  # one per rule and torch range
    for rule, cls in zip(loaded(handed), CLASSES, strict=True):
        assert type(rule) is cls
    assert [rule.code for rule in all_rules()] == [rule.code for rule in CLASSES if not rule.opt_in]
    assert [rule.code for rule in all_rules(opt_in=True)] == [rule.code for rule in CLASSES]
    copied = pickle.loads(pickle.dumps(handed[0]))
    assert copied.code == handed[0].code and type(copied.rule) is CLASSES[0]


def test_the_screen_imports_only_the_rules_whose_words_a_text_holds():
    """Asked in a fresh interpreter: which rule modules does the screen import for a text?"""
    program = ("import torch\n"
               "scaler = torch.amp.GradScaler('cuda')\n"
               "for batch in data:\n"
               "    scaler.scale(loss).backward()\n")
    code = ("import json, sys\n"
            "from amplint.config import Settings\n"
            "from amplint import rules\n"
            "from amplint.selection import rules_for, screen\n"
            "handed = rules_for('x.py', list(rules.CATALOG), Settings())\n"
            "first = screen('x = 1\\n', handed)\n"
            "before = sorted(m for m in sys.modules if m.startswith('amplint.rules.amp'))\n"
            f"second = screen({program!r}, handed)\n"
            "after = sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('amplint.rules.amp'))\n"
            "print(json.dumps([first, before, [r.code for r in second or []], after]))\n")
    first, before, candidates, after = json.loads(_python(code))
    assert first is None and before == []
    words = {ref.module for ref in registry.CATALOG if any(word in program for word in ref.words)}
    assert set(after) == words and len(words) < len(registry.CATALOG)
    assert set(candidates) <= {ref.code for ref in registry.CATALOG if ref.module in words}


def test_a_clean_file_imports_no_rule_and_no_libcst(tmp_path):
    """`amplint check` on a file without a word of any rule: no rule module, no libcst, no project index, no
    process pool (and the same answer as a run with every rule imported)."""
    clean = tmp_path / "clean.py"
    clean.write_text("x = 1\n", encoding="utf-8")
    code = ("import atexit, json, sys\n"
            "atexit.register(lambda: sys.stderr.write('MODULES ' + json.dumps(sorted(sys.modules)) + '\\n'))\n"
            f"sys.argv = ['amplint', 'check', {str(clean)!r}, '--no-cache']\n"
            "from amplint.__main__ import entry\n"
            "entry()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                            env=_environment(), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "All checks passed!" in result.stdout
    [line] = [line for line in result.stderr.splitlines() if line.startswith("MODULES ")]
    modules = json.loads(line[len("MODULES "):])
    heavy = [m for m in modules if m.startswith(("amplint.rules.amp", "libcst.", "amplint.index", "amplint.fixer",
                                                 "amplint.prefilter", "concurrent", "multiprocessing"))]
    assert heavy == []


def test_the_screen_narrows_as_the_whole_screen_does():
    """The words asked first change nothing: for every fixture, the rules the screen keeps are those the
    prefilter of every rule keeps."""
    from amplint.prefilter import prefilter_for

    every = [rule() for rule in CLASSES]
    handed = rules_for("x.py", list(registry.CATALOG), Settings())
    for path in sorted((REPO / "fixtures").rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        verdict, kept = prefilter_for(every).select(text)
        found = screen(text, handed)
        expected = None if verdict.skipped else [rule.code for rule in every if type(rule) in kept]
        assert (None if found is None else [rule.code for rule in found]) == expected, path


def test_a_fix_still_sees_every_rule():
    """Fixing runs every rule (a fix can wake another): the stand-ins are the rules there too."""
    text = "import torch\nwith torch.cuda.amp.autocast():\n    y = model(x)\n"
    outcome = process_text(text, "t.py", rules_for("t.py", list(registry.CATALOG), Settings()), Mode(fix=True))
    assert outcome.fixed and "torch.amp.autocast" in outcome.fixed_text


def _environment() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                            env=_environment(), timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout
