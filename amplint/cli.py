"""The command line: argument handling and exit codes only.

Exit codes: 0 no findings or warnings only (unless --exit-non-zero-on-warning), 1 errors (or a diff with --diff),
2 usage, configuration or internal error.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import click

from amplint import __version__, pipeline, sources
from amplint import rules as registry
from amplint.config import (ConfigError, Settings, check_torch_version, configuration_groups, describe,
                            infer_target_torch, load_settings, run_start, validate_selectors)
from amplint.diagnostics import Severity, with_docs_url, with_severities
from amplint.discovery import SOURCE_SUFFIXES, discover, force_excluded
from amplint.engine import IO_ERROR, error_diagnostic
from amplint.output import FORMAT_NAMES, Report, render
from amplint.output.common import FILE_ERRORS, printable
from amplint.output.concise import line as concise_line, plural, totals
from amplint.outcome import FileOutcome, Mode
from amplint.parallel import Progress, lint_paths, tune_gc
from amplint.selection import enabled, rules_for

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
SEVERITY_MEANING = {
    Severity.ERROR: "fails the run; `[tool.amplint.severity]` can make it a warning",
    Severity.WARNING: "does not fail the run unless `--exit-non-zero-on-warning`; `[tool.amplint.severity]` can "
                      "make it an error",
}


def _split(values: tuple[str, ...]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


class ConfigurationProblem(click.ClickException):
    """A configuration (or cache folder) the run cannot use: the message alone, exit 2, without click's
    "Usage: ... Try --help" header, which is for mistakes in the command line itself."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"amplint: error: {self.format_message()}", err=True, file=file)


class DefaultToCheck(click.Group):
    """`amplint src/` means `amplint check src/`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["check", *args]
        elif not args:
            args = ["check"]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultToCheck, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="amplint", message="%(prog)s %(version)s")
def main() -> None:
    """amplint: finds, explains and fixes PyTorch mixed-precision (AMP) mistakes."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(readable=False))  # unreadable: AMP901, the run goes on
@click.option("--select", multiple=True, help="Rule codes, prefixes (AMP00) or names to enable (comma-separated).")
@click.option("--extend-select", multiple=True, help="Rules to enable in addition to those selected.")
@click.option("--ignore", multiple=True, help="Rule codes, prefixes or names to disable.")
@click.option("--output-format", type=click.Choice(FORMAT_NAMES), default=None, help="How to print diagnostics.")
@click.option("--output-file", type=click.Path(dir_okay=False), default=None,
              help="Write the report to this file instead of stdout.")
@click.option("--fix", is_flag=True, help="Apply safe fixes.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply (or show as fixable) unsafe fixes.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff; write nothing.")
@click.option("--fix-only", is_flag=True, help="Apply fixes, do not report what remains.")
@click.option("--show-fixes", is_flag=True, help="Show the fix each diagnostic offers.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--exit-non-zero-on-warning", is_flag=True,
              help="Exit 1 when there are warnings, even with no errors (warnings alone exit 0 by default).")
@click.option("--statistics", is_flag=True, help="Print a count per rule instead of each diagnostic.")
@click.option("-q", "--quiet", is_flag=True, help="Print diagnostics only, no summary.")
@click.option("--config", "config_path", type=click.Path(), default=None, help="Use this configuration file.")
@click.option("--stdin-filename", default=None, help="The name to report for source read from stdin (`-`).")
@click.option("--force-exclude", is_flag=True, help="Apply excludes to files named on the command line too.")
@click.option("--respect-gitignore/--no-respect-gitignore", default=None,
              help="Skip what .gitignore, .ignore and git's excludes exclude (default: on); files and folders named "
                   "on the command line are linted either way.")
@click.option("--target-torch-version", default=None,
              help="The oldest torch the code must run on (default: the lowest the project's requirement files "
                   "declare): fixes write only what it has; rules for newer torch versions are turned off.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Worker processes (default and most: the number of cores; small runs use one).")
