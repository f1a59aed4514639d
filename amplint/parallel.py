"""Linting many files: a pool of worker processes, the results in the order of the files, and a progress bar.

Below `SERIAL_BELOW` files, or with one job, files are processed in this process. Otherwise the files are cut
into chunks of about equal weight, largest files first, that worker processes (at most one per core and one
per file) take as they become free (the rules are instantiated once per worker, and each worker keeps its
prefilters); the outcomes are put back in the order of the files, exactly as a serial run gives them.

Workers never outlive the run: they die with this process (killed, interrupted, or ended by a CI timeout's
SIGTERM), and a worker that crashes (a segfault in a native parser) costs one file, not the run: the files it
had not finished are linted again, each chunk in a child process of its own, and the file a child dies on gets
an AMP902 diagnostic.
"""

from __future__ import annotations

import collections
import gc
import os
import signal
import sys
import threading
import time
from typing import Callable, Iterable, Sequence

from amplint.engine import INTERNAL_ERROR, error_diagnostic
from amplint.outcome import FileOutcome, Mode
from amplint.pipeline import process_file
from amplint.selection import rules_for

# The pool's modules (multiprocessing, concurrent.futures: about as long to import as the rest of a small run)
# are imported when a run first starts processes (`_pool_modules`), never by a run that lints its files here.
_POOL_NAMES = ("multiprocessing", "ProcessPoolExecutor", "as_completed")


def _pool_modules() -> None:
    """Bind the pool's modules in this module (a name already bound, a test's stand-in, is kept)."""
    if all(name in globals() for name in _POOL_NAMES):
        return
    import multiprocessing
    import multiprocessing.connection
    from concurrent.futures import ProcessPoolExecutor, as_completed

    for name, value in zip(_POOL_NAMES, (multiprocessing, ProcessPoolExecutor, as_completed)):
        globals().setdefault(name, value)


def __getattr__(name: str):
    if name in _POOL_NAMES:
        _pool_modules()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


SHARE_RECORDS = True  # the workers of phase 2 share the records they read on demand (`amplint.cache.RunShare`)
SERIAL_BELOW = 8  # fewer files than this are linted in this process: starting workers would cost more
MAX_CHUNK = 64  # files
CHUNKS_PER_JOB = 16  # chunks of about equal weight per worker
FILE_COST = 4096  # the weight of a file beyond its bytes (opening, reading, deciding)
GC_THRESHOLD = 100_000  # allocations between two collections of the youngest generation
PR_SET_PDEATHSIG = 1  # Linux prctl(2): the signal a process gets when its parent dies
ORPHAN_POLL = 1.0  # seconds between two checks for a dead parent where prctl is not available


def default_jobs() -> int:
    """The number of cores this process may run on."""
    count = getattr(os, "process_cpu_count", None)
    if count is not None:
        return count() or 1
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(jobs: int | None, files: int) -> int:
    """The workers a run of `files` files starts: what was asked (default: one per core), but never more than
    the cores (more only compete for them, and each costs memory and open files) or the files."""
    cores = default_jobs()
    wanted = jobs if jobs is not None else cores
    return max(1, min(wanted, cores, files))


def check_path(path: str, rule_classes: Sequence[type], settings, mode: Mode, cache=None,
               project=None) -> FileOutcome:
    """One file's outcome; an unexpected error becomes an internal-error diagnostic for that file, never the
    end of the run. `project`: the run's project index (phase 1), seen from the file."""
    try:
        view = project.view(path) if project is not None else None
        return process_file(path, rules_for(path, list(rule_classes), settings), mode, cache=cache,
                            max_size=settings.max_file_size, project=view)
    except Exception as error:  # noqa: BLE001 - one bad file must not stop the run
        import traceback

        where = traceback.extract_tb(error.__traceback__)[-1]
        message = (f"internal error while processing this file: {type(error).__name__}: {error} "
                   f"(at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}); please report it")
        return FileOutcome(path, [error_diagnostic(INTERNAL_ERROR, path, message)], internal_error=True)


# Workers ------------------------------------------------------------------------------------------------------
_WORKER: tuple | None = None  # (rule classes, settings, mode, cache) in a worker process


