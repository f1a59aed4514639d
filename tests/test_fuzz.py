"""Fuzzing the command line end to end: whatever the input, the run ends with a defined exit code, prints no
traceback and no internal error, and accounts for every file it was given.

Each example writes a batch of files into a fresh folder and runs the real `amplint` in a child process (so a
crash of the native parser is a failed example, not a dead test run): random bytes, generated training programs
with deep and long expressions and odd newlines and encodings, random notebooks (valid and broken JSON), and
random cache entries. To account for a file, every input that should be analysable carries a known finding (the
deprecated `torch.cuda.amp.GradScaler()`, AMP007); a file that cannot be analysed must be reported as AMP900 or
AMP901 instead. `--fix` is run twice: the second run changes nothing and reports the same findings, a fixed file
still compiles when the original did, and a file that could not be analysed is left byte for byte as it was.

The examples are few and fixed (`derandomize`) so that CI is reproducible and cheap; set AMPLINT_FUZZ_EXAMPLES to
run more, and AMPLINT_FUZZ_EXPLORE=1 to draw new ones. A failure prints the smallest input hypothesis found,
with amplint's output.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings, strategies as st

EXAMPLES = int(os.environ.get("AMPLINT_FUZZ_EXAMPLES", "5"))
EXPLORE = bool(os.environ.get("AMPLINT_FUZZ_EXPLORE"))  # new random examples each run, instead of CI's fixed ones
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not EXPLORE, database=None,
                suppress_health_check=list(HealthCheck))

# The known finding that accounts for an analysable file: AMP007 flags the deprecated spelling on line 2.
HEAD_LINES = ["import torch", "scaler = torch.cuda.amp.GradScaler()"]
HEAD = ("\n".join(HEAD_LINES) + "\n").encode()
KNOWN = "AMP007"
NOT_ANALYSED = {"AMP900", "AMP901"}
# A config of its own, so that no configuration or requirement file above the temporary folder changes the run;
# torch 2.4 is the first whose torch.cuda.amp spellings warn (AMP007 needs it).
PYPROJECT = '[tool.amplint]\ntarget-torch-version = "2.4"\n'
ENV = {**os.environ, "CI": "1", "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"}


# Running amplint ------------------------------------------------------------------------------------------------

class Run:
    """One finished `amplint` command: its exit code, its output, and the JSON report when one was asked for."""

    def __init__(self, args: list[str], returncode: int, out: str, err: str) -> None:
        self.args, self.returncode, self.out, self.err = args, returncode, out, err

    def __repr__(self) -> str:
        return (f"amplint {' '.join(self.args)}\nexit code {self.returncode}\n--- stdout\n{self.out[-4000:]}"
                f"\n--- stderr\n{self.err[-4000:]}")

    def report(self) -> list[dict]:
        try:
            return json.loads(self.out)
        except ValueError as error:
            raise AssertionError(f"the JSON report is not JSON ({error}):\n{self!r}") from None

    def codes_by_file(self) -> dict[str, set[str]]:
        codes: dict[str, set[str]] = {}
        for diagnostic in self.report():
            codes.setdefault(diagnostic["filename"], set()).add(diagnostic["code"])
        return codes


def amplint(root: Path, *args: str) -> Run:
    """Run the real command line in a child process and check what must hold of every run."""
    process = subprocess.run([sys.executable, "-m", "amplint", *args], cwd=root, capture_output=True, env=ENV)
    run = Run(list(args), process.returncode,
              process.stdout.decode("utf-8", "backslashreplace"), process.stderr.decode("utf-8", "backslashreplace"))
    assert run.returncode in (0, 1, 2), f"the run crashed or used an undefined exit code:\n{run!r}"
    assert "Traceback" not in run.out + run.err, f"a traceback:\n{run!r}"
    assert "internal error" not in (run.out + run.err).lower(), f"an internal error:\n{run!r}"
    if "--output-format" in args:
        assert not any(d["code"] == "AMP902" for d in run.report()), f"AMP902:\n{run!r}"
    return run


@contextmanager
def project(files: dict[str, bytes]):
    """A fresh folder holding the files (names relative to it) and its own configuration."""
    root = Path(tempfile.mkdtemp(prefix="amplint-fuzz-"))
    try:
        (root / "pyproject.toml").write_text(PYPROJECT)
        for name, data in files.items():
            (root / name).write_bytes(data)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def compiles(data: bytes) -> bool:
    try:
        compile(data, "<fuzz>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def check_accounted(report: Run, names: list[str], expected: dict[str, set[str]]) -> None:
    """Every file in `expected` is in the report with one of its expected codes (a clean file has no entry)."""
    codes = report.codes_by_file()
    assert set(codes) <= set(names), f"the report names files it was not given: {sorted(set(codes) - set(names))}"
    for name, wanted in expected.items():
        assert codes.get(name, set()) & wanted, (
            f"{name} is not accounted for: expected one of {sorted(wanted)}, got {sorted(codes.get(name, ()))}\n"
            f"{report!r}")


def check_fix(root: Path, names: list[str], before: dict[str, bytes], report: Run, *, python: bool) -> None:
    """`--fix` twice: the second changes nothing and reports what the first left; fixed Python still compiles
    when the original did; a file that could not be analysed is not touched."""
    first = amplint(root, "check", "--no-cache", "--fix", "--output-format", "json", *names)
    after = {name: (root / name).read_bytes() for name in names}
    second = amplint(root, "check", "--no-cache", "--fix", "--output-format", "json", *names)
    again = {name: (root / name).read_bytes() for name in names}
    for name in names:
        assert again[name] == after[name], (
            f"a second --fix changed {name}:\n{after[name]!r}\n->\n{again[name]!r}\n{second!r}")
    assert first.report() == second.report(), f"the second --fix reports otherwise:\n{first!r}\n{second!r}"
    codes = report.codes_by_file()
    for name in names:
        if codes.get(name, set()) & NOT_ANALYSED:
            assert after[name] == before[name], f"{name} could not be analysed, yet --fix changed it:\n{first!r}"
        if python and after[name] != before[name] and compiles(before[name]):
            assert compiles(after[name]), (
                f"the fixed {name} no longer compiles:\n{before[name]!r}\n->\n{after[name]!r}")


# Random bytes ---------------------------------------------------------------------------------------------------

BOM = b"\xef\xbb\xbf"
LATIN1_COOKIE = b"# -*- coding: latin-1 -*-\n"


@st.composite
def random_byte_files(draw) -> tuple[bytes, bool]:
    """A file of random bytes: alone, or after the known finding (then it must be accounted for), behind a BOM or
    a latin-1 coding cookie."""
    noise = draw(st.binary(max_size=200) | st.text(max_size=120).map(lambda text: text.encode("utf-8", "replace")))
    kind = draw(st.sampled_from(["alone", "after", "bom", "latin-1"]))
    if kind == "alone":
        return noise, False
    prefix = {"after": b"", "bom": BOM, "latin-1": LATIN1_COOKIE}[kind]
    return prefix + HEAD + noise, True


@FUZZ
@given(st.lists(random_byte_files(), min_size=1, max_size=6))
def test_random_bytes(files):
    """Random bytes as .py files: the run survives, and a file carrying the known finding is reported (with its
    finding, or as a file that cannot be analysed)."""
    contents = {f"f{number}.py": data for number, (data, _) in enumerate(files)}
    names = list(contents)
    expected = {name: {KNOWN} | NOT_ANALYSED for name, (_, known) in zip(names, files) if known}
    with project(contents) as root:
        report = amplint(root, "check", "--no-cache", "--output-format", "json", *names)
        check_accounted(report, names, expected)
        check_fix(root, names, contents, report, python=True)


# Generated programs ---------------------------------------------------------------------------------------------

def plus_chain(n: int) -> str:
    return "+".join(f"a{i % 7}" for i in range(n))


OPENERS, CLOSERS = ["(", "[", "{", "f("], [")", "]", "}", ")"]


def brackets(n: int) -> str:
    return "".join(OPENERS[i % 4] for i in range(n)) + "x" + "".join(CLOSERS[i % 4] for i in reversed(range(n)))


def and_chain(n: int) -> str:
    return " and ".join(f"b{i % 5}" for i in range(n))


def adjacent_strings(n: int) -> str:
    return "(" + " ".join(f"'s{i % 3}'" for i in range(n)) + ")"


def long_list(n: int) -> str:
    return "[" + ", ".join(str(i) for i in range(n)) + "]"


# Sizes: deep enough to reach amplint's nesting guard sometimes, not so deep as to crash CPython's own parser.
DEEP = st.one_of(
    st.integers(1, 1500).map(plus_chain),
    st.integers(1, 45).map(brackets),
    st.integers(1, 1200).map(and_chain),
    st.integers(1, 2400).map(adjacent_strings),
    st.integers(1, 3000).map(long_list),
)

SIMPLE = st.one_of(
    st.sampled_from([
        "loss = model(x)",
        "loss = criterion(model(x), y)",
        "scaler.scale(loss).backward()",
        "loss.backward()",
        "scaler.unscale_(opt)",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "scaler.step(opt)",
        "scaler.update()",
        "opt.step()",
        "opt.zero_grad()",
        "scaler = torch.amp.GradScaler('cuda')",
        "h = h.float()",
        "pass",
        "# autocast backward scaler.step(opt) # noqa",
        "text = 'with torch.autocast(\"cuda\"): loss.backward()'",
        "doc = '''GradScaler\nscaler.update()'''",
    ]),
    DEEP.map(lambda expr: f"value = {expr}"),
    DEEP.map(lambda expr: f"loss = model(x) * ({expr})"),
)

HEADERS = st.sampled_from([
    "for x, y in loader:",
    "while running:",
    "if step % 2 == 0:",
    "with torch.autocast('cuda'):",
    "with torch.autocast(device_type='cpu', dtype=torch.bfloat16):",
    "with torch.cuda.amp.autocast():",
    "with torch.autocast('cuda', enabled=False):",
    "with torch.no_grad():",
    "def train_step(model, opt, x, y):",
    "class Trainer:",
])

BLOCK = st.recursive(
    st.lists(SIMPLE, min_size=1, max_size=4),
    lambda inner: st.lists(st.one_of(SIMPLE, st.tuples(HEADERS, inner)), min_size=1, max_size=4),
    max_leaves=8,
)


def render(block, indent: str, depth: int = 0) -> list[str]:
    lines = []
    for item in block:
        if isinstance(item, tuple):
            header, body = item
            lines.append(indent * depth + header)
            lines.extend(render(body, indent, depth + 1))
        else:
            lines.extend(indent * depth + line for line in item.split("\n"))
    return lines


@st.composite
def programs(draw) -> bytes:
    """A valid training program around the known finding: nested AMP blocks, deep and long expressions, comments,
    mixed newlines, tabs or spaces, and one of utf-8, utf-8 with a BOM, latin-1 with its cookie."""
    indent = draw(st.sampled_from(["    ", "\t", "  "]))
    lines = HEAD_LINES + render(draw(BLOCK), indent) + ["# café, naïve: not ASCII"]
    encoding = draw(st.sampled_from(["utf-8", "utf-8-sig", "latin-1"]))
    if encoding == "latin-1":
        lines.insert(0, "# -*- coding: latin-1 -*-")
    newlines = draw(st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=len(lines), max_size=len(lines)))
    text = "".join(line + newline for line, newline in zip(lines, newlines))
    return text.encode(encoding)


@FUZZ
@given(st.lists(programs(), min_size=1, max_size=5))
@example([HEAD + f"value = {adjacent_strings(2400)}\n".encode(),  # past the nesting guard: refused, AMP901
          HEAD + f"value = {plus_chain(1500)}\nloss = {and_chain(1200)}\n".encode()])  # deep, still analysed
def test_generated_programs(files):
    """Valid programs: never AMP900 (they compile), each accounted for by its finding (or refused as too deeply
    nested), and fixes that keep them compiling."""
    contents = {f"p{number}.py": data for number, data in enumerate(files)}
    names = list(contents)
    for name, data in contents.items():
        assert compiles(data), f"the generator made a program that does not compile: {data!r}"
    with project(contents) as root:
        report = amplint(root, "check", "--no-cache", "--output-format", "json", *names)
        check_accounted(report, names, {name: {KNOWN, "AMP901"} for name in names})
        for diagnostic in report.report():
            assert diagnostic["code"] != "AMP900", f"a valid program reported as a syntax error:\n{report!r}"
            if diagnostic["code"] == "AMP901":
                assert "nested" in diagnostic["message"], f"a valid program refused:\n{report!r}"
        check_fix(root, names, contents, report, python=True)


# Notebooks ------------------------------------------------------------------------------------------------------

CELL_SOURCES = st.sampled_from([
    "x = 1",
    "%matplotlib inline",
    "!pip install torch",
    "model?",
    "%%time\nloss = model(x)",
    "%%bash\necho autocast backward",
    "with torch.autocast('cuda'):\n    loss = model(x)\nscaler.scale(loss).backward()",
    "for x in loader:\n    scaler.step(opt)\n    scaler.update()",
    "",
])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def as_source(text: str, as_lines: bool):
    return text.splitlines(keepends=True) if as_lines else text


@st.composite
def cells(draw) -> dict:
    kind = draw(st.sampled_from(["code", "code", "markdown", "raw"]))
    text = draw(CELL_SOURCES) if kind == "code" else draw(st.text(max_size=40))
    cell = {"cell_type": kind, "metadata": draw(st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=2)),
            "source": as_source(text, draw(st.booleans()))}
    if kind == "code":
        cell["execution_count"] = draw(st.none() | st.integers(0, 99))
        cell["outputs"] = draw(st.lists(st.fixed_dictionaries(
            {"output_type": st.just("display_data"), "data": st.just({"image/png": "iVBOR\n"}),
             "metadata": JSON_VALUES}), max_size=2))
    if draw(st.booleans()):
        cell["id"] = draw(st.text("abcdef0123456789-", min_size=1, max_size=12))
    return cell


@st.composite
def notebooks(draw) -> tuple[bytes, set[str]]:
    """A notebook and the codes that account for it: a valid nbformat 4 notebook with random cells around one
    holding the known finding, or broken JSON (AMP901)."""
    before, after = draw(st.lists(cells(), max_size=4)), draw(st.lists(cells(), max_size=4))
    head = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": as_source("\n".join(HEAD_LINES), draw(st.booleans()))}
    notebook = {"cells": before + [head] + after,
                "metadata": {"kernelspec": {"name": "python3", "language": "python"},
                             **draw(st.dictionaries(st.sampled_from(["extra", "widgets"]), JSON_VALUES))},
                "nbformat": 4, "nbformat_minor": draw(st.integers(0, 5))}
    keys = list(notebook)
    order = draw(st.permutations(keys))
    text = json.dumps({key: notebook[key] for key in order}, indent=draw(st.sampled_from([None, 1, 2])),
                      ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):
        text = text.replace("/", "\\/")  # escapes JSON allows; not a byte of them may change outside the sources
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    data = text.encode()
    broken = draw(st.sampled_from(["no", "no", "truncated", "garbage", "nbformat 3"]))
    if broken == "truncated":
        return data[:draw(st.integers(0, len(data) - 1))], {"AMP901"}
    if broken == "garbage":
        return draw(st.binary(max_size=60)) + b"{", {"AMP901"}
    if broken == "nbformat 3":
        return json.dumps({**notebook, "nbformat": 3}).encode(), {"AMP901"}
    return data, {KNOWN}


def parsed_without_code_sources(data: bytes):
    """The notebook's JSON with the code cells' sources left out: all that a fix may not change."""
    notebook = json.loads(data)
    for cell in notebook["cells"]:
        if cell.get("cell_type") == "code":
            cell.pop("source")
    return notebook


@FUZZ
@given(st.lists(notebooks(), min_size=1, max_size=5))
def test_random_notebooks(files):
    """Notebooks: each accounted for (its finding, or AMP901 for a broken one); a fix changes only code cells'
    sources and leaves valid JSON."""
    contents = {f"n{number}.ipynb": data for number, (data, _) in enumerate(files)}
    names = list(contents)
    with project(contents) as root:
        report = amplint(root, "check", "--no-cache", "--output-format", "json", *names)
        check_accounted(report, names, {name: wanted for name, (_, wanted) in zip(names, files)})
        check_fix(root, names, contents, report, python=False)
        for name, (data, wanted) in zip(names, files):
            if wanted == {KNOWN}:
                fixed = (root / name).read_bytes()
                assert parsed_without_code_sources(fixed) == parsed_without_code_sources(data), (
                    f"a fix of {name} changed more than code sources:\n{data!r}\n->\n{fixed!r}")


# Cache entries --------------------------------------------------------------------------------------------------

CACHED_PROGRAMS = [
    HEAD,
    HEAD + b"for x in loader:\n    with torch.autocast('cuda'):\n        loss = model(x)\n"
           b"        scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n",
    HEAD + b"def f(:\n",
    b"\xff\xfe autocast",
    HEAD + b"x = " + plus_chain(300).encode() + b"\n",
]

ENTRY_KINDS = st.one_of(
    st.binary(max_size=200).map(lambda data: ("bytes", data)),
    JSON_VALUES.map(lambda value: ("bytes", json.dumps(value).encode())),
    st.fixed_dictionaries({"key": st.text(max_size=8), "checksum": st.text(max_size=8),
                           "diagnostics": st.lists(JSON_VALUES, max_size=2)})
      .map(lambda value: ("bytes", json.dumps(value).encode())),
    st.just(("bytes", b'{"diagnostics": []}')),
    st.integers(0, 400).map(lambda cut: ("truncate", cut)),
    st.integers(0, 400).map(lambda at: ("flip", at)),
    st.sampled_from([("empty", None), ("folder", None), ("fifo", None), ("link", "/dev/zero"),
                     ("link", "missing"), ("unreadable", None)]),
)


def spoil(entry: Path, how: tuple) -> None:
    """Replace a cache entry with something amplint did not write."""
    kind, value = how
    original = entry.read_bytes() if entry.is_file() else b""
    if kind in ("folder", "fifo", "link"):
        entry.unlink()
    if kind == "bytes":
        entry.write_bytes(value)
    elif kind == "truncate":
        entry.write_bytes(original[:value])
    elif kind == "flip" and original:
        at = value % len(original)
        entry.write_bytes(original[:at] + bytes([original[at] ^ 0x01]) + original[at + 1:])
    elif kind == "empty":
        entry.write_bytes(b"")
    elif kind == "folder":
        entry.mkdir()
    elif kind == "fifo" and hasattr(os, "mkfifo"):
        os.mkfifo(entry)
    elif kind == "link":
        entry.symlink_to(value)
    elif kind == "unreadable":
        entry.chmod(0)


def entries(cache: Path) -> list[Path]:
    return sorted(path for path in (cache / "entries").glob("*/*.json"))


@FUZZ
@given(st.lists(ENTRY_KINDS, min_size=1, max_size=6),
       st.lists(st.tuples(st.text("0123456789abcdefxyz", min_size=1, max_size=12), st.binary(max_size=40)),
                max_size=3))
def test_random_cache_entries(spoilers, strays):
    """Whatever the cache holds, a run reports exactly what a run without a cache reports, and `clean` neither
    fails nor touches the project."""
    contents = {f"c{number}.py": data for number, data in enumerate(CACHED_PROGRAMS)}
    names = list(contents)
    with project(contents) as root:
        args = ["check", "--cache-dir", "cache", "--output-format", "json", *names]
        cold = amplint(root, *args)
        uncached = amplint(root, "check", "--no-cache", "--output-format", "json", *names)
        assert cold.report() == uncached.report() and cold.returncode == uncached.returncode, f"{cold!r}\n{uncached!r}"
        check_accounted(cold, names, {"c0.py": {KNOWN}, "c1.py": {KNOWN}, "c2.py": {"AMP900"}, "c3.py": {"AMP901"},
                                      "c4.py": {KNOWN}})
        stored = entries(root / "cache")
        assert stored, "the run cached nothing"
        for number, entry in enumerate(stored):
            spoil(entry, spoilers[number % len(spoilers)])
        for name, data in strays:  # files amplint did not write among its entries (a name like `..` would put
            folder = root / "cache" / "entries" / name[:2]  # one beside the cache: then it is refused, rightly)
            if folder.is_dir() and not folder.is_symlink():
                (folder / (name + ".json")).write_bytes(data)
        for attempt in ("spoilt", "rewritten"):
            warm = amplint(root, *args)
            assert warm.report() == cold.report() and warm.returncode == cold.returncode, (
                f"the {attempt} cache changed the report:\n{cold!r}\n{warm!r}")
        for path in (root / "cache").rglob("*"):  # let clean and the temporary folder's removal see everything
            if not path.is_symlink() and not stat.S_ISFIFO(path.lstat().st_mode):
                path.chmod(0o700 if path.is_dir() else 0o600)
        amplint(root, "clean", "--cache-dir", "cache")
        for name, data in contents.items():
            assert (root / name).read_bytes() == data, f"clean changed {name}"
