"""amplint against ruff and TorchFix on a large tree, plus scaling runs.

    python benchmarks/bench.py [TREE] [--rounds 5] [--torchfix PATH] [--select AMP001,...]

TREE defaults to the installed torch package's source folder (found with importlib.util.find_spec, which does not
import torch). For several rounds, in turn: amplint cold (--no-cache), amplint with a warm cache, ruff
(`--isolated --select E9,F63 --no-cache`). TorchFix (`torchfix`, from PyPI), when found, is far slower: it runs once, on a
sample of the files (every Nth, about --torchfix-share of the bytes) under a time limit, next to amplint on the
same sample, and its time on the whole tree is extrapolated from its time per byte (the output says so).
Peak memory is the largest resident set of any process of a run (getrusage of the children, in a wrapper
process per run). Then the scaling runs: the tree copied 1, 2 and 4 times, and one generated file of 10,000
and of 100,000 lines. It also times amplint's libcst parse of each file that holds a finding: the least a cold
run needs whatever the prefilter does, each file as the engine parses it (its slice, where it slices one: the
functions no rule needs blanked), the largest on one core. Every measurement is
wall-clock time on this machine as it is: say whether other work was running when you quote the numbers.

Single files: the shipped example (`examples/train_amp.py`, which has findings) and a clean file, each linted
alone, next to `python -c pass` (the interpreter's start, the floor of any Python tool). amplint's runs may write
bytecode (PYTHONDONTWRITEBYTECODE is dropped for them): an installed amplint has its .pyc files, and a run that
compiles its ~70 modules every time measures the compiler, not the linter.

`--cold-target` is the ratio to ruff the cold run is judged against (4 for torch's tree, 5 for a tree of public
training repositories). `--parts`: the tree holds many repositories (each of its folders); each is also linted
alone, cold, and the sum of those runs is a row of its own ("the sum of the parts"), against which the whole
tree's cold run is judged (at most 1.1x: linting repositories together must cost no more than one at a time). Last, one more cold run in a single process shows where the time goes, by phase (imports,
read, screen, index, parse, facts, rules, locate, output: benchmarks/phases.py); `--phases-only` prints just that.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE_SUFFIXES = (".py", ".pyi")
CODE = [REPO]  # the checkout of amplint measured (`--code`): this one unless another is named

# Runs one command and prints {"seconds": wall time, "rss_kb": largest resident set of any process it started}.
WRAPPER = textwrap.dedent("""\
    import json, resource, subprocess, sys, time
    limit = float(sys.argv[1]) or None
    start = time.perf_counter()
    try:
        code = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=limit).returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                      "code": code}))
    """)


def default_tree() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("bench: torch is not installed; give a TREE to lint")
    return Path(list(spec.submodule_search_locations)[0])


def source_files(tree: Path) -> list[Path]:
    found = []
    for folder, subfolders, files in os.walk(tree):
        subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
        found += [Path(folder) / name for name in sorted(files) if name.endswith(SOURCE_SUFFIXES)]
    return found


def measure(command: list[str], cwd: Path, limit: float = 0.0) -> dict:
    """Wall time and peak memory of one run, in a fresh wrapper process."""
    environment = {**os.environ, "PYTHONPATH": str(CODE[0]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    environment.pop("CI", None)
    environment.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed amplint has its bytecode (see above)
    output = subprocess.run([sys.executable, "-c", WRAPPER, str(limit), *command], cwd=cwd, env=environment,
                            capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def amplint_command(paths: list[str], extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "amplint", "check", *paths, "--exit-zero", "--output-format", "json", *extra]


def phases(tree: Path, select: str | None) -> dict:
    """benchmarks/phases.py on the tree: one cold run in one process, its time by phase and its reads."""
    environment = {**os.environ, "PYTHONPATH": str(CODE[0]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    command = [sys.executable, str(REPO / "benchmarks" / "phases.py"), str(tree), "--json"] + (
        ["--select", select] if select else [])
    output = subprocess.run(command, env=environment, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def phase_table(tree: Path, select: str | None, result: dict | None = None) -> str:
    """The table of `phases` (benchmarks/phases.py's own rendering)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from phases import table
    finally:
        sys.path.pop(0)
    return table(result if result is not None else phases(tree, select))


def repositories(tree: Path) -> list[Path]:
    """The tree's folders holding source files, each a repository of a tree of many (`--parts`)."""
    return [folder for folder in sorted(tree.iterdir()) if folder.is_dir() and source_files(folder)]


def find_ruff() -> str:
    ruff = shutil.which("ruff")
    if ruff is None:
        print("bench: ruff not found; installing it with pip", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "ruff"], check=True)
        ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    return ruff