def _start_worker(rule_classes, settings, mode, cache, project=None, parent: int | None = None) -> None:
    global _WORKER
    if parent is not None:
        die_with_parent(parent)
    # Ctrl-C reaches the whole process group: the parent stops the workers, which need not say anything; and a
    # forked worker must not run the parent's SIGTERM handler (it would kill its siblings).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _WORKER = (rule_classes, settings, mode, cache, project)
    tune_gc()


def die_with_parent(parent: int) -> None:
    """End this worker when the process that started it ends, however it ends (SIGKILL, a CI timeout): a
    worker busy on a long file would otherwise go on at full CPU, its results read by no one. On Linux the
    kernel sends SIGKILL (prctl PR_SET_PDEATHSIG); elsewhere a thread checks the parent every second."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(ORPHAN_POLL)
    os._exit(1)


def die_with(owner: int) -> None:
    """End this process when process `owner` ends, whether or not it is this process's parent (a fork
    server's child is not its user's): the kernel's signal for a parent, else a thread that checks `owner`
    every second."""
    if owner == os.getppid():
        die_with_parent(owner)
        return
    if not process_runs(owner):
        os._exit(1)
    threading.Thread(target=_watch_owner, args=(owner,), daemon=True).start()


def _watch_owner(owner: int) -> None:
    while process_runs(owner):
        time.sleep(ORPHAN_POLL)
    os._exit(1)


def process_runs(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (dead, waiting for its parent to collect it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # another user's process: it exists
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True  # no /proc: it exists


def tune_gc() -> None:
    """Collect cycles less often: a module's syntax tree is hundreds of thousands of objects, few of them in
    cycles, and the default thresholds walk them again and again (15-20% of the time on a long module)."""
    if gc.get_threshold()[0] < GC_THRESHOLD:
        gc.set_threshold(GC_THRESHOLD, 50, 100)


def _run_chunk(paths: list[str]) -> list[FileOutcome]:
    rule_classes, settings, mode, cache, project = _WORKER
    return [check_path(path, rule_classes, settings, mode, cache, project) for path in paths]


def _context():
    """fork where it is safe (no threads in this process: workers start at once with everything imported),
    else the platform's default (spawn)."""
    _pool_modules()
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
    """Every file's outcome, in the order of `paths`: phase 1 indexes the project (the files of the run and the
    Python files beside them, `index_project`), phase 2 lints each file with the index seen from it."""
    paths = list(paths)
    record = _RunRecord.of(paths, rule_classes, settings, mode, cache)
    if record is not None:
        found = record.load()
        if found is not None:
            if progress is not None:
                progress.close()
            return found
    outcomes = _lint_paths(paths, rule_classes, settings, mode, jobs, cache, progress)
    if record is not None:
        record.store(outcomes)
    return outcomes


class _RunRecord:
    """A run's results kept whole in the cache (`Cache.load_run`): taken back without reading a file when the
    same files, with the same rules, are all as they were."""

    def __init__(self, cache, key: str, paths: list[str], project: list[str]) -> None:
        self.cache, self.key, self.paths, self.project = cache, key, paths, project
        self.states = _states(project)  # before anything is read: a file changed during the run differs next time

    @classmethod
    def of(cls, paths: list[str], rule_classes, settings, mode: Mode, cache) -> _RunRecord | None:
        """The record of a lint run with a cache; None for a fix or diff run, or without a cache."""
        if cache is None or mode.fix or mode.diff or not paths:
            return None
        from amplint.index.build import sibling_files

        others = _beside(paths, sibling_files(paths))
        key = cache.run_key(paths, others, lambda path: rules_for(path, list(rule_classes), settings), mode,
                            settings.max_file_size)
        return cls(cache, key, paths, [*paths, *others])

    def load(self) -> list[FileOutcome] | None:
        found = self.cache.load_run(self.key, self.paths, self.project, self.states)
        if found is None:
            return None
        return [FileOutcome(path, diagnostics) for path, diagnostics in zip(self.paths, found)]

    def store(self, outcomes: list[FileOutcome]) -> None:
        """Kept only when every outcome is its diagnostics alone (no note, no internal error)."""
        if all(o is not None and o.path == path and not (o.note or o.internal_error or o.fixed or o.diff)
               for path, o in zip(self.paths, outcomes, strict=True)):
            self.cache.store_run(self.key, self.paths, self.states, [o.diagnostics for o in outcomes])


