"""The provider lane of ``sluice batch``: lines through the providers' Batch APIs.

::

    input ──pass──▶ Packer per provider:model ──sealed──▶ Gate ──▶ journal intent
                 │                                               upload ─▶ journal file id
                 │                                               create ─▶ journal batch id
                 │                     poll ◀────────────────────────────┘
                 │                       │ ended
                 │                       ▼
                 │      results ──▶ output lines (ok, error) ──▶ journal done
                 │                       │ expired, cancelled, failed batch
                 │                       ▼
                 └──(next pass)◀── lines handed back
                 └──▶ realtime lane (no batch API, --via auto past the deadline's mark)

:func:`run_batch` checks and guards the output as for the realtime lane (lock, input record,
resume scan, probe write) and hands the open run to :meth:`ProviderLane.run`. One task drives
everything (reading, sealing, submitting, polling, merging) so the journal is written in the
order the steps happen; lines that go to the realtime lane run on worker tasks.

Memory is flat in the number of lines: a pass reads the input as a stream, a packer holds
the one batch it fills, a batch submitted keeps only its ids (its lines are in the journal and
read back when it is merged), and results are read as a stream. What grows with the input is
what the realtime lane holds too: the custom_ids a resumed output already answers.

Exactly once: every line ends in one output line. A line is in the output, or in exactly one
submission that is not done (claimed), or neither; a pass sends only lines that are neither,
and a merge writes a line only if the output does not hold it yet (a kill mid-merge merges
again on ``--resume``). Lines of a batch that ended without their outcome (expired,
cancelled, a failed batch) are handed back and read again by the next pass, up to
:attr:`LaneOptions.max_tries` submissions each; then they get an error line that
``--resume`` (``--retry-errors``) redoes.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from ..._errors import ConfigError
from .drive import Engine
from .journal import Journal, journal_path

if TYPE_CHECKING:
    import os

    from ..._runtime import Runtime
    from ..batch_loop import BatchInterrupt
    from ..batch_report import BatchProgress
    from .backend import BatchBackend
    from .drive import BatchRun

__all__ = ["VIAS", "LaneOptions", "ProviderLane", "Via"]

Via = Literal["realtime", "provider", "auto"]
VIAS: tuple[Via, ...] = ("realtime", "provider", "auto")

_READ_SIZE = 1 << 16
_WRITE_LINES = 512
"""Output lines written (and flushed) together while a batch is merged."""
_MAX_BACKOFF = 60.0


def _default_backends(rt: Runtime, provider: str) -> BatchBackend | None:
    from .backends import backend_for

    return backend_for(rt, provider)


@attrs.frozen(kw_only=True)
class LaneOptions:
    """How the provider lane paces itself."""

    poll_interval: float = attrs.field(default=30.0, validator=attrs.validators.gt(0))
    """Seconds between looks at the batches running."""
    enqueued_tokens: Mapping[str, int] = attrs.field(factory=dict)
    """Tokens that may wait in unfinished batches at once, per ``provider:model`` (over the
    provider's known default, :attr:`~.backend.BatchLimits.enqueued_tokens`)."""
    realtime_share: float = attrs.field(
        default=0.2, validator=[attrs.validators.gt(0), attrs.validators.lt(1)]
    )
    """With ``via="auto"`` and a deadline: the last share of the deadline left to the
    realtime lane (the lines still undone move there when it begins)."""
    max_requests: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    """Lines per batch at most (None: as many as the provider's API takes)."""
    max_tries: int = attrs.field(default=4, validator=attrs.validators.ge(1))
    """Submissions of one line in one run before its line says it got no outcome."""
    backends: Callable[[Any, str], Any] = _default_backends
    """Internal (tests and benchmarks put their own batch API here): the
    :class:`~sluice._jobs.provider_batch.backend.BatchBackend` of a provider of the runtime
    given, or None when it has none."""


@attrs.frozen
class ProviderLane:
    """The lane chosen for a run: ``provider`` or ``auto`` (with its deadline)."""

    via: Via
    deadline: float | None = None
    """Seconds from the run's start by which every line should be done (``auto`` only)."""
    options: LaneOptions = LaneOptions()

    @classmethod
    def checked(
        cls, via: str, deadline: float | None, ordered: bool, options: LaneOptions | None
    ) -> ProviderLane | None:
        """The lane for ``via`` (None for the realtime lane).

        Raises:
            ConfigError: an unknown ``via``, ``ordered`` (a batch ends in any order), or a
                deadline without ``auto`` or not positive.
        """
        if via not in VIAS:
            raise ConfigError(f"via must be one of {', '.join(VIAS)}, not {via!r}")
        if deadline is not None and (
            via != "auto" or not (math.isfinite(deadline) and deadline > 0)
        ):
            raise ConfigError("a deadline applies to via auto and is a positive number of seconds")
        if via == "realtime":
            return None
        if ordered:
            raise ConfigError(
                f"ordered applies to the realtime lane; with via {via} lines arrive as batches"
                " end (match them by custom_id)"
            )
        return cls("auto" if via == "auto" else "provider", deadline, options or LaneOptions())

    async def run(
        self,
        rt: Runtime,
        run: BatchRun,
        *,
        input: str | os.PathLike[str],
        output: str,
        model: str | None,
        groups: Collection[str],
        resume: bool,
        overwrite: bool,
        budget: float | None,
        max_in_flight: int,
        max_wait: float,
        progress: Callable[[BatchProgress], None] | None,
        progress_interval: float,
        interrupt: BatchInterrupt,
    ) -> None:
        """Run every line the output does not hold; leave the summary in ``run.final``.

        Raises:
            ConfigError: the journal holds batches of an earlier run and neither ``resume``
                nor ``overwrite`` was given, or it is not a journal.
        """
        journal = await trio.to_thread.run_sync(_open_journal, output, resume, overwrite)
        try:
            engine = Engine(
                lane=self,
                rt=rt,
                job=run,
                journal=journal,
                input=input,
                model=model,
                groups=groups,
                budget_micros=_budget_micros(rt, budget),
                max_in_flight=max_in_flight,
                max_wait=max_wait,
            )
            await engine.go(interrupt, progress, progress_interval)
        finally:
            journal.close()


def _open_journal(output: str, resume: bool, overwrite: bool) -> Journal:
    path = journal_path(output)
    journal = Journal(path)
    if journal.active() and not resume:
        if not overwrite:
            journal.close()
            raise ConfigError(
                f"{path} lists batches an earlier run submitted that are not merged yet:"
                f" --resume merges them, sluice batch --cancel {output} cancels them"
            )
        journal.remove()
        journal = Journal(path)
    elif not resume and journal.submissions:
        journal.remove()
        journal = Journal(path)
    if journal.run_id is None:
        journal.start(secrets.token_hex(8))
    return journal


def _budget_micros(rt: Runtime, budget: float | None) -> int | None:
    """The job's budget in micro-dollars (the smallest dollar budget of the job or global
    scope in the runtime's config, which ``budget`` was laid over), None without one."""
    from ..._ledger.prices import usd_to_micros

    limits = [
        usd_to_micros(b.max_usd)
        for b in rt.config.ledger.budgets
        if b.scope in ("job", "global") and b.max_usd is not None
    ]
    if budget is not None:
        limits.append(usd_to_micros(budget))
    return min(limits) if limits else None
