"""The ``sluice`` command: a cyclopts app whose async commands run on trio."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cyclopts import App

from .batch import batch
from .chat import chat
from .keys import keys_app
from .ledger import ledger
from .loadtest import loadtest_app
from .providers import providers_app
from .sim import sim

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["app", "main"]

EXIT_INTERRUPTED = 130
"""What a shell reports for a process stopped by Ctrl-C (128 + SIGINT)."""

app = App(
    name="sluice",
    help="A trio runtime for LLM API traffic: chat calls, batch jobs and a simulator.",
    backend="trio",
)
app.command(chat)
app.command(batch)
app.command(sim)
app.command(providers_app)
app.command(keys_app)
app.command(ledger)
app.command(loadtest_app)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return its exit status.

    0 is success, 1 a failed call or job, 2 a usage, config or input problem (cyclopts uses 2
    for arguments it cannot parse, too), 130 an interrupt (Ctrl-C).
    """
    try:
        return _run(argv)
    except SystemExit as exc:  # cyclopts exits on parse errors, --help, --version and Ctrl-C
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)


def _run(argv: Sequence[str] | None) -> int:
    interrupted = False
    try:
        result = app(argv, result_action="return_value")
    except* KeyboardInterrupt:  # Ctrl-C inside a nursery arrives grouped
        interrupted = True
    if interrupted:
        return EXIT_INTERRUPTED
    return result if isinstance(result, int) else 0