def _beside(paths: Sequence[str], siblings: Iterable[str]) -> list[str]:
    """The files beside the run's that are not the run's own: a sibling is named by its absolute path, a file of
    the run as it was given (`src/a.py`), and the project index knows both as one file; read and indexed once."""
    given = {os.path.abspath(path) for path in paths}
    return [path for path in siblings if os.path.abspath(path) not in given]


def _states(paths: list[str]) -> list:
    from amplint.cache import file_states

    return file_states(paths)


def _lint_paths(paths: list[str], rule_classes, settings, mode: Mode, jobs, cache, progress) -> list[FileOutcome]:
    jobs = worker_count(jobs, len(paths))
    screener = Screener(rule_classes, settings, paths)
    if jobs == 1 or len(paths) < SERIAL_BELOW:  # the index as in a pool, built when a file first needs it
        project = _Deferred(lambda: index_project(paths, jobs, settings, cache, screener))
        return _serial(paths, rule_classes, settings, mode, cache, progress, project)
    project = index_project(paths, jobs, settings, cache, screener)
    outcomes: list[FileOutcome | None] = [None] * len(paths)
    setup = (tuple(rule_classes), settings, mode, cache, project)
    chunks = plan_chunks(paths, jobs)
    if SHARE_RECORDS:
        from amplint.cache import RunShare

        project.shared = RunShare()  # the workers' records read on demand: one builds each
    try:
        with _Children() as children:
            _pooled(paths, chunks, setup, jobs, outcomes, progress, children)
            lost = [chunk for chunk in chunks if outcomes[chunk[0]] is None]
            if lost:  # a worker died (a native crash, killed, out of memory)
                _contained(paths, lost, setup, jobs, outcomes, progress, children)
    finally:
        if project.shared is not None:
            project.shared.close()
            project.shared = None
    if progress is not None:
        progress.close()
    return outcomes  # type: ignore[return-value]


class _Deferred:
    """The project index of a run linted in this process, built (`build`) when a file first asks it something:
    a file the screen's words rule out asks nothing, so a run of such files never reads the files beside them
    (nor imports the index's modules). `view` stands for the index's view from a file (`ModuleView`)."""

    def __init__(self, build: Callable[[], object]) -> None:
        self._build = build
        self._index = None

    def built(self):
        if self._index is None:
            self._index = self._build()
        return self._index

    def view(self, path: str) -> _DeferredView:
        return _DeferredView(self, path)


class _DeferredView:
    """The index's view from one file, taken (once) when first asked anything."""

    def __init__(self, deferred: _Deferred, path: str) -> None:
        self._deferred, self._path, self._view = deferred, path, None

    def screened(self):
        """`ModuleView.screened`: None while the index is not built (nothing was screened ahead then)."""
        if self._view is None and self._deferred._index is None:
            return None
        return self.__getattr__("screened")()

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):  # copy, pickle and the like ask for dunders: not the view's to answer
            raise AttributeError(attribute)
        if self._view is None:
            self._view = self._deferred.built().view(self._path)
        return getattr(self._view, attribute)


# Phase 1 ------------------------------------------------------------------------------------------------------
_INDEXING: tuple | None = None  # (max file size, cache, screener) in a phase-1 worker


