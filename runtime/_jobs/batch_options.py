"""The choices of one batch run, as :func:`~sluice._jobs.batch.run_batch` is given them, checked
when made: :class:`BatchOptions`.

Each attribute is the keyword argument of ``run_batch`` of the same name (and, for the
command line, a flag of ``sluice batch``); its docstring is that argument's documentation.
Making one checks every value that needs no file and no config: a bad one raises
:class:`~sluice._errors.ConfigError` before anything is opened. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs

from .._config import RuntimeConfig
from .._errors import ConfigError
from .._runtime import Runtime
from .batch_limits import BatchLimits
from .batch_lines import RetryErrors, Shard, parse_shard
from .batch_loop import BatchInterrupt
from .batch_report import BatchProgress
from .provider_batch.engine import LaneOptions, ProviderLane, Via

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "BatchOptions"]

DEFAULT_MAX_IN_FLIGHT = 256


def _shard(value: Shard | str | None) -> Shard | None:
    return parse_shard(value) if isinstance(value, str) else value


@attrs.frozen(kw_only=True)
class BatchOptions:
    """Every keyword argument of ``run_batch``, checked when made.

    Raises:
        ConfigError: ``resume`` and ``overwrite`` are both given, ``max_in_flight`` is below
            1, a limit (a budget that is not a finite amount) or ``shard`` is invalid, or
            limits were given with ``runtime``.
    """

    model: str | None = None
    """A ``provider:model`` or a model group of the config that replaces every line's
    ``body.model``. Without it each body's model must be written ``provider:model`` or name a
    group."""
    resume: bool = False
    """Keep the existing output (a torn last line is cut off), skip every input line it
    already answers and append the rest. With no output file yet the run simply starts.
    Across any number of interrupted runs and resumes the output holds one line per input
    line. The input must be the one the output was made from (lines appended to it are
    fine), with the same ``model`` and ``shard``."""
    overwrite: bool = False
    """Replace an output that already holds lines (without it, and without ``resume``, such an
    output is refused: its paid-for results stay)."""
    ordered: bool = False
    """Write lines in input order. A finished line is held until every earlier one is
    written; at most ``max_in_flight`` lines are read but not yet written, so the buffer holds
    fewer than ``max_in_flight`` lines and never blocks a call."""
    shard: Shard | None = attrs.field(default=None, converter=_shard)
    """Process only the lines whose custom_id hashes into this shard (a
    :class:`~sluice._jobs.batch_lines.Shard` or ``"i/n"``); the others get no output line
    here."""
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    """Calls running at once (waiting for the quota included)."""
    rpm: int | None = None
    """Requests per minute for each provider the batch calls, spread evenly over the minute
    (see :func:`~sluice._jobs.batch_limits.pacing_window`)."""
    tpm: int | None = None
    """Input plus output tokens per minute for each provider the batch calls."""
    max_pending: int | None = None
    """Calls per provider waiting for their first chunk at once."""
    budget: float | None = None
    """US dollars this job may spend (earlier runs of the same ``job`` count); a call that
    could pass it fails unsent with ``BudgetExceeded``, so once it is spent the remaining
    lines become error lines."""
    job: str | None = None
    """The job the ledger books the calls under (default: a new id per runtime); a resume
    under the same job keeps its budget."""
    config: RuntimeConfig | None = None
    """The runtime config (default: as :func:`sluice.open_runtime` finds it); the limits above
    are laid over it."""
    runtime: Runtime | None = None
    """Run on this open runtime instead of opening one. Its config is fixed, so ``rpm``,
    ``tpm``, ``max_pending``, ``budget``, ``job`` and ``config`` must then be left unset (put
    them in that runtime's config)."""
    progress: Callable[[BatchProgress], None] | None = None
    """Called every ``progress_interval`` seconds with a snapshot, and once at the end."""
    progress_interval: float = 1.0
    interrupt: BatchInterrupt | None = None
    """Lets another task stop the run early (see
    :class:`~sluice._jobs.batch_loop.BatchInterrupt`): a drain withdraws the calls the
    RateLimiter has not admitted (as known from each call's stream: ``Admitted``, or its first
    chunk) and lets the admitted ones finish."""
    write_summary: bool = True
    """Write the JSON summary file next to the output: ``OUT.jsonl`` gives
    ``OUT.summary.json``."""
    stream: bool = True
    """Calls stream (the default: a slot frees at the first token, and a stream that breaks
    mid-way is retried); False sends each as one plain request. Output lines have the same
    shape either way, whatever a body's own ``stream`` says."""
    preflight: Callable[[set[str]], None] | None = None
    """Called with the providers the lines name once the input has been checked, before the
    output is opened or any call made; it raises ``ConfigError`` to stop the run (the CLI
    checks keys and base URLs there)."""
    retry_errors: RetryErrors = "retriable"
    """With ``resume``, which error lines of the existing output are done again:
    ``retriable`` (timeouts, 429, 5xx, broken streams, refused connections, an open breaker,
    waits past ``max_wait``), ``all`` or ``none``. The output is rewritten without them
    atomically (a new file renamed over it) before the run appends, so a crash at any moment
    loses no line; ``summary.redone`` counts them."""
    max_wait: float | None = None
    """Seconds a line's call may wait out an open breaker, a spent retry budget, a cooldown
    or retriable failures before it fails with the error that kept it waiting (every batch
    call waits rather than failing fast, with no attempt limit; None:
    :data:`~sluice._jobs.batch_loop.DEFAULT_MAX_WAIT`, 10 minutes)."""
    via: Via = "realtime"
    """``realtime`` (each line a call through the runtime), ``provider`` (lines through the
    providers' Batch APIs at their batch price, with the same input and output; lines of a
    provider without one run realtime) or ``auto`` (``provider`` until ``deadline`` nears,
    then realtime). See :mod:`sluice._jobs.provider_batch.engine`."""
    deadline: float | None = None
    """With ``via="auto"``: seconds from the start by which the lines should be done."""
    lane_options: LaneOptions | None = None
    """The provider lane's pacing (poll interval, enqueued-token limits)."""

    def __attrs_post_init__(self) -> None:
        if self.resume and self.overwrite:
            raise ConfigError("resume keeps the output and overwrite replaces it: give one")
        if self.max_in_flight < 1:
            raise ConfigError("max_in_flight must be at least 1")
        self.lane()
        limits = self.limits()
        if self.runtime is not None and (
            limits.any_set or self.job is not None or self.config is not None
        ):
            raise ConfigError(
                "rpm, tpm, max_pending, budget, job and config configure the runtime run_batch"
                " opens; with runtime=, set them in that runtime's config"
            )

    def lane(self) -> ProviderLane | None:
        """The provider lane the run takes (None: the realtime lane).

        Raises:
            ConfigError: an unknown ``via``, a deadline without ``auto``, or ``ordered`` with
                a provider lane.
        """
        if self.via == "realtime" and self.deadline is None:
            return None
        return ProviderLane.checked(self.via, self.deadline, self.ordered, self.lane_options)

    def limits(self) -> BatchLimits:
        """The limits and budget to lay over the runtime's config.

        Raises:
            ConfigError: one is out of range, or the budget is not a finite amount.
        """
        budget = self.budget
        if budget is not None and not math.isfinite(budget):
            raise ConfigError(
                f"invalid batch limit: budget must be a finite dollar amount: {budget}"
            )
        try:
            return BatchLimits(
                rpm=self.rpm, tpm=self.tpm, max_pending=self.max_pending, budget=budget
            )
        except ValueError as exc:
            raise ConfigError(f"invalid batch limit: {exc}") from None
