"""pytest plugin: `pytest --amplint-watch` runs each test under `amplint.runtime.watch()` and fails a test that
passed but made an AMP mistake (docs/runtime.md). Registered as the `amplint` pytest11 entry point.

pytest loads this module for every run where amplint is installed, so it imports torch (through
amplint.runtime.watcher) only when the option is given.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("amplint")
    group.addoption("--amplint-watch", action="store_true", default=False,
                    help="Run each test under amplint's run-time watcher; fail a test with AMP findings.")
    group.addoption("--amplint-watch-ignore", default="", metavar="CODES",
                    help="Comma-separated codes the watcher does not report (with --amplint-watch).")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    config = item.config
    if not config.getoption("amplint_watch"):
        return (yield)
    from amplint.runtime.watcher import watch  # imports torch

    ignore = [code.strip() for code in config.getoption("amplint_watch_ignore").split(",") if code.strip()]
    with watch(ignore=ignore) as report:
        result = yield
    if report.findings:
        pytest.fail("amplint found AMP mistakes at run time:\n" +
                    "\n".join(f"  {finding}" for finding in report.findings), pytrace=False)
    return result