class Screener:
    """The screen of a run's file where the project index parses it (`amplint.index.project.index_screened`): the
    structural stage for the rules of the file (`selection.screen_ahead`), which its own screen then takes instead
    of parsing it again. A file beside the run's (indexed, never linted) is not screened."""

    def __init__(self, rule_classes: Sequence[type], settings, paths: Sequence[str]) -> None:
        self.rule_classes, self.settings = tuple(rule_classes), settings
        self.paths = {os.path.abspath(path): path for path in paths}  # as given: per-file ignores match them so

    def load_rules(self) -> None:
        """The rules' modules imported in this process (the workers forked from it then have them)."""
        from amplint.selection import loaded

        for given in list(self.paths.values())[:1]:
            loaded(rules_for(given, list(self.rule_classes), self.settings))

    def __call__(self, path: str, text: str, summary):
        from amplint.selection import screen_ahead

        given = self.paths.get(os.path.abspath(path))
        if given is None:
            return None
        return screen_ahead(text, rules_for(given, list(self.rule_classes), self.settings), summary)


def index_project(paths: Sequence[str], jobs: int, settings, cache=None, screener: Screener | None = None):
    """The project index of a run (amplint/index/): its Python files and those beside them, each read once,
    its record built (or taken from the cache) in the worker pool; then the files that name a function the
    index found doing something a rule asks about across modules (`expand`), looked at in the same pool. The
    bytes of each file read come back with its record, kept by the project (within `kept_bytes()`) for what
    reads the file again."""
    from amplint.index.build import gather, kept_bytes, local_scan, sibling_files

    python = [path for path in dict.fromkeys([*paths, *_beside(paths, sibling_files(paths))])
              if not path.endswith(".ipynb")]
    max_size = settings.max_file_size
    if jobs == 1 or len(paths) < SERIAL_BELOW or len(python) < SERIAL_BELOW:  # as phase 2: no pool for a few
        _start_indexing(max_size, cache, None, screener)
        records, texts, kept, screens = _phase_one(_index_chunk(python, kept_bytes()))
        return gather(python, records, _read_source, max_size, cache, texts=texts, kept=kept, screens=screens,
                      screener=screener)
    records: list = [None] * len(python)
    kept, limit = 0, kept_bytes()
    _pool_modules()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=_context(), initializer=_start_indexing,
                             initargs=(max_size, cache, os.getpid(), screener)) as pool:
        chunks = plan_chunks(python, jobs)
        futures = {pool.submit(_index_chunk, [python[i] for i in chunk], limit): chunk for chunk in chunks}
        for future in as_completed(futures):
            try:
                for index, record in zip(futures[future], future.result(), strict=True):
                    if record is not None and record[2] is not None:  # within the bytes kept, or dropped now
                        kept += len(record[2])
                        if kept > limit:
                            record = (*record[:2], None, record[3])
                    records[index] = record
            except Exception:  # noqa: BLE001 - a lost chunk leaves its files out of the index, no more
                continue
        here = local_scan(lambda path: _read_source(path, max_size), cache, screener)  # a lost chunk's files
        records, texts, kept, screens = _phase_one(records)
        if screener is not None and any(screen is not None for screen in screens):
            screener.load_rules()  # phase 2's workers will need them: imported once, here, before they fork
        packed = {path: data for path, data in zip(python, kept) if data is not None}
        return gather(python, records, _read_source, max_size, cache, scan=_pooled_scan(pool, jobs, here, packed),
                      texts=texts, kept=kept, screens=screens, screener=screener)


def _phase_one(found: list) -> tuple[list, list, list, list]:
    """Phase 1's (records, import statements, kept bytes, screens), each a list over the files (None: not read)."""
    return tuple([read[part] if read else None for read in found] for part in range(4))  # type: ignore[return-value]


