"""`python -m amplint` and the `amplint` command. `amplint server` starts the language server without loading the
command line's modules (the linter, every rule): the server answers the editor's `initialize` first and loads
the linter after, in its worker."""

import sys


def entry() -> None:
    try:
        if sys.argv[1:] == ["server"]:
            from amplint.server import serve  # pygls is imported only here

            sys.exit(serve())
        from amplint.cli import entry as command_line
    except KeyboardInterrupt:  # Ctrl-C while starting, before the command line's own handler is in place
        sys.stderr.write("amplint: interrupted\n")
        sys.exit(130)
    command_line()


if __name__ == "__main__":
    entry()
