"""`amplint watch SCRIPT ARGS...`: run a script as `python SCRIPT ARGS...` would, under the watcher."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
import warnings

from amplint.runtime import AmpRuntimeWarning, Finding
from amplint.runtime.watcher import watch


def run_script(script: str, args: list[str], ignore=()) -> tuple[list[Finding], bool]:
    """The findings of one run of `script` with `args` (sys.argv and sys.path[0] as Python sets them), and
    whether the script failed (an exception, or SystemExit with a non-zero status; its traceback is printed)."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    failed = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AmpRuntimeWarning)  # the report shows them
            with watch(ignore=ignore) as report:
                try:
                    runpy.run_path(script, run_name="__main__")
                except SystemExit as exit_:
                    failed = exit_.code not in (None, 0)
                except BaseException:  # noqa: BLE001 - the script's own error, shown as Python shows it
                    if isinstance(sys.exc_info()[1], KeyboardInterrupt):
                        raise
                    traceback.print_exc()
                    failed = True
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return report.findings, failed