def _pooled_scan(pool: ProcessPoolExecutor, jobs: int, here, packed: dict[str, bytes]):
    """A round of the second round (`amplint.index.build.Round`) over the pool's workers, the files cut into
    chunks, each sent with the bytes phase 1 kept of its files (`packed`: a worker reads only the others); a
    chunk whose worker fails is looked at in this process (`here`)."""
    def scan(paths: list[str], found) -> list:
        size = max(1, -(-len(paths) // (jobs * CHUNKS_PER_JOB)))
        chunks = [paths[start:start + size] for start in range(0, len(paths), size)]
        futures = [pool.submit(_scan_chunk, chunk, found, [packed.get(path) for path in chunk]) for chunk in chunks]
        results: list = []
        for chunk, future in zip(chunks, futures):
            try:
                results += future.result()
            except Exception:  # noqa: BLE001 - a lost chunk is looked at here
                results += here(chunk, found)
        return results
    return scan


def _start_indexing(max_size: int, cache, parent: int | None = None, screener: Screener | None = None) -> None:
    global _INDEXING
    if parent is not None:
        die_with_parent(parent)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _INDEXING = (max_size, cache, screener)


def _index_chunk(paths: list[str], keep: int = 0) -> list:
    """Each file's (record, `ImportText`, its bytes compressed, its screen) from its one read in phase 1
    (`read_for_index`); None for a file that cannot be read. The bytes come while they add up to at most `keep`,
    then None."""
    from amplint.index.build import read_for_index

    max_size, cache, screener = _INDEXING
    records = []
    for path in paths:
        try:
            read = read_for_index(path, max_size, cache, keep=keep > 0, screener=screener)
        except Exception:  # noqa: BLE001 - a file the index cannot read is left out of it; phase 2 reports it
            read = None
        if read is not None and read[2] is not None:
            keep -= len(read[2])
            if keep < 0:
                read = (*read[:2], None, read[3])
        records.append(read)
    return records


def _scan_chunk(paths: list[str], found, packed: list | None = None) -> list:
    from amplint.index.build import packed_source, scan_files

    max_size, cache, screener = _INDEXING
    kept = dict(zip(paths, packed or [None] * len(paths)))
    return scan_files(paths, found, lambda path: packed_source(kept.get(path), path,
                                                               lambda name: _read_source(name, max_size)), cache,
                      screener=screener)


def _read_source(path: str, max_size: int | None = None):
    from amplint.index.build import read_text

    return read_text(path, max_size if max_size is not None else _INDEXING[0])


def _pooled(paths, chunks, setup, jobs, outcomes, progress, children) -> None:
    """The chunks' outcomes from a pool of workers; a chunk whose worker died (or whose outcome could not
    come back) is left without outcomes."""
    _pool_modules()
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=_context(), initializer=_start_worker,
                               initargs=(*setup, os.getpid()))
    children.add(lambda: pool_processes(pool))
    try:
        futures = {pool.submit(_run_chunk, [paths[i] for i in chunk]): chunk for chunk in chunks}
        for future in as_completed(futures):
            try:
                results = future.result()
            except Exception:  # noqa: BLE001 - a broken pool fails every chunk still out; they are redone
                continue
            for index, outcome in zip(futures[future], results, strict=True):
                outcomes[index] = outcome
            if progress is not None:
                progress.advance(len(futures[future]))
    except BaseException:
        children.kill()
        close_killed(pool)
        raise
    pool.shutdown(wait=True, cancel_futures=True)


def _contained(paths, chunks, setup, jobs, outcomes, progress, children) -> None:
    """The outcomes of `chunks` (lists of indices into `paths`), each chunk linted in a child process of its
    own that sends each file's outcome as soon as it has it, `jobs` children at a time. When a child dies,
    the file it was on is the one that killed it: that file gets a diagnostic saying so, and the files after
    it go to a new child. So a crash costs one file, never the run, and this process never parses a file."""
    _pool_modules()
    context = _context()
    waiting = collections.deque(chunks)
    running: dict = {}  # receiving end of a child's pipe -> [process, chunk, files done]
    children.add(lambda: [entry[0] for entry in running.values()])
    while waiting or running:
        while waiting and len(running) < jobs:
            chunk = waiting.popleft()
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=_run_contained, daemon=True,
                                      args=(sender, [paths[i] for i in chunk], setup, os.getpid()))
            process.start()
            sender.close()  # only the child writes: its death is the end of the pipe
            running[receiver] = [process, chunk, 0]
        for receiver in multiprocessing.connection.wait(list(running)):
            process, chunk, done = running[receiver]
            try:
                outcome = receiver.recv()
            except (EOFError, OSError):
                del running[receiver]
                receiver.close()
                process.join()
                if done < len(chunk):
                    culprit = chunk[done]
                    outcomes[culprit] = _crashed(paths[culprit], process.exitcode)
                    if progress is not None:
                        progress.advance(1)
                    if done + 1 < len(chunk):
                        waiting.append(chunk[done + 1:])
                continue
            except Exception as error:  # noqa: BLE001 - an outcome that cannot be read is that file's error
                outcome = FileOutcome(paths[chunk[done]], [error_diagnostic(
                    INTERNAL_ERROR, paths[chunk[done]],
                    f"internal error: this file's result could not be read back ({type(error).__name__}); "
                    "please report it")], internal_error=True)
            outcomes[chunk[done]] = outcome
            running[receiver][2] = done + 1
            if progress is not None:
                progress.advance(1)