def copy_sources(files: list[Path], tree: Path, destination: Path) -> None:
    for path in files:
        target = destination / path.relative_to(tree)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def generated_program(lines: int) -> str:
    """AMP training code (correct recipes, so every rule analyses it and reports nothing) of about `lines`."""
    header = "import torch\nimport torch.nn.functional as F\n\n\n"
    block = textwrap.dedent('''\
        def train_step_{i}(model, optimizer, scaler, batch, target):
            with torch.autocast("cuda", dtype=torch.float16):
                output = model(batch)
                loss = F.cross_entropy(output, target)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            return loss.detach()


        ''')
    per_block = block.count("\n")
    return header + "".join(block.format(i=i) for i in range((lines - 4) // per_block + 1))


def human_bytes(kb: float) -> str:
    return f"{kb / 1024:.0f} MB"


# Times amplint's own libcst parse (amplint.parsing, cyclic GC paused as the engine does) of what the engine
# parses of each file given (its slice, amplint/facts/slicing.py, where it has one), the best of two, and prints
# {path: seconds}.
PARSE_TIMER = textwrap.dedent("""\
    import json, sys, time
    from amplint.engine import cyclic_gc_paused
    from amplint.facts.slicing import slice_module
    from amplint.parsing import parse_module
    seconds = {}
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        piece = slice_module(text)
        text = piece.text if piece is not None else text
        best = None
        for _ in range(2):
            with cyclic_gc_paused():
                start = time.perf_counter()
                parse_module(text)
                elapsed = time.perf_counter() - start
            best = elapsed if best is None else min(best, elapsed)
        seconds[path] = best
    print(json.dumps(seconds))
    """)


def parse_floor(paths: list[str], cores: int) -> dict | None:
    """The least time any analysis on libcst's tree needs for the files that hold findings (they must be
    parsed, whatever the prefilter does): one file is parsed on one core, the others shared among the cores."""
    if not paths:
        return None
    environment = {**os.environ, "PYTHONPATH": str(CODE[0]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    output = subprocess.run([sys.executable, "-c", PARSE_TIMER, *paths], env=environment, capture_output=True,
                            text=True, check=True).stdout
    seconds = json.loads(output.strip().splitlines()[-1])
    largest = max(seconds, key=seconds.get)
    total = sum(seconds.values())
    return {"files": len(seconds), "total": total, "largest_file": largest, "largest": seconds[largest],
            "floor": max(seconds[largest], total / cores)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree", nargs="?", type=Path, help="folder to lint (default: the installed torch source)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--select", default=None, help="amplint rules (default: all)")
    parser.add_argument("--torchfix", default=None, help="the torchfix executable (default: on PATH)")
    parser.add_argument("--torchfix-share", type=float, default=0.03, help="share of the bytes TorchFix runs on")
    parser.add_argument("--torchfix-limit", type=float, default=600.0, help="seconds before TorchFix is stopped")
    parser.add_argument("--no-scaling", action="store_true", help="skip the scaling runs")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--cold-target", type=float, default=4.0,
                        help="the cold run's target, times ruff (4 for torch's tree, 5 for training repositories)")
    parser.add_argument("--phases-only", action="store_true",
                        help="print only where one cold run's time goes (benchmarks/phases.py)")
    parser.add_argument("--code", type=Path, default=None,
                        help="the amplint checkout to measure (default: this one), e.g. an older commit's clone "
                             "for a before/after table")
    parser.add_argument("--parts", action="store_true",
                        help="TREE holds many repositories (its folders): also lint each alone, cold, and compare "
                             "the whole tree's cold run with the sum of the parts")
    args = parser.parse_args()
    if args.code is not None:
        CODE[0] = args.code.resolve()
    if args.phases_only:
        tree = (args.tree or default_tree()).resolve()
        print(f"tree: {tree}\n{phase_table(tree, args.select)}")
        return

    tree = (args.tree or default_tree()).resolve()
    files = source_files(tree)
    total_bytes = sum(path.stat().st_size for path in files)
    extra = ["--select", args.select] if args.select else []
    ruff = find_ruff()
    torchfix = shutil.which(args.torchfix or "torchfix")
    if args.torchfix and torchfix is None:
        parser.error(f"--torchfix: {args.torchfix!r} is not an executable")
    load_before = os.getloadavg()
    results: dict = {"tree": str(tree), "files": len(files), "bytes": total_bytes, "cores": os.cpu_count(),
                     "python": platform.python_version(), "select": args.select or "all rules"}
    print(f"amplint: {CODE[0]}\ntree: {tree} ({len(files)} files, {total_bytes / 1e6:.1f} MB); {os.cpu_count()} cores; "
          f"Python {platform.python_version()}; rules: {results['select']}; load average before: "
          f"{load_before[0]:.2f}")

    with tempfile.TemporaryDirectory(prefix="amplint-bench-") as scratch:
        work = Path(scratch)
        cache = work / "cache"

        # Everything gets a result, and nothing crashes.
        check = subprocess.run(amplint_command([str(tree)], ["--no-cache", *extra]), cwd=work, capture_output=True,
                               text=True, env={**os.environ, "PYTHONPATH": str(CODE[0])})
        diagnostics = json.loads(check.stdout or "[]")
        counts: dict[str, int] = {}
        for diagnostic in diagnostics:
            counts[diagnostic["code"]] = counts.get(diagnostic["code"], 0) + 1
        results["diagnostics"] = counts
        print(f"amplint findings on the tree: {counts or 'none'}; internal errors (AMP902): {counts.get('AMP902', 0)}")
        flagged = sorted({str((work / d["filename"]).resolve()) for d in diagnostics
                          if d["code"] != "AMP902" and d.get("cell") is None and d["filename"].endswith(".py")})
        floor = parse_floor(flagged, os.cpu_count() or 1)
        results["parse_floor"] = floor
        measure(amplint_command([str(tree)], ["--cache-dir", str(cache), *extra]), work)  # fill the cache

        runs: dict[str, list[dict]] = {"ruff": [], "amplint cold": [], "amplint warm": []}
        commands = {
            # --isolated: a repository's own ruff settings (a required version, excludes) must not stop or shrink
            # ruff's run; amplint reads no other tool's settings either
            "ruff": [ruff, "check", "--isolated", "--select", "E9,F63", "--no-cache", "--exit-zero", "--quiet",
                     str(tree)],
            "amplint cold": amplint_command([str(tree)], ["--no-cache", *extra]),
            "amplint warm": amplint_command([str(tree)], ["--cache-dir", str(cache), *extra]),
        }
        names = list(commands)
        for round_number in range(args.rounds):
            order = names[round_number % len(names):] + names[:round_number % len(names)]  # alternate the order
            for name in order:
                runs[name].append(measure(commands[name], work))

        # One file with findings and a clean file, each alone, next to the interpreter's own start.
        clean = work / "clean.py"
        clean.write_text("import os\n\nprint(os.getcwd())\n")
        singles = {"python -c pass": [sys.executable, "-c", "pass"],
                   "amplint, one file with findings": amplint_command([str(REPO / "examples" / "train_amp.py")],
                                                                      ["--no-cache", *extra]),
                   "amplint, one clean file": amplint_command([str(clean)], ["--no-cache", *extra])}
        for name in singles:
            measure(singles[name], work)  # bytecode written, files in the page cache
        single_runs = {name: [measure(command, work)["seconds"] for _ in range(max(3, args.rounds))]
                       for name, command in singles.items()}
        results["single_files"] = {name: statistics.median(seconds) for name, seconds in single_runs.items()}

        torchfix_row = None
        if torchfix:
            step = max(1, round(1 / max(args.torchfix_share, 1e-6)))
            sample = files[::step]
            sample_bytes = sum(path.stat().st_size for path in sample)
            sample_tree = work / "sample"
            copy_sources(sample, tree, sample_tree)
            fix_run = measure([torchfix, str(sample_tree)], work, limit=args.torchfix_limit)
            ours = [measure(amplint_command([str(sample_tree)], ["--no-cache", *extra]), work) for _ in range(3)]
            ours_median = statistics.median(r["seconds"] for r in ours)
            extrapolated = fix_run["seconds"] * total_bytes / sample_bytes
            torchfix_row = {"sample_files": len(sample), "sample_bytes": sample_bytes, "seconds": fix_run["seconds"],
                            "timed_out": fix_run["code"] == "timeout", "rss_kb": fix_run["rss_kb"],
                            "amplint_on_sample": ours_median, "extrapolated_seconds": extrapolated}
            results["torchfix"] = torchfix_row

        parts = None
        if args.parts:  # each repository alone, cold, as many rounds as the whole tree: the sum of the parts
            folders = repositories(tree)
            per_round = [sum(measure(amplint_command([str(folder)], ["--no-cache", *extra]), work)["seconds"]
                             for folder in folders) for _ in range(args.rounds)]
            parts = {"repositories": len(folders), "median": statistics.median(per_round), "min": min(per_round),
                     "max": max(per_round)}
            results["parts"] = parts

        scaling = None
        if not args.no_scaling:
            scaling = {"copies": [], "files": []}
            for copies in (1, 2, 4):
                copy_root = work / f"copies-{copies}"
                for index in range(copies):
                    copy_sources(files, tree, copy_root / f"copy{index}")
                timing = min(measure(amplint_command([str(copy_root)], ["--no-cache", *extra]), work)["seconds"]
                             for _ in range(2))
                scaling["copies"].append((copies, timing))
                shutil.rmtree(copy_root)
            for lines in (10_000, 100_000):
                path = work / f"generated_{lines}.py"
                path.write_text(generated_program(lines))
                timing = min(measure(amplint_command([str(path)], ["--no-cache", *extra]), work)["seconds"]
                             for _ in range(2 if lines < 100_000 else 1))
                scaling["files"].append((lines, timing))
            results["scaling"] = scaling

    load_after = os.getloadavg()
    results["load_average"] = [load_before[0], load_after[0]]

    # The table -------------------------------------------------------------------------------------------------
    def median(name: str) -> float:
        return statistics.median(r["seconds"] for r in runs[name])

    ruff_median = median("ruff")
    print()
    print(f"{'':38} {'median':>9} {'min':>9} {'max':>9} {'peak RSS':>9} {'vs ruff':>8}")
    rows = [("ruff --select E9,F63 --no-cache", "ruff"), ("amplint, cold (--no-cache)", "amplint cold"),
            ("amplint, warm cache", "amplint warm")]
    for label, name in rows:
        seconds = [r["seconds"] for r in runs[name]]
        peak = max(r["rss_kb"] for r in runs[name])
        print(f"{label:38} {median(name):8.2f}s {min(seconds):8.2f}s {max(seconds):8.2f}s {human_bytes(peak):>9} "
              f"{median(name) / ruff_median:7.2f}x")
        results[name] = {"median": median(name), "min": min(seconds), "max": max(seconds), "rss_kb": peak}
    if parts:
        label = f"amplint, cold, {parts['repositories']} parts alone (sum)"
        print(f"{label:38} {parts['median']:8.2f}s {parts['min']:8.2f}s {parts['max']:8.2f}s {'':>9} "
              f"{parts['median'] / ruff_median:7.2f}x")
    singles = results["single_files"]
    for name, seconds in singles.items():
        print(f"{name:38} {seconds:8.3f}s")
    if torchfix_row:
        status = " (stopped at the limit: a lower bound)" if torchfix_row["timed_out"] else ""
        print(f"{'TorchFix, whole tree (extrapolated)':38} {torchfix_row['extrapolated_seconds']:8.1f}s "
              f"{'':>9} {'':>9} {human_bytes(torchfix_row['rss_kb']):>9} "
              f"{torchfix_row['extrapolated_seconds'] / ruff_median:7.0f}x")
        print(f"  TorchFix ran once on every {round(1 / args.torchfix_share)}th file "
              f"({torchfix_row['sample_files']} files, {torchfix_row['sample_bytes'] / 1e6:.1f} MB): "
              f"{torchfix_row['seconds']:.1f}s{status}; amplint cold on the same files: "
              f"{torchfix_row['amplint_on_sample']:.2f}s "
              f"({torchfix_row['seconds'] / torchfix_row['amplint_on_sample']:.0f}x faster); the whole-tree "
              f"figure is TorchFix's time per byte times the tree's bytes")
    else:
        print("TorchFix: not installed (pip install torchfix, or --torchfix PATH)")
    if scaling:
        base = scaling["copies"][0][1]
        print("\nscaling, amplint cold: " + ", ".join(
            f"{copies}x tree {seconds:.2f}s ({seconds / base:.2f}x)" for copies, seconds in scaling["copies"]))
        (small_lines, small), (large_lines, large) = scaling["files"]
        print(f"one generated file: {small_lines:,} lines {small:.2f}s, {large_lines:,} lines {large:.2f}s "
              f"({large / small:.1f}x for 10x the lines)")

    if floor:
        largest = Path(floor["largest_file"])
        largest = largest.relative_to(tree) if largest.is_relative_to(tree) else largest
        files = f"{floor['files']} file{'s' if floor['files'] != 1 else ''}"
        print(f"\nlibcst parse of the {files} with findings (they must be analysed; each as the engine parses it, "
              f"sliced where it slices): {floor['total']:.2f}s in all, "
              f"the largest {floor['largest']:.2f}s ({largest}); no analysis on libcst's tree can run cold in less "
              f"than {floor['floor']:.2f}s on {os.cpu_count()} cores, {floor['floor'] / ruff_median:.2f}x ruff")
    print("\nwhere a cold run's time goes (one process, so the phases add up; benchmarks/phases.py):")
    phased = phases(tree, args.select)
    results["phases"] = phased
    print(phase_table(tree, args.select, phased))
    cold, warm = results["amplint cold"], results["amplint warm"]
    peak = max(cold["rss_kb"], warm["rss_kb"])
    print("\ntargets:")
    print(f"  amplint cold <= {args.cold_target:g}x ruff: {cold['median'] / ruff_median:.2f}x "
          f"{'met' if cold['median'] <= args.cold_target * ruff_median else 'NOT met'}")
    print(f"  warm cache <= 0.5x ruff cold: {warm['median'] / ruff_median:.2f}x "
          f"{'met' if warm['median'] <= 0.5 * ruff_median else 'NOT met'}")
    one, clean_file, bare = (singles["amplint, one file with findings"], singles["amplint, one clean file"],
                             singles["python -c pass"])
    print(f"  one file with findings (the shipped example) <= 0.25s: {one:.3f}s {'met' if one <= 0.25 else 'NOT met'}")
    print(f"  a clean file <= 3x python -c pass: {clean_file / bare:.1f}x "
          f"{'met' if clean_file <= 3 * bare else 'NOT met'}")
    if torchfix_row:
        speedup = torchfix_row["extrapolated_seconds"] / cold["median"]
        on_sample = torchfix_row["seconds"] / torchfix_row["amplint_on_sample"]
        print(f"  >= 100x faster than TorchFix: {speedup:.0f}x on the whole tree (TorchFix extrapolated) "
              f"{'met' if speedup >= 100 else 'NOT met'}; {on_sample:.0f}x on the sample alone, where amplint's "
              f"start-up (about 0.3s) is most of its time")
    if parts:
        ratio = cold["median"] / parts["median"]
        print(f"  cold run of the whole tree <= 1.1x the sum of its {parts['repositories']} parts alone: {ratio:.2f}x "
              f"{'met' if ratio <= 1.1 else 'NOT met'}")
    if phased.get("files_read"):
        per_file = phased["reads"] / phased["files_read"]
        print(f"  reads per file <= 2 (one process): {per_file:.2f} {'met' if per_file <= 2 else 'NOT met'}")
    if "parses_beyond_one" in phased:
        beyond = phased["parses_beyond_one"]
        print(f"  each file parsed (ast) at most once (one process): {beyond} parses beyond one "
              f"{'met' if not beyond else 'NOT met'}")
    print(f"  peak memory < 300 MB: {human_bytes(peak)} {'met' if peak < 300 * 1024 else 'NOT met'}")
    if scaling:
        ratio = scaling["files"][1][1] / scaling["files"][0][1]
        print(f"  100k-line file < 10x the 10k-line file: {ratio:.1f}x {'met' if ratio < 10 else 'NOT met'}")
    print(f"  no internal errors (AMP902): {counts.get('AMP902', 0)} "
          f"{'met' if not counts.get('AMP902') else 'NOT met'}")
    print(f"load average before/after: {load_before[0]:.2f}/{load_after[0]:.2f} "
          f"(other work on the machine makes every number noisier)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
