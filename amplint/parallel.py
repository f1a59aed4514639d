"""Linting many files: a pool of worker processes, the results in the order of the files, and a progress bar.

Below `SERIAL_BELOW` files, or with one job, files are processed in this process. Otherwise the files are cut
into chunks of about equal weight, largest files first, that worker processes take as they become free (the
rules are instantiated once per worker, and each worker keeps its prefilters); the outcomes are put back in
the order of the files, exactly as a serial run gives them.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import threading
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Sequence

from amplint.engine import INTERNAL_ERROR, error_diagnostic
from amplint.runner import FileOutcome, Mode, process_file, rules_for

SERIAL_BELOW = 8  # fewer files than this are linted in this process: starting workers would cost more
MAX_CHUNK = 64  # files
CHUNKS_PER_JOB = 16  # chunks of about equal weight per worker
FILE_COST = 4096  # the weight of a file beyond its bytes (opening, reading, deciding)
GC_THRESHOLD = 100_000  # allocations between two collections of the youngest generation


def default_jobs() -> int:
    """The number of cores this process may run on."""
    count = getattr(os, "process_cpu_count", None)
    if count is not None:
        return count() or 1
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_path(path: str, rule_classes: Sequence[type], settings, mode: Mode, cache=None) -> FileOutcome:
    """One file's outcome; an unexpected error becomes an internal-error diagnostic for that file, never the
    end of the run."""
    try:
        return process_file(path, rules_for(path, list(rule_classes), settings), mode, cache=cache)
    except Exception as error:  # noqa: BLE001 - one bad file must not stop the run
        where = traceback.extract_tb(error.__traceback__)[-1]
        message = (f"internal error while processing this file: {type(error).__name__}: {error} "
                   f"(at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}); please report it")
        return FileOutcome(path, [error_diagnostic(INTERNAL_ERROR, path, message)], internal_error=True)


# Workers ------------------------------------------------------------------------------------------------------
_WORKER: tuple | None = None  # (rule classes, settings, mode, cache) in a worker process


def _start_worker(rule_classes, settings, mode, cache) -> None:
    global _WORKER
    _WORKER = (rule_classes, settings, mode, cache)
    tune_gc()


def tune_gc() -> None:
    """Collect cycles less often: a module's syntax tree is hundreds of thousands of objects, few of them in
    cycles, and the default thresholds walk them again and again (15-20% of the time on a long module)."""
    if gc.get_threshold()[0] < GC_THRESHOLD:
        gc.set_threshold(GC_THRESHOLD, 50, 100)


def _run_chunk(paths: list[str]) -> list[FileOutcome]:
    rule_classes, settings, mode, cache = _WORKER
    return [check_path(path, rule_classes, settings, mode, cache) for path in paths]


def _context():
    """fork where it is safe (no threads in this process: workers start at once with everything imported),
    else the platform's default (spawn)."""
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def plan_chunks(paths: Sequence[str], jobs: int) -> list[list[int]]:
    """Indices of `paths` cut into chunks, largest files first, of about equal weight (bytes plus a fixed cost
    per file): the one expensive file of a tree starts at once instead of last, while the other workers share
    the rest; small files travel many to a chunk."""
    sizes = []
    for path in paths:
        try:
            sizes.append(os.stat(path).st_size)
        except OSError:
            sizes.append(0)
    weights = [size + FILE_COST for size in sizes]
    target = max(1, sum(weights) // (jobs * CHUNKS_PER_JOB))
    chunks: list[list[int]] = []
    current: list[int] = []
    weight = 0
    for index in sorted(range(len(paths)), key=lambda i: -sizes[i]):
        current.append(index)
        weight += weights[index]
        if weight >= target or len(current) >= MAX_CHUNK:
            chunks.append(current)
            current, weight = [], 0
    if current:
        chunks.append(current)
    return chunks


def lint_paths(paths: Sequence[str], rule_classes: Sequence[type], settings, mode: Mode, jobs: int | None = None,
               cache=None, progress: Progress | None = None) -> list[FileOutcome]:
    """Every file's outcome, in the order of `paths`."""
    paths = list(paths)
    jobs = max(1, jobs if jobs is not None else default_jobs())
    jobs = min(jobs, max(1, len(paths)))
    if jobs == 1 or len(paths) < SERIAL_BELOW:
        return _serial(paths, rule_classes, settings, mode, cache, progress)
    outcomes: list[FileOutcome | None] = [None] * len(paths)
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=_context(), initializer=_start_worker,
                               initargs=(tuple(rule_classes), settings, mode, cache))
    try:
        futures = {pool.submit(_run_chunk, [paths[i] for i in chunk]): chunk for chunk in plan_chunks(paths, jobs)}
        for future in as_completed(futures):
            for index, outcome in zip(futures[future], future.result(), strict=True):
                outcomes[index] = outcome
            if progress is not None:
                progress.advance(len(futures[future]))
        pool.shutdown()
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    except BrokenProcessPool:
        pool.shutdown(wait=False, cancel_futures=True)
        # A worker died (killed, out of memory): the files without an outcome are done here.
        missing = [i for i, outcome in enumerate(outcomes) if outcome is None]
        for index, outcome in zip(missing, _serial([paths[i] for i in missing], rule_classes, settings, mode,
                                                   cache, progress), strict=True):
            outcomes[index] = outcome
    if progress is not None:
        progress.close()
    return outcomes  # type: ignore[return-value]


def _serial(paths, rule_classes, settings, mode, cache, progress) -> list[FileOutcome]:
    outcomes = []
    for path in paths:
        outcomes.append(check_path(path, rule_classes, settings, mode, cache))
        if progress is not None:
            progress.advance(1)
    if progress is not None:
        progress.close()
    return outcomes


# Progress -----------------------------------------------------------------------------------------------------
class Progress:
    """A one-line progress bar on a terminal's stderr, drawn only once a run has lasted `delay` seconds, at
    most `rate` times a second, and erased at the end."""

    def __init__(self, total: int, stream=None, delay: float = 0.5, rate: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.delay = delay
        self.interval = 1.0 / rate
        self.drawn_at: float | None = None
        self.closed = False

    @classmethod
    def for_run(cls, total: int, machine_format: bool, stream=None) -> Progress | None:
        """A bar for a long run shown to a person: stderr is a terminal, the output is not for a program,
        not in CI, and there are enough files for it to matter."""
        stream = stream if stream is not None else sys.stderr
        if machine_format or total < 100 or os.environ.get("CI") or os.environ.get("TERM") == "dumb":
            return None
        try:
            if not stream.isatty():
                return None
        except (AttributeError, ValueError):
            return None
        return cls(total, stream)

    def advance(self, count: int) -> None:
        self.done += count
        now = self.clock()
        if now - self.start < self.delay or (self.drawn_at is not None and now - self.drawn_at < self.interval):
            return
        self.drawn_at = now
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        self._write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} files")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.drawn_at is not None:
            self._write("\r\x1b[K")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass
