"""`amplint watch SCRIPT ARGS...`: run a script as `python SCRIPT ARGS...` would, under the watcher.

Importing this module does not import torch: `run_script` does, once it knows the script can run.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
import warnings
from dataclasses import dataclass, field

from amplint.runtime import AmpRuntimeWarning, RuntimeFinding


class ScriptProblem(Exception):
    """The script cannot be run at all (it does not compile, it cannot be read, torch cannot be imported): a
    one-line message; nothing ran."""


@dataclass
class Outcome:
    """One run of a script: what the watch saw, where it stepped aside, and how the script ended (`status`: None
    when it ended normally, else the exit status `python SCRIPT` would have had, described by `ending`)."""

    findings: list[RuntimeFinding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    status: int | None = None
    ending: str = ""


def _compiled(script: str):
    """The script's code, or ScriptProblem saying why Python could not run it."""
    try:
        with open(script, "rb") as handle:
            source = handle.read()
    except OSError as error:
        raise ScriptProblem(f"cannot read {script}: {error.strerror or error}") from None
    try:
        return compile(source, script, "exec", dont_inherit=True)
    except SyntaxError as error:
        where = f"{script}:{error.lineno}" + (f":{error.offset}" if error.offset else "") if error.lineno else script
        raise ScriptProblem(f"{where}: {type(error).__name__}: {error.msg}: the script cannot run, nothing was "
                            "watched") from None
    except ValueError as error:  # null bytes in the source (Python 3.11)
        raise ScriptProblem(f"{script}: {error}: the script cannot run, nothing was watched") from None


def _import_torch() -> None:
    try:
        import torch  # noqa: F401 - the watcher patches it
    except ImportError as error:
        if (error.name or "").split(".")[0] == "torch" and "torch" not in sys.modules:
            raise ScriptProblem(f"`amplint watch` runs the script with torch, which this Python "
                                f"({sys.executable}) cannot import: install torch (for a CPU build: pip install "
                                "torch --index-url https://download.pytorch.org/whl/cpu), or run amplint from the "
                                "environment that has it") from None
        raise ScriptProblem(f"importing torch failed: {type(error).__name__}: {error}") from None
    except Exception as error:  # noqa: BLE001 - a broken torch installation: its own message, one line
        raise ScriptProblem(f"importing torch failed: {type(error).__name__}: {error}") from None


def _exit_status(code) -> tuple[int | None, str]:
    """The status `python SCRIPT` exits with for `sys.exit(code)` (a message is printed, status 1)."""
    if code is None:
        return None, ""
    if isinstance(code, int):
        return (None, "") if code == 0 else (code, f"exited with status {code}")
    print(code, file=sys.stderr)
    return 1, "exited with a message (status 1)"


def _print_from(error: BaseException, filename: str) -> None:
    """The traceback as `python SCRIPT` prints it: from the script's first frame (not amplint's and runpy's)."""
    tb = error.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != filename:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__)


def run_script(script: str, args: list[str], ignore=()) -> Outcome:
    """Run `script` with `args` (sys.argv and sys.path[0] as Python sets them) under the watcher. An exception of
    the script is printed as Python prints it and ends it with status 1, as `python SCRIPT` would; raises
    ScriptProblem, before anything runs, when the script cannot run."""
    code = _compiled(script)
    _import_torch()
    from amplint.runtime.watcher import watch

    del code  # compiled to check it; runpy compiles it again, as `python SCRIPT` does
    outcome = Outcome()
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AmpRuntimeWarning)  # the report shows them
            with watch(ignore=ignore) as report:
                try:
                    runpy.run_path(script, run_name="__main__")
                except SystemExit as exit_:
                    outcome.status, outcome.ending = _exit_status(exit_.code)
                except KeyboardInterrupt:
                    raise
                except BaseException as error:  # noqa: BLE001 - the script's own error, shown as Python shows it
                    _print_from(error, os.path.abspath(script))
                    outcome.status, outcome.ending = 1, f"raised {type(error).__name__} (status 1)"
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    outcome.findings, outcome.notes = report.findings, report.notes
    return outcome
