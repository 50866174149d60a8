"""Spending budgets that in-flight calls cannot overshoot. Pure: no trio, no clock.

A :class:`BudgetBook` holds one account per configured budget (global, per tag, per job), each
with a limit in micro-dollars, in tokens, or both. The RateLimiter consults it in the same step
that admits an attempt under its quota (one decision for both): the attempt's worst case (the
prompt estimate plus its ``max_tokens``, the dearer of input and cache-write price for prompt
tokens) is reserved from every account the call falls under, and settled with the real usage
when the attempt ends, which refunds the difference.

For each account the worst case is compared with what is left:

* more than ``limit - spent``: it can never fit (spending only grows), so the call is refused
  with :class:`~sluice._errors.BudgetExceeded` before it is sent, naming what is left;
* more than ``limit - spent - reserved``: it fits only once calls in flight settle, so it waits
  in its queue (a settlement wakes it);
* otherwise it is reserved and admitted.

Since every admitted attempt holds its worst case until it settles, ``spent + reserved`` never
exceeds the limit, so the calls in flight together can never overshoot it. That holds as far
as the worst case holds: output cannot pass ``max_tokens``, but a call without ``max_tokens``
reserves the provider's ``expected_output_tokens`` and the prompt is an estimate (about four
characters a token); set ``max_tokens`` where the limit must be hard. An attempt that ends with
no usage reported (cancelled or broken after output began) is charged its whole reservation.

A money budget refuses calls to models without a price: their cost would be a guess.

Why in the RateLimiter's admission rather than a separate ask to the TokenLedger before it: a
separate check-then-admit has a window between the two steps (the budget said yes, then the
attempt waits in the quota queue while others are admitted against the same remaining money),
which is exactly how in-flight calls overshoot budgets elsewhere (LiteLLM #40095, #26672). Here
the reservation is taken by the same single actor, in the same synchronous step, that hands
out the admission, and released by the same ``Settle`` that settles the quota, so no admitted
attempt is ever unaccounted for, a retry reserves again, a call that waits for budget waits in
its quota queue (priorities and ageing still apply), and an asker that leaves is refunded in
full. The book itself stays pure and is only ever touched by the RateLimiter task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import attrs

from .._errors import BudgetExceeded
from .._messages import Usage
from .._record import Record
from .prices import PriceTable, cost_micros, format_usd, worst_case_micros

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._limits.cost import Cost

__all__ = ["Budget", "BudgetBook", "BudgetClaim", "BudgetHold", "BudgetStatus"]


@attrs.frozen(kw_only=True, repr=False)
class Budget(Record):
    """One budget: a limit on micro-dollars, tokens (input + output), or both."""

    scope: Literal["global", "tag", "job"] = "global"
    tag: str | None = None
    """The tag a ``tag`` budget covers."""
    max_micros: int | None = None
    max_tokens: int | None = None

    @property
    def name(self) -> str:
        return f"tag {self.tag!r}" if self.scope == "tag" else self.scope


@attrs.frozen(repr=False)
class BudgetClaim(Record):
    """Who asks: the model an attempt goes to, and the call's tag."""

    provider: str
    model: str
    tag: str | None = None


@attrs.define(eq=False, repr=False)
class _Account(Record):
    budget: Budget
    spent_micros: int = 0
    spent_tokens: int = 0
    reserved_micros: int = 0
    reserved_tokens: int = 0
    refused: int = 0


@attrs.frozen(repr=False)
class BudgetStatus(Record):
    """A snapshot of one budget account."""

    name: str
    max_micros: int | None
    max_tokens: int | None
    spent_micros: int
    spent_tokens: int
    reserved_micros: int
    """Worst cases of attempts in flight."""
    reserved_tokens: int
    refused: int
    """Calls refused so far."""

    @property
    def left_micros(self) -> int | None:
        if self.max_micros is None:
            return None
        return self.max_micros - self.spent_micros - self.reserved_micros

    @property
    def left_tokens(self) -> int | None:
        if self.max_tokens is None:
            return None
        return self.max_tokens - self.spent_tokens - self.reserved_tokens


@attrs.define(eq=False, repr=False)
class BudgetHold(Record):
    """What one admitted attempt reserved; settled exactly once."""

    accounts: tuple[_Account, ...]
    micros: int
    tokens: int
    claim: BudgetClaim
    settled: bool = False


def _usd(micros: int) -> str:
    return f"${format_usd(micros)}"