@click.option("--no-cache", is_flag=True, help="Do not read or write the result cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="The result cache's folder (default: .amplint_cache in the project root).")
@click.option("--docs-url", default=None,
              help="The documentation site (built with `mkdocs build`) that reports link to: <docs-url>/rules/CODE/. "
                   "Default: no links; `amplint rule CODE` prints a rule's documentation.")
@click.option("--show-settings", is_flag=True,
              help="Print the resolved configuration, and where each value came from; lint nothing.")
def check(paths, select, extend_select, ignore, output_format, fix, unsafe_fixes, diff, fix_only, show_fixes,
          exit_zero, statistics, quiet, config_path, stdin_filename, force_exclude, output_file,
          target_torch_version=None, jobs=None, no_cache=False, cache_dir=None,
          exit_non_zero_on_warning=False, show_settings=False, docs_url=None, respect_gitignore=None) -> None:
    """Lint PATHS (default: the current folder)."""
    try:
        # the configuration closest to the linted files (the editor server's and the flake8 plugin's lookup)
        settings = load_settings(config_path, None if config_path else run_start(
            [stdin_filename or "-"] if list(paths) == ["-"] else list(paths)))
        for warning in settings.warnings:
            click.echo(f"amplint: warning: {printable(warning)}", err=True)
        _select_options(settings, select, extend_select, ignore)
        for key, given, value in (("force-exclude", force_exclude, True), ("output-format", output_format,
                                  output_format), ("exit-non-zero-on-warning", exit_non_zero_on_warning, True),
                                  ("jobs", jobs, jobs), ("cache-dir", cache_dir, cache_dir),
                                  ("docs-url", docs_url, docs_url)):
            if given:
                settings.set_by(key, value, f"--{key}")
        if respect_gitignore is not None:
            settings.set_by("respect-gitignore", respect_gitignore,
                            "--respect-gitignore" if respect_gitignore else "--no-respect-gitignore")
        levels = settings.severity_levels()  # checked when the configuration was read
        if target_torch_version is not None:
            check_torch_version(target_torch_version, "--target-torch-version")
            settings.set_by("target-torch-version", target_torch_version, "--target-torch-version")
            settings.target_torch_source = "--target-torch-version"
        infer_target_torch(settings, [stdin_filename or "-"] if list(paths) == ["-"] else list(paths) or ["."])
        rule_classes = _rules_of(settings)
    except ConfigError as error:
        raise ConfigurationProblem(str(error)) from None
    if show_settings:
        click.echo(describe(settings), nl=False)
        sys.exit(EXIT_CLEAN)
    format_name = settings.output_format or "full"  # checked by click.Choice or when the configuration was read
    mode = Mode(fix=fix or fix_only, unsafe=unsafe_fixes, diff=diff)

    outcomes: list[FileOutcome] = []
    missing: list[FileOutcome] = []
    if list(paths) == ["-"]:
        name = stdin_filename or "-"
        source = sources.from_bytes(sys.stdin.buffer.read(), name)
        outcome = pipeline.run(source, rules_for(name, rule_classes, settings), mode)
        outcomes.append(outcome)
        _apply_levels(outcomes, levels, settings.docs_url)
        if mode.fix and not mode.diff:  # bytes: the fixed source in its own encoding, else the input as it came
            sys.stdout.flush()
            sys.stdout.buffer.write(outcome.output if outcome.output is not None else b"")
            sys.stdout.buffer.flush()
            if outcome.message:
                click.echo(f"amplint: {outcome.message}", err=True)
            sys.exit(_exit_code(outcomes, exit_zero or fix_only, mode, settings.exit_non_zero_on_warning))
    else:
        missing = _missing(paths)  # reported as AMP901 findings, as ruff reports E902; the rest is linted
        outcomes.extend(missing)
        existing = [path for path in paths if path not in {outcome.path for outcome in missing}]
        named = existing if paths else ["."]
        files = list(discover(named, settings,
                              on_error=lambda path, error: outcomes.append(_unlisted_folder(path, error)))) \
            if named else []
        try:  # each file with the configuration closest to it (as the editor server and the flake8 plugin)
            groups = _configured_groups(files, settings, rule_classes, levels, set(existing),
                                        (select, extend_select, ignore, target_torch_version))
        except ConfigError as error:
            raise ConfigurationProblem(str(error)) from None
        files = [name for group in groups for name in group[3]]
        if output_file is not None:  # before anything is written: a fix, the cache, the report
            also_read = [str(group[0].source) for group in groups[1:] if group[0].source is not None]
            clash = _output_clash(output_file, [*existing, *files, *_read_files(settings, named), *also_read,
                                                *_ignore_file_read(output_file, named, settings)])
            if clash is not None:
                raise ConfigurationProblem(
                    f"--output-file {printable(output_file)} is {clash}, an input of this run: the report would "
                    "overwrite it; nothing was written (name another file for the report)")
        if not quiet and named:
            _say_skipped(named, settings, linted=bool(files))
        for group in groups[1:]:
            for warning in group[0].warnings:
                click.echo(f"amplint: warning: {printable(warning)}", err=True)
        cache = None  # lint results only (amplint/cache.py)
        if not (no_cache or mode.fix or mode.diff):
            from amplint.cache import CacheRefused, open_for_run

            try:  # a refused --cache-dir is a usage error; a refused configured one, a warning
                cache = open_for_run(cache_dir, settings, lambda text: click.echo(f"amplint: {text}", err=True))
            except CacheRefused as error:
                raise ConfigurationProblem(str(error)) from None
        human = format_name in ("full", "concise", "grouped") and output_file is None or statistics
        tune_gc()  # this process lints too (small runs, or after a worker died)
        _apply_levels(outcomes, levels, settings.docs_url)  # missing paths, folders that cannot be listed
        for group_settings, group_rules, group_levels, group_files in groups:
            progress = Progress.for_run(len(group_files), machine_format=not human)  # each closes its own bar
            linted = lint_paths(group_files, group_rules, group_settings, mode, settings.jobs, cache, progress)
            _apply_levels(linted, group_levels, settings.docs_url)
            outcomes.extend(linted)

    if mode.diff:
        sys.stdout.flush()
        for outcome in outcomes:  # the files' own bytes (amplint/sources/base.py, `unified_diff`)
            if outcome.diff:
                sys.stdout.buffer.write(outcome.diff.encode("utf-8", "surrogateescape"))
        sys.stdout.buffer.flush()
        changed = sum(1 for o in outcomes if o.diff)
        _say_file_errors(outcomes)
        if not quiet:
            click.echo(f"{plural(changed, 'file')} would be changed.", err=True)
        sys.exit(_usage(missing) or _fix_exit_code(outcomes, changed=bool(changed), exit_zero=False))

    diagnostics = sorted((d for o in outcomes for d in o.diagnostics), key=lambda d: d.sort_key())
    report = Report(
        diagnostics=diagnostics,
        fixed=sum(o.removed for o in outcomes),
        unsafe_fixes=unsafe_fixes,
        show_fixes=show_fixes,
        messages=[o.message for o in outcomes if o.message],
        rules=rule_classes,
        severities=levels,
        totals=not quiet,
        docs_url=settings.docs_url,
    )
    if fix_only:
        _say_file_errors(outcomes)
        if not quiet:
            click.echo(f"Fixed {plural(report.fixed, 'problem')}.")
        sys.exit(_usage(missing) or _fix_exit_code(outcomes, changed=False, exit_zero=exit_zero))
    if statistics:
        _emit(_statistics(report), output_file)
    else:
        text = render(format_name, report)
        if quiet and format_name == "concise":  # no totals (Report.totals), no blank lines
            text = "".join(line + "\n" for line in text.splitlines() if line)
        elif quiet and format_name in ("full", "grouped"):  # no summary; the blank lines between findings stay
            text = text.rstrip("\n") + "\n" if text.strip() else ""
        _emit(text, output_file)
    sys.exit(_usage(missing) or _exit_code(outcomes, exit_zero, mode, settings.exit_non_zero_on_warning))


def _select_options(settings: Settings, select, extend_select, ignore) -> None:
    """--select, --extend-select and --ignore over a configuration's own choice of rules."""
    if select:
        settings.set_by("select", _split(select), "--select")
        if not settings.select:
            raise ConfigError("--select names no rule, so no rule is selected (omit it to select every rule)")
    for key, given in (("extend-select", extend_select), ("ignore", ignore)):
        if _split(given):
            previous = getattr(settings, key.replace("-", "_"))
            settings.set_by(key, previous + _split(given), f"--{key}", extend=True)


def _rules_of(settings: Settings, where: str = "command line") -> list:
    validate_selectors(settings, where)
    rule_classes = enabled(settings)
    if not rule_classes:
        raise ConfigError("no rule is selected: `ignore` takes away every rule that `select` chose"
                          + ("" if settings.source is None else f" ({settings.source})"))
    return rule_classes


def _configured_groups(files: list[str], settings: Settings, rule_classes, levels, named: set[str],
                       options) -> list[tuple]:
    """(settings, rules, severity levels, files) per configuration of the run's files, the run's own first: a
    file under a folder with its own amplint.toml or [tool.amplint] is linted with that configuration (its rules,
    per-file ignores, severities, torch range and excludes), with the command line's --select, --extend-select,
    --ignore and --target-torch-version over it, as ruff does."""
    select, extend_select, ignore, target_torch_version = options
    groups = configuration_groups(files, settings)
    own = groups.pop(settings.source, [])
    found = [(settings, rule_classes, levels, own)] if own or not groups else []
    for source, group_files in groups.items():
        nested = load_settings(str(source) if source is not None else None,
                               None if source is not None else Path(os.path.abspath(group_files[0])).parent)
        nested.named = False  # found by the lookup, not named with --config
        if source is None:
            nested.warnings = []
        _select_options(nested, select, extend_select, ignore)
        if target_torch_version is not None:
            nested.set_by("target-torch-version", target_torch_version, "--target-torch-version")
            nested.target_torch_source = "--target-torch-version"
        infer_target_torch(nested, group_files)
        kept = [name for name in group_files if name in named or not nested.excluded(name)]
        if kept:
            found.append((nested, _rules_of(nested, f"command line, for the files of {source or 'the defaults'}"),
                          nested.severity_levels(), kept))
    return found


def _apply_levels(outcomes: list[FileOutcome], levels: dict[str, Severity], docs_url: str | None = None) -> None:
    """Each finding at the level the configuration gives its rule (`[tool.amplint.severity]`), linking to the
    documentation site when `docs-url` is set."""
    for outcome in outcomes:
        outcome.diagnostics = with_docs_url(with_severities(outcome.diagnostics, levels), docs_url)


def _emit(text: str, output_file: str | None) -> None:
    """Print the report, or write it to --output-file (parent folders created) for a CI step to pick up."""
    text = _encodable(text)
    if output_file is None:
        click.echo(text, nl=False)
        return
    try:
        Path(output_file).parent.mkdir(parents=True, exist_ok=True)
        Path(output_file).write_text(text, encoding="utf-8", newline="")
    except OSError as error:
        click.echo(f"amplint: cannot write {output_file}: {error.strerror or error}", err=True)
        sys.exit(EXIT_ERROR)


def _encodable(text: str) -> str:
    """The report with each lone surrogate (a source line quoting a notebook's `\\udcff`, an editor's buffer)
    written as its escape, `\\udcff`: a UTF-8 stream or file refuses it, and the whole report was lost."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _file_identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file a path names, links followed; None when there is none."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def _read_files(settings, paths: list[str]) -> list[str]:
    """The other files a run reads: its configuration file and the declaration files its torch floor is
    inferred from (amplint/requirements.py), with the files their `-r` lines include."""
    from amplint.requirements import files_read, roots_for

    configured = settings.root if settings.source is not None else None
    found = [str(settings.source)] if settings.source is not None else []
    return found + [str(path) for root in roots_for(paths, configured) for path in files_read(root)]


def _output_clash(output_file: str, inputs: list[str]) -> str | None:
    """How the run's input that `output_file` names is spelled (`t.py`, `the same file as src/t.py`), or None
    when it names none. Compared by the file itself (device and inode), so that a relative or absolute
    spelling, a symlink, a hard link or a file found in a named folder all count; a report file that does not
    exist yet names no input."""
    target = _file_identity(output_file)
    if target is None:  # not there yet: an input named but absent (a `-r` include) would be created by the report
        wanted = _real(output_file)
        return next((printable(path) for path in dict.fromkeys(inputs) if _real(path) == wanted), None)
    for path in dict.fromkeys(inputs):
        if _file_identity(path) == target:
            same = os.path.normpath(os.path.abspath(path)) == os.path.normpath(os.path.abspath(output_file))
            return printable(path) if same else f"the same file as {printable(path)}"
    return None


def _ignore_file_read(output_file: str, named: list[str], settings: Settings) -> list[str]:
    """`output_file` when the walk reads it as an ignore file (amplint/discovery.py): a `.gitignore` or `.ignore`
    in a walked folder, below one or above one (the files above a walked folder apply to it), or a repository's
    `info/exclude`."""
    if not settings.respect_gitignore:
        return []
    target = _real(output_file)
    if target is None:
        return []
    name = os.path.basename(target)
    if name not in (".gitignore", ".ignore") and not target.endswith(os.path.join(".git", "info", "exclude")):
        return []
    folder = os.path.dirname(target)
    if name not in (".gitignore", ".ignore"):
        folder = os.path.dirname(os.path.dirname(os.path.dirname(target)))  # the repository's top
    for path in named:
        walked = _real(path)
        if walked is not None and os.path.isdir(walked):
            try:
                common = os.path.commonpath([walked, folder])
            except ValueError:
                continue
            if common in (walked, folder):
                return [output_file]
    return []


def _real(path: str) -> str | None:
    try:
        return os.path.normcase(os.path.realpath(path))
    except (OSError, ValueError):
        return None


def _statistics(report: Report) -> str:
    """A count per rule, most frequent first; then, unless --quiet, the notes about files and the summary the
    other human formats end with: the total ("Found 3 errors and 2 warnings."), or that nothing was found."""
    counts = Counter((d.code, d.name, d.severity.value) for d in report.diagnostics)
    fixable = Counter(d.code for d in report.diagnostics if d.fixable(report.unsafe_fixes))
    lines = []
    for (code, name, level), count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        marker = "[*]" if fixable[code] else "   "
        lines.append(f"{count:>5}\t{code}\t{level}\t{marker} {name}\n")
    if report.totals:  # not with --quiet
        lines.extend(printable(message) + "\n" for message in report.messages)
        lines.append(totals(report) + "\n")
    return "".join(lines)


def _say_skipped(paths: list[str], settings, linted: bool) -> None:
    """Say on stderr what the run leaves out that the user may think it linted: each path named on the command
    line that `force-exclude` skips (which pattern, and how to lint it), and a run that finds no file at all
    (then the "All checks passed!" that follows checked nothing)."""
    for path in paths:
        if force_excluded(path, settings):
            pattern, key = settings.excluding_pattern(path) or ("?", "exclude")
            where = settings.origins.get(key, f"the default `{key}`")
            forced = settings.origins.get("force-exclude", "force-exclude")
            forced = forced if forced.startswith("--") else f"force-exclude = true ({forced})"
            click.echo(f"amplint: {printable(path)} is not linted: `{printable(pattern)}` ({where}) excludes it, "
                       f"and {forced} applies excludes to paths named on the command line too; to lint it, turn "
                       "force-exclude off or remove the pattern", err=True)
    if not linted:
        suffixes = ", ".join(SOURCE_SUFFIXES)
        click.echo(f"amplint: warning: no files to lint ({suffixes}) in {', '.join(map(printable, paths))}",
                   err=True)


def _missing(paths: tuple[str, ...]) -> list[FileOutcome]:
    """A path named on the command line that does not exist (a typo, a stale pre-commit list): an AMP901 finding
    naming it, as ruff's E902, and the run lints the rest, then exits 2. One that exists but cannot be read is
    linted (AMP901 too, exit 1)."""
    return [FileOutcome(path, [error_diagnostic(IO_ERROR, path, "no such file or directory")])
            for path in dict.fromkeys(paths) if not os.path.lexists(path)]


def _usage(missing: list[FileOutcome]) -> int:
    """Exit 2 when a named path does not exist, whatever else the run found (0: decide as usual)."""
    return EXIT_ERROR if missing else 0


def _unlisted_folder(path: str, error: OSError) -> FileOutcome:
    """A folder the walk could not list: reported like an unreadable file, since it may hide any number."""
    message = f"cannot list this folder: {error.strerror or error}; the files in it are not linted"
    return FileOutcome(path, [error_diagnostic(IO_ERROR, path, message)])


def _file_errors(outcomes: list[FileOutcome]) -> list:
    return sorted((d for o in outcomes for d in o.diagnostics if d.code in FILE_ERRORS), key=lambda d: d.sort_key())


def _say_file_errors(outcomes: list[FileOutcome]) -> None:
    """--diff and --fix-only print no report, yet a file they could not analyse (AMP900-902) or could not write
    must not pass unseen: such files, and the notes about files, go to stderr (stdout stays a patch)."""
    for diagnostic in _file_errors(outcomes):
        click.echo(concise_line(diagnostic, False), err=True)
    for outcome in outcomes:
        if outcome.message:
            click.echo(printable(outcome.message), err=True)


def _internal_error(outcomes: list[FileOutcome]) -> bool:
    return any(o.internal_error or any(d.code == "AMP902" for d in o.diagnostics) for o in outcomes)


def _fix_exit_code(outcomes: list[FileOutcome], changed: bool, exit_zero: bool) -> int:
    """--diff and --fix-only: 2 when a file met an internal error (AMP902); 1 when a file could not be analysed
    (AMP900, AMP901: the fixes it may need are unknown) or, with --diff, when there is a diff; else 0.
    Remaining findings do not count (fixing is what was asked); --exit-zero turns 1 into 0 for --fix-only."""
    if _internal_error(outcomes):
        return EXIT_ERROR
    if changed or (_file_errors(outcomes) and not exit_zero):
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _exit_code(outcomes: list[FileOutcome], exit_zero: bool, mode: Mode, on_warning: bool = False) -> int:
    """2 on an internal error (AMP902); else 0 with --exit-zero; else 1 when an error remains, or a warning with
    `on_warning` (--exit-non-zero-on-warning, `exit-non-zero-on-warning = true`); else 0: warnings alone pass."""
    if _internal_error(outcomes):
        return EXIT_ERROR
    if exit_zero:
        return EXIT_CLEAN
    failing = {Severity.ERROR, Severity.WARNING} if on_warning else {Severity.ERROR}
    found = any(d.severity in failing for o in outcomes for d in o.diagnostics)
    return EXIT_FINDINGS if found else EXIT_CLEAN

FIX_MEANING = {
    "safe": "safe (applied by --fix)",
    "unsafe": "unsafe (applied by --fix --unsafe-fixes)",
    "sometimes": "safe or unsafe, depending on the code",
    "none": "none",
}


def _list_rules() -> None:
    """Every rule in one line each: code, name, the fix it offers, and whether a run selects it by default."""
    on = {ref.code for ref in registry.select(None, [], [])}
    width = max(len(ref.name) for ref in registry.CATALOG)
    click.echo(f"{'code':<7} {'name':<{width}} {'fix':<9} default")
    for ref in registry.CATALOG:
        click.echo(f"{ref.code:<7} {ref.name:<{width}} {ref.fix:<9} {'on' if ref.code in on else 'off'}")
    click.echo("\n`amplint rule CODE` prints a rule's documentation; `amplint rule --all` every rule's.")


@main.command()
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="Print every rule's documentation.")
@click.option("--long", "long_form", is_flag=True, help="Add the Fix safety and Limits sections.")
def rule(code: str | None, show_all: bool, long_form: bool) -> None:
    """Print a rule's documentation (by code or name): what it does, why, an example and what to write instead;
    --long adds when its fix is safe and what the rule cannot see. No code: list the rules (code, name, fix,
    default on or off)."""
    if show_all:
        chosen = list(registry.ALL_RULES)
    elif code:
        try:
            chosen = [registry.lookup(code)]
        except registry.UnknownSelector:
            raise click.UsageError(f"unknown rule: {code!r} (try `amplint rule --all`)") from None
    else:
        _list_rules()
        return
    for index, rule_class in enumerate(chosen):
        if index:
            click.echo("\n" + "-" * 80 + "\n")
        click.echo(f"# {rule_class.name} ({rule_class.code})\n")
        click.echo(f"Default severity: {rule_class.severity.value} ({SEVERITY_MEANING[rule_class.severity]})\n")
        if long_form:
            click.echo(rule_class.documentation())
        else:
            click.echo(rule_class.short_documentation())
            click.echo(f"\nFix: {FIX_MEANING[rule_class.fix]}. Fix safety and Limits: "
                       f"`amplint rule {rule_class.code} --long`.")


@main.command()
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help="The cache folder to remove.")
@click.option("--config", "config_path", type=click.Path(), default=None, help="Use this configuration file.")
def clean(cache_dir, config_path) -> None:
    """Remove the result cache (.amplint_cache in the project root, or the configured cache-dir).

    Only the files amplint wrote are removed, and the folder only when nothing else is left in it."""
    from amplint.cache import clean as clean_cache, default_directory

    try:
        directory = Path(cache_dir) if cache_dir else default_directory(load_settings(config_path))
    except ConfigError as error:
        raise ConfigurationProblem(str(error)) from None
    try:
        kept = clean_cache(directory)
    except (ValueError, OSError) as error:
        click.echo(f"amplint: {error}", err=True)
        sys.exit(EXIT_ERROR)
    if kept is None:
        click.echo(f"No cache at {directory}")
    elif kept:
        shown = ", ".join(kept[:5]) + (", ..." if len(kept) > 5 else "")
        click.echo(f"Removed amplint's files from {directory}; kept the folder and what else it holds ({shown})")
    else:
        click.echo(f"Removed {directory}")


@main.command()
def server() -> None:
    """Run the language server (LSP over stdio) for editors; needs pygls (`pip install pygls`, or the `server` extra: `pip install ".[server]"` from a checkout)."""
    from amplint.server import serve  # pygls is imported only here

    sys.exit(serve())


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--output-format", type=click.Choice(FORMAT_NAMES), default="full", help="How to print findings.")
@click.option("--ignore", multiple=True, help="Codes not to report (comma-separated).")
@click.option("-q", "--quiet", is_flag=True, help="Print findings only, no summary.")
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def watch(output_format, ignore, quiet, script, args) -> None:
    """Run SCRIPT (with ARGS) under the run-time watcher, like `python SCRIPT ARGS`, and report the AMP mistakes it makes (docs/runtime.md); exits 1 on findings, 0 without, the script's own status when it fails, 2 when it cannot run."""
    from amplint.runtime.script import ScriptProblem, run_script  # torch is imported only to run the script

    try:
        outcome = run_script(script, list(args), ignore=_split(ignore))
    except ScriptProblem as problem:
        raise ConfigurationProblem(str(problem)) from None
    findings = outcome.findings
    if findings or not quiet:  # a script that failed is never "All checks passed!"
        report = Report(diagnostics=sorted((f.to_diagnostic() for f in findings), key=lambda d: d.sort_key()),
                        rules=[registry.RULES_BY_CODE[c] for c in sorted({f.code for f in findings})],
                        totals=not quiet and (outcome.status is None or bool(findings)))
        text = render(output_format, report)
        if text.strip():
            click.echo(text, nl=False)
    for note in outcome.notes:
        click.echo(f"amplint: note: {note}", err=True)
    if outcome.status is not None:
        seen = "the findings above are" if findings else "no AMP mistake was seen in"
        click.echo(f"amplint: {printable(script)} {outcome.ending}; {seen} what ran before it ended", err=True)
        sys.exit(outcome.status)
    sys.exit(EXIT_FINDINGS if findings else EXIT_CLEAN)


def _end_interrupted() -> None:
    """Exit 130 at once: an interrupted run has killed its workers, and a normal interpreter exit would join the
    process pool's threads, which may write to a pipe those workers closed (a traceback on the way out)."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(130)


def entry() -> None:
    """Console entry point: an unexpected error becomes a message and exit code 2, never a traceback."""
    try:
        # Not standalone: click would turn Ctrl-C into "Aborted!" and exit 1; an interrupted run exits 130.
        status = main(standalone_mode=False)
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("amplint: interrupted", err=True)
        _end_interrupted()
    except click.ClickException as error:  # usage and bad-parameter errors: click's message, exit 2
        error.show()
        sys.exit(error.exit_code)
    except Exception as error:  # noqa: BLE001 - the last line of defence
        click.echo(f"amplint: internal error: {type(error).__name__}: {error} (please report it)", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(status if isinstance(status, int) else EXIT_CLEAN)
