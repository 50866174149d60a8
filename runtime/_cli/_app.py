"""The ``sluice`` command: a cyclopts app whose async commands run on trio."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from cyclopts import App, CycloptsError
from rich.console import Console

from .._errors import ConfigError
from ._common import EXIT_INTERRUPTED, EXIT_STDOUT_CLOSED, EXIT_USAGE, fail, silence_stdout
from .batch import batch
from .chat import chat
from .keys import keys_app
from .ledger import ledger
from .loadtest import loadtest_app
from .providers import providers_app
from .serve import serve
from .sim import sim
from .vkeys import issue, issued, revoke

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["app", "console_main", "main"]


class _Console(Console):
    """Rich's console (which prints ``--help`` and usage), with a closed stdout reported as
    the closed stdout it is (exit 141, like every command) instead of rich's exit status 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


app = App(
    name="sluice",
    help="A trio runtime for LLM API traffic: chat calls, batch jobs and a simulator.",
    backend="trio",
    console=_Console(),
)
app.command(chat)
app.command(batch)
app.command(sim)
app.command(providers_app)
app.command(keys_app)
keys_app.command(issue)
keys_app.command(revoke)
keys_app.command(issued)
app.command(serve)
app.command(ledger)
app.command(loadtest_app)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return its exit status.

    0 is success, 1 a failed call or job, 2 a usage, config or input problem (an argument the
    parser cannot read, too: one ``sluice: error:`` line naming the command's ``--help``), 130
    an interrupt (Ctrl-C), 141 a closed stdout (``sluice ... | head``).
    """
    try:
        return _run(argv)
    except SystemExit as exc:  # cyclopts exits on parse errors, --help, --version and Ctrl-C
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)


def console_main() -> int:
    """The ``sluice`` console script: :func:`main` in a process of its own, so with the
    garbage collector set for a service (:mod:`sluice._gc`). ``main`` itself, called from
    someone's program or a test, leaves the collector alone."""
    from .._gc import tune_for_service

    tune_for_service()
    return main()


def _run(argv: Sequence[str] | None) -> int:
    interrupted = closed = False
    parse_error: CycloptsError | None = None
    refused: Exception | None = None
    try:
        result = app(argv, result_action="return_value", print_error=False, exit_on_error=False)
    except* KeyboardInterrupt:  # Ctrl-C inside a nursery arrives grouped
        interrupted = True
    except* BrokenPipeError:  # stdout's reader left (| head): every file is written already
        closed = True
    except* CycloptsError as group:
        parse_error = group.exceptions[0]  # type: ignore[assignment]
    except* ConfigError as group:  # an options class checks its flags when cyclopts makes it
        refused = group.exceptions[0]
    if interrupted:
        return EXIT_INTERRUPTED
    if closed:
        silence_stdout()
        return EXIT_STDOUT_CLOSED
    if parse_error is not None:
        return _usage_error(parse_error, sys.argv[1:] if argv is None else list(argv))
    if refused is not None:
        return fail(str(refused))
    return result if isinstance(result, int) else 0


def _usage_error(error: CycloptsError, argv: list[str]) -> int:
    """The argument parser's complaint as the one line every usage error is:
    ``sluice: error: ...`` with where to read the usage, exit status 2."""
    message = " ".join(str(error).split()) or type(error).__name__
    words: list[str] = []
    for token in argv:  # the command (and subcommand) the line names, for the hint
        if token.startswith("-"):
            break
        if not _names_command([*words, token]):
            break
        words.append(token)
    usage = " ".join(["sluice", *words, "--help"])
    print(f"sluice: error: {message} (see '{usage}')", file=sys.stderr)
    return EXIT_USAGE


def _names_command(words: list[str]) -> bool:
    node = app
    for word in words:
        try:
            node = node[word]
        except (KeyError, CycloptsError):
            return False
    return True
