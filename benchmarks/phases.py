"""Where a cold run's time goes: amplint's phases, timed in one process.

    python benchmarks/phases.py TREE [--select AMP001,...] [--json]

Runs `amplint check TREE --no-cache --jobs 1` in this process with a few of amplint's functions wrapped: each
wrapper adds the wall time spent inside it to its phase, less the time spent in a nested phase (a record the
screen builds for the index is index time, not screen time). The reads of files are counted too (every read of a
source goes through `amplint.source.read_bytes`): reads per file, and the most of one file; and the parses of a
module's text with the stdlib `ast` (`ast.parse`, by the screen, the index and the rules that read a tree): parses
per file, and those beyond one per file (a text parsed more often than the files holding it were read with it:
identical files, copied between repositories, are each parsed once); parses of texts no file holds (an import
statement parsed alone, a notebook's code) are counted apart. What no phase claims is "other" (start-up and
imports, discovery, the pipeline's own bookkeeping). One process and one core, so the phases add up to the run;
a parallel run divides the analysis among the cores.

A phase's functions are named below by module and qualified name; a name that no longer exists is reported
(`missing`), so a refactoring that moves a phase shows in the table instead of silently zeroing a row.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import hashlib
import io
import json
import sys
import time

PHASES: list[tuple[str, list[str]]] = [
    ("imports", ["<every import>"]),
    ("read", ["amplint.source:read_bytes", "amplint.source:decode_source"]),
    ("screen", ["amplint.selection:has_words", "amplint.selection:screen", "amplint.prefilter:Prefilter.select"]),
    ("index", ["amplint.parallel:index_project", "amplint.index.build:index_file",
               "amplint.index.functions:index_text"]),
    ("parse", ["amplint.parsing:parse_module"]),
    ("facts", ["amplint.facts.walk:walk"]),
    ("rules", ["<every rule's check>"]),
    ("locate", ["amplint.facts.locate:locate", "amplint.facts.locate:locate_all"]),
    ("output", ["amplint.output:render"]),
]


class Clock:
    """Exclusive wall time per phase: the innermost running phase is charged."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {name: 0.0 for name, _ in PHASES}
        self.calls: dict[str, int] = {name: 0 for name, _ in PHASES}
        self.stack: list[list] = []  # [phase, started, time spent in nested phases]
        self.reads: dict[str, int] = {}  # path -> times its bytes were read (`amplint.source:read_bytes`)
        self.holding: dict[bytes, set[str]] = {}  # digest of bytes read -> the files holding them
        self.parses: dict[bytes, int] = {}  # digest of a module's text (UTF-8) -> times `ast.parse` parsed it

    def wrap(self, phase: str, function):
        counts_reads = function.__module__ == "amplint.source" and function.__name__ == "read_bytes"

        @functools.wraps(function)
        def timed(*args, **kwargs):
            if counts_reads and args:
                self.reads[str(args[0])] = self.reads.get(str(args[0]), 0) + 1
            frame = [phase, time.perf_counter(), 0.0]
            self.stack.append(frame)
            try:
                found = function(*args, **kwargs)
                if counts_reads and args and isinstance(found, bytes):
                    self.holding.setdefault(_digest(found.removeprefix(b"\xef\xbb\xbf")), set()).add(str(args[0]))
                return found
            finally:
                self.stack.pop()
                elapsed = time.perf_counter() - frame[1]
                self.spent[phase] += elapsed - frame[2]
                self.calls[phase] += 1
                if self.stack:
                    self.stack[-1][2] += elapsed
        timed.__amplint_phase__ = phase
        return timed


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


@contextlib.contextmanager
def counting_parses(clock: Clock):
    """Every `ast.parse` of a module's text while active, counted by the text (an expression's, as
    `ast.literal_eval` parses one, is not a module's)."""
    original = ast.parse

    def parse(source, filename="<unknown>", mode="exec", *args, **kwargs):
        if mode == "exec" and isinstance(source, str):
            key = _digest(source.encode("utf-8", "surrogatepass"))
            clock.parses[key] = clock.parses.get(key, 0) + 1
        return original(source, filename, mode, *args, **kwargs)

    ast.parse = parse
    try:
        yield
    finally:
        ast.parse = original


def _replace_everywhere(original, replacement) -> None:
    """Every amplint module's name for `original` (`from m import f` copies it) now means `replacement`."""
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] != "amplint" or module is None:
            continue
        for attribute, value in list(vars(module).items()):
            if value is original:
                setattr(module, attribute, replacement)


