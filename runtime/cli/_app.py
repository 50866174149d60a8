"""The ``sluice`` command: a cyclopts app whose async commands run on trio."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cyclopts import App

from .batch import batch
from .chat import chat
from .sim import sim

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["app", "main"]

app = App(
    name="sluice",
    help="A trio runtime for LLM API traffic: chat calls, batch jobs and a simulator.",
    backend="trio",
)
app.command(chat)
app.command(batch)
app.command(sim)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return its exit status.

    0 is success, 1 a failed call or job, 2 a usage, config or input problem (cyclopts uses 2
    for arguments it cannot parse, too).
    """
    try:
        result = app(argv, result_action="return_value")
    except SystemExit as exc:  # cyclopts exits on parse errors, --help and --version
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return result if isinstance(result, int) else 0