class BudgetBook:
    """Every budget account of one runtime. Only the RateLimiter actor calls it.

    Args:
        budgets: the accounts to keep.
        prices: prices worst cases and usage.
        job: the runtime's job; ``job`` budgets cover every call of this runtime.
        spent_by_job: (micro-dollars, tokens) the ledger already holds for ``job`` (from an
            earlier run of the same job), charged to ``job`` budgets from the start.
    """

    def __init__(
        self,
        budgets: Sequence[Budget],
        prices: PriceTable,
        *,
        job: str = "",
        spent_by_job: tuple[int, int] = (0, 0),
    ) -> None:
        self.prices = prices
        self.job = job
        self._global: list[_Account] = []
        self._tags: dict[str, list[_Account]] = {}
        self._all: list[_Account] = []
        for budget in budgets:
            account = _Account(budget)
            if budget.scope == "tag":
                if budget.tag is None:
                    raise ValueError("a tag budget needs its tag")
                self._tags.setdefault(budget.tag, []).append(account)
            else:
                if budget.scope == "job":
                    account.spent_micros, account.spent_tokens = spent_by_job
                self._global.append(account)
            self._all.append(account)
        self._holds: set[BudgetHold] = set()

    def add(self, budget: Budget, *, spent_micros: int = 0, spent_tokens: int = 0) -> None:
        """Open one more account, already charged ``spent_*`` (what the ledger holds for it).

        For budgets that appear while the runtime runs (a gateway's virtual key issued over
        its admin API, or loaded at start with what earlier runs spent). Synchronous, so the
        RateLimiter never sees a half-added account; calls already admitted are not charged
        to it.
        """
        account = _Account(budget, spent_micros=spent_micros, spent_tokens=spent_tokens)
        if budget.scope == "tag":
            if budget.tag is None:
                raise ValueError("a tag budget needs its tag")
            self._tags.setdefault(budget.tag, []).append(account)
        else:
            self._global.append(account)
        self._all.append(account)

    def accounts_for(self, claim: BudgetClaim) -> tuple[_Account, ...]:
        tagged = self._tags.get(claim.tag, ()) if claim.tag is not None else ()
        return (*self._global, *tagged)

    def hold(self, claim: BudgetClaim, cost: Cost) -> BudgetHold | BudgetExceeded | None:
        """Reserve ``cost``'s worst case for an attempt of ``claim``.

        Returns the hold, a :class:`BudgetExceeded` when it can never fit, or None when it
        fits only after attempts in flight settle (ask again then).
        """
        accounts = self.accounts_for(claim)
        tokens = cost.input_tokens + cost.output_tokens
        micros: int | None = 0
        if any(a.budget.max_micros is not None for a in accounts):
            price = self.prices.lookup(claim.provider, claim.model)
            micros = None if price is None else worst_case_micros(price, cost)
        wait = False
        for account in accounts:
            budget = account.budget
            if budget.max_micros is not None:
                if micros is None:
                    account.refused += 1
                    return BudgetExceeded(
                        f"the {budget.name} budget is in dollars and {claim.provider}:"
                        f"{claim.model} has no known price, so its cost cannot be bounded; give"
                        " it a price in ledger.prices"
                    )
                left = budget.max_micros - account.spent_micros
                if micros > left:
                    account.refused += 1
                    return BudgetExceeded(
                        f"the {budget.name} budget has {_usd(max(0, left))} left of"
                        f" {_usd(budget.max_micros)}, and this call may cost up to"
                        f" {_usd(micros)} ({cost.input_tokens} prompt tokens estimated,"
                        f" {cost.output_tokens} output tokens at most)"
                    )
                wait = wait or micros > left - account.reserved_micros
            if budget.max_tokens is not None:
                left = budget.max_tokens - account.spent_tokens
                if tokens > left:
                    account.refused += 1
                    return BudgetExceeded(
                        f"the {budget.name} budget has {max(0, left)} tokens left of"
                        f" {budget.max_tokens}, and this call may use up to {tokens}"
                    )
                wait = wait or tokens > left - account.reserved_tokens
        if wait:
            return None
        held = BudgetHold(accounts, micros or 0, tokens, claim)
        for account in accounts:
            account.reserved_micros += held.micros
            account.reserved_tokens += tokens
        if accounts:
            self._holds.add(held)
        return held

    def settle(self, held: BudgetHold, usage: Usage | None) -> bool:
        """The attempt ended: charge its real usage, refund the rest of its reservation.

        ``usage`` None charges the whole reservation (the attempt may have used it all).
        Returns True when an account changed (waiting calls may fit now).
        """
        if held.settled or not held.accounts:
            return False
        held.settled = True
        self._holds.discard(held)
        micros, tokens = self.charge(held, usage)
        for account in held.accounts:
            account.reserved_micros -= held.micros
            account.reserved_tokens -= held.tokens
            account.spent_micros += micros
            account.spent_tokens += tokens
        return True

    def charge(self, held: BudgetHold, usage: Usage | None) -> tuple[int, int]:
        """(micro-dollars, tokens) an attempt is charged: its real usage, or with ``usage``
        None its whole reservation."""
        if usage is None:
            return held.micros, held.tokens
        price = self.prices.lookup(held.claim.provider, held.claim.model)
        micros = 0 if price is None else cost_micros(price, usage)
        return micros, usage.input_tokens + usage.output_tokens

    def shared_name(self, account: _Account) -> str:
        """The account's name in a shared store: a ``job`` budget is the job's own."""
        budget = account.budget
        if budget.scope == "tag":
            return f"tag:{budget.tag}"
        if budget.scope == "job":
            return f"job:{self.job}"
        return "global"

    def release(self, held: BudgetHold) -> bool:
        """Refund a reservation in full: its attempt was never sent."""
        return self.settle(held, Usage())

    def charge_outstanding(self) -> None:
        """Charge every unsettled reservation in full.

        For a RateLimiter restarted after a crash: the crashed instance's tickets will never
        be settled, and their attempts may still be spending.
        """
        for held in list(self._holds):
            self.settle(held, None)

    def status(self) -> list[BudgetStatus]:
        return [
            BudgetStatus(
                name=a.budget.name,
                max_micros=a.budget.max_micros,
                max_tokens=a.budget.max_tokens,
                spent_micros=a.spent_micros,
                spent_tokens=a.spent_tokens,
                reserved_micros=a.reserved_micros,
                reserved_tokens=a.reserved_tokens,
                refused=a.refused,
            )
            for a in self._all
        ]
