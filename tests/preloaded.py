"""Program runs forked from one interpreter that has imported torch already, for the runtime harness's tests.

Each harness run starts a fresh interpreter, and importing torch there costs about two seconds of CPU: more than
most programs' own work, and so is importing `torch._dynamo`, which every optimizer's construction does
(torch/_compile.py: 1.2 s of a 1.5 s run). `Preloaded` starts one interpreter (the "zygote") with the environment
every run starts with, imports both in it once, and forks each run from it: the child takes the run's environment,
folder, `sys.argv` and `sys.path[0]`, runs the file as `__main__` and exits as the interpreter would (1 and the
traceback on stderr after an exception, SystemExit's code). The test swaps it in for `subprocess.run` inside the
harness only, so the harness's own code (its environment, the parsing of the last line, tracebacks and exit codes)
is what runs; a run asked with any other start-up environment goes to a real interpreter.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# Variables a run may change in the child: read only by the program itself (or, PYTEST_CURRENT_TEST, by nobody),
# never at interpreter start.
PER_RUN = frozenset({"AMPLINT_DEVICE", "AMPLINT_DTYPE", "PYTEST_CURRENT_TEST"})

ZYGOTE = r'''
import json, os, runpy, select, sys, traceback

import torch  # noqa: F401 - the import every run would repeat
import torch._dynamo  # noqa: F401 - and the one every optimizer's construction makes (torch/_compile.py)


def child(path, cwd, env, out, err):
    code = 1
    try:
        for fd, name in ((1, out), (2, err)):
            target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.argv = [path]
        sys.path[0] = os.path.dirname(os.path.abspath(path))
        try:
            runpy.run_path(path, run_name="__main__")
            code = 0
        except SystemExit as stop:
            if stop.code is None:
                code = 0
            elif isinstance(stop.code, int):
                code = stop.code
            else:
                print(stop.code, file=sys.stderr)
        except BaseException as error:  # the traceback from the program's own frames on, as the interpreter's
            frames = error.__traceback__
            while frames is not None and frames.tb_frame.f_code.co_filename != path:
                frames = frames.tb_next
            traceback.print_exception(type(error), error, frames or error.__traceback__)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


running = {}
pending = b""
while True:
    ready, _, _ = select.select([0], [], [], 0.02 if running else None)
    while running:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        os.write(1, (json.dumps(["exit", running.pop(pid), os.waitstatus_to_exitcode(status)]) + "\n").encode())
    if not ready:
        continue
    chunk = os.read(0, 1 << 16)
    if not chunk:
        break
    pending += chunk
    while b"\n" in pending:
        line, pending = pending.split(b"\n", 1)
        ident, path, cwd, env, out, err = json.loads(line)
        pid = os.fork()
        if pid == 0:
            child(path, cwd, env, out, err)
        running[pid] = ident
        os.write(1, (json.dumps(["pid", ident, pid]) + "\n").encode())
'''


def is_program_run(args) -> bool:
    """A harness program run, `subprocess.run([sys.executable, FILE.py], ...)` (amplint.harness.run_file); not
    another command the harness starts (its CUDA probe, `python -c ...`)."""
    return len(args) == 2 and args[0] == sys.executable and str(args[1]).endswith(".py")


class Preloaded:
    """The zygote, and `run`, a stand-in for `subprocess.run([sys.executable, FILE], ...)` that forks from it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = dict(env)
        self.process = subprocess.Popen([sys.executable, "-c", ZYGOTE], env=self.env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE)
        self.scratch = tempfile.TemporaryDirectory(prefix="amplint-preloaded-")
        self.news: dict[int, dict[str, int]] = {}
        self.changed = threading.Condition()
        self.next_id = 0
        self.closed = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            kind, ident, value = json.loads(line)
            with self.changed:
                self.news.setdefault(ident, {})[kind] = value
                self.changed.notify_all()
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    def starts_like(self, env: dict[str, str]) -> bool:
        """Whether an interpreter started with `env` starts as the zygote did."""
        def fixed(variables):
            return {key: value for key, value in variables.items() if key not in PER_RUN}
        return fixed(env) == fixed(self.env)

    def forks(self, args, env=None, capture_output=False, text=False, **options) -> bool:
        """Whether `run` forks this call from the zygote: a program run (`[sys.executable, FILE.py]`, its output
        captured as text) started with the zygote's environment. Anything else (the harness's CUDA probe,
        `python -c ...`) runs as it is."""
        return (is_program_run(args) and capture_output and text and not options
                and self.starts_like(dict(os.environ if env is None else env)))

    def run(self, args, *, cwd=None, env=None, timeout=None, capture_output=False, text=False, **options):
        env = dict(os.environ if env is None else env)
        if not self.forks(args, env, capture_output, text, **options):
            return subprocess.run(args, cwd=cwd, env=env, timeout=timeout, capture_output=capture_output,
                                  text=text, **options)
        with self.changed:
            self.next_id += 1
            ident = self.next_id
            out, err = (Path(self.scratch.name) / f"{ident}.{name}" for name in ("out", "err"))
            request = [ident, str(args[1]), str(cwd or os.getcwd()), env, str(out), str(err)]
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
            done = self.changed.wait_for(lambda: "exit" in self.news.get(ident, {}) or self.closed, timeout)
            news = self.news.pop(ident, {})
        if "exit" not in news:
            if "pid" in news:
                try:
                    os.kill(news["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if done:
                raise AssertionError("the preloaded interpreter ended")
            raise subprocess.TimeoutExpired(args, timeout)
        stdout, stderr = (path.read_text(errors="replace") for path in (out, err))
        out.unlink()
        err.unlink()
        return subprocess.CompletedProcess(args, news["exit"], stdout, stderr)

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.scratch.cleanup()