def _run_contained(sender, paths: list[str], setup: tuple, parent: int) -> None:
    """A child of `_contained`: each file's outcome, sent as soon as it is known."""
    _start_worker(*setup, parent)
    rule_classes, settings, mode, cache, project = setup
    for path in paths:
        outcome = check_path(path, rule_classes, settings, mode, cache, project)
        try:
            sender.send(outcome)
        except Exception as error:  # noqa: BLE001 - an outcome that cannot be sent is that file's error
            sender.send(FileOutcome(path, [error_diagnostic(
                INTERNAL_ERROR, path, f"internal error: this file's result could not be sent back "
                f"({type(error).__name__}: {error}); please report it")], internal_error=True))
    sender.close()


def _crashed(path: str, exitcode: int | None) -> FileOutcome:
    """The outcome of a file whose analysis ended its process."""
    if exitcode is not None and exitcode < 0:
        try:
            name = f" {signal.Signals(-exitcode).name}"
        except ValueError:
            name = ""
        how = f"crashed (signal {-exitcode}{name})"
    else:
        how = f"stopped (exit code {exitcode})"
    message = f"the analyser {how} on this file; its findings are unknown; please report it"
    return FileOutcome(path, [error_diagnostic(INTERNAL_ERROR, path, message)], internal_error=True)


def pool_processes(pool: ProcessPoolExecutor) -> list:
    """The worker processes a pool has started and not yet collected."""
    return list((getattr(pool, "_processes", None) or {}).values())


def close_killed(pool: ProcessPoolExecutor, wait: float = 5.0) -> None:
    """Shut down a pool whose workers were just killed, without waiting for their work: then wait (`wait` seconds
    at most) for its manager thread to see them gone and close its wake-up pipe. At exit Python 3.11 wakes every
    pool's manager (`concurrent.futures.process._python_exit`): a thread still closing its pipe then meets a
    closed descriptor, and the interpreter prints an `OSError` traceback (seen when a run is stopped by SIGTERM,
    and in the editor server's log)."""
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    if manager is not None and manager is not threading.current_thread():
        manager.join(timeout=wait)


def kill_processes(processes: Iterable) -> None:
    """SIGKILL each process; one already gone is skipped."""
    for process in processes:
        try:
            process.kill()
        except (OSError, ValueError, AttributeError):
            pass  # already gone


class _Children:
    """The child processes of a run, killed as soon as the run is interrupted: by Ctrl-C, or by SIGTERM (a CI
    timeout), after which the run exits 143. Without this, a worker busy on a long file goes on at full CPU
    after the run is over, and the exit waits for it."""

    def __init__(self) -> None:
        self.sources: list[Callable[[], Iterable]] = []
        self.previous = None

    def add(self, source: Callable[[], Iterable]) -> None:
        """`source` gives the processes alive now (a pool starts its workers as it goes)."""
        self.sources.append(source)

    def kill(self) -> None:
        for source in self.sources:
            try:
                kill_processes(source())
            except RuntimeError:  # changed while read: a pool's bookkeeping thread at work
                pass

    def _terminated(self, signum, frame) -> None:
        self.kill()
        raise SystemExit(128 + signum)

    def __enter__(self) -> _Children:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._terminated)
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is not None:
            self.kill()
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def _serial(paths, rule_classes, settings, mode, cache, progress, project=None) -> list[FileOutcome]:
    outcomes = []
    for path in paths:
        outcomes.append(check_path(path, rule_classes, settings, mode, cache, project))
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