class Wrapper:
    """Wraps each phase's functions as their modules are imported (a module the run never imports is not
    imported for the table: a lazy import stays lazy)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.pending: dict[str, list[tuple[str, str]]] = {}
        self.rules = False
        self.absent: list[str] = []  # named functions that their imported module does not have
        for phase, specs in PHASES:
            for spec in specs:
                if not spec.startswith("<"):
                    module, _, qualified = spec.partition(":")
                    self.pending.setdefault(module, []).append((phase, qualified))

    def start(self) -> None:
        bootstrap = sys.modules["importlib._bootstrap"]
        original = bootstrap._find_and_load
        timed = self.clock.wrap("imports", original)

        def find_and_load(name, *args, **kwargs):
            module = timed(name, *args, **kwargs)
            self.imported(name)
            return module
        find_and_load.__wrapped__ = original
        bootstrap._find_and_load = find_and_load
        for name in list(sys.modules):
            self.imported(name)

    def stop(self) -> None:
        bootstrap = sys.modules["importlib._bootstrap"]
        bootstrap._find_and_load = bootstrap._find_and_load.__wrapped__

    def imported(self, name: str) -> None:
        module = sys.modules.get(name)
        if module is None:
            return
        for phase, qualified in self.pending.pop(name, []):
            if not self._wrap(module, phase, qualified):
                self.absent.append(f"{name}:{qualified}")
        if name.startswith("amplint.rules.amp"):  # a rule module: its rule's `check`
            for value in list(vars(module).values()):
                check = getattr(value, "__dict__", {}).get("check") if isinstance(value, type) else None
                if callable(check) and getattr(value, "code", None) and not hasattr(check, "__amplint_phase__"):
                    setattr(value, "check", self.clock.wrap("rules", check))
                    self.rules = True

    def _wrap(self, module, phase: str, qualified: str) -> bool:
        *path, attribute = qualified.split(".")
        owner = module
        for part in path:
            owner = getattr(owner, part, None)
            if owner is None:
                return False
        original = getattr(owner, attribute, None)
        if original is None:
            return False
        wrapped = self.clock.wrap(phase, original)
        if isinstance(owner, type):
            setattr(owner, attribute, wrapped)
        else:
            _replace_everywhere(original, wrapped)
        return True

    def missing(self) -> list[str]:
        """The named functions that do not exist (a phase moved); a module the run never imported is not
        missing (its phase took no time)."""
        return self.absent


def measure(tree: str, select: str | None = None) -> dict:
    started = time.perf_counter()  # the imports are part of a run
    clock = Clock()
    wrapper = Wrapper(clock)
    wrapper.start()
    from amplint.cli import main

    arguments = ["check", tree, "--no-cache", "--jobs", "1", "--exit-zero", "--output-format", "json"]
    if select:
        arguments += ["--select", select]
    with contextlib.redirect_stdout(io.StringIO()), counting_parses(clock):
        try:
            main.main(arguments, standalone_mode=False)
        except SystemExit:
            pass
    total = time.perf_counter() - started
    wrapper.stop()
    claimed = sum(clock.spent.values())
    # a text some file holds is a module's; the others are pieces of one (an import statement parsed alone before
    # its file is, a notebook's code), counted apart
    files_parsed = {key: count for key, count in clock.parses.items() if key in clock.holding}
    return {"total": total, "phases": dict(clock.spent), "calls": dict(clock.calls), "other": total - claimed,
            "missing": wrapper.missing(), "files_read": len(clock.reads), "reads": sum(clock.reads.values()),
            "most_reads": max(clock.reads.values(), default=0), "parses": sum(files_parsed.values()),
            "parses_beyond_one": sum(max(0, count - len(clock.holding[key])) for key, count in files_parsed.items()),
            "most_parses": max(files_parsed.values(), default=0),
            "other_parses": sum(count for key, count in clock.parses.items() if key not in clock.holding)}


def table(result: dict) -> str:
    total = result["total"]
    lines = [f"{'phase':10} {'seconds':>9} {'share':>7} {'calls':>8}"]
    for phase, _ in PHASES:
        seconds = result["phases"][phase]
        lines.append(f"{phase:10} {seconds:9.2f} {seconds / total:6.0%} {result['calls'][phase]:8d}")
    lines.append(f"{'other':10} {result['other']:9.2f} {result['other'] / total:6.0%}")
    lines.append(f"{'total':10} {total:9.2f}   (one process, --jobs 1)")
    files = result.get("files_read", 0)
    if files:
        lines.append(f"reads: {result['reads']} of {files} files, {result['reads'] / files:.2f} per file "
                     f"(at most {result['most_reads']} of one)")
        if "parses" in result:
            lines.append(f"parses (ast): {result['parses']}, {result['parses'] / files:.2f} per file; "
                         f"{result['parses_beyond_one']} beyond one per file "
                         f"(at most {result['most_parses']} of one text); {result.get('other_parses', 0)} of "
                         "texts no file holds (an import statement alone, a notebook's code)")
    if result["missing"]:
        lines.append("not found, their time is in other (a phase moved?): " + ", ".join(result["missing"]))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree")
    parser.add_argument("--select", default=None)
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    args = parser.parse_args()
    result = measure(args.tree, args.select)
    print(json.dumps(result) if args.json else table(result))


if __name__ == "__main__":
    main()
