"""Spending budgets that in-flight calls cannot overshoot. Pure: no trio, no clock.

A :class:`BudgetBook` holds one account per configured budget (global, per tag, per job), each
with a limit in micro-dollars, in tokens, or both. The RateLimiter consults it in the same step
that admits an attempt under its quota (one decision for both): the attempt's worst case (the
prompt estimate plus its ``max_tokens``, the dearer of input and cache-write price for prompt
tokens) is reserved from every account the call falls under, and settled with the real usage
when the attempt ends, which refunds the difference.

For each account the worst case is compared with what is left:

* more than ``limit - spent - reserved``, but no more than ``limit - spent``: it fits only once
  calls in flight settle, so it waits in its queue (a settlement wakes it);
* more than ``limit - spent``: it can never fit as asked (spending only grows). A call that set
  its own ``max_tokens`` is refused with :class:`~sluice._errors.BudgetExceeded` before it is
  sent, naming what is left. A call that set none reserves a guess (the provider's
  ``expected_output_tokens``), not a bound the provider knows of, so refusing it would refuse
  work the budget may well pay for (a budget near its end would refuse cheap calls with most of
  it left). It waits while calls in flight still hold reservations (they may settle below
  them); then, with nothing in flight, it goes with ``max_tokens`` lowered to what the money
  and tokens left can pay for (:attr:`BudgetHold.max_output`, at least ``MIN_CAPPED_OUTPUT``
  tokens, else it is refused). Its reply may stop early (``finish_reason`` ``length``), but the
  budget can no longer be passed: the provider itself bounds the output.
* otherwise it is reserved and admitted.

Since every admitted attempt holds its worst case until it settles, ``spent + reserved`` never
exceeds the limit, so the calls in flight together can never overshoot it. That holds as far
as the worst case holds: output cannot pass ``max_tokens``, but a call without ``max_tokens``
that fits reserves the provider's ``expected_output_tokens`` and is sent without a limit, and
the prompt is an estimate (about four characters a token); set ``max_tokens`` where the limit
must be hard. An attempt that ends with no usage reported (cancelled or broken after output
began) is charged its whole reservation.

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
from .._record import Record, Value
from .hold import BudgetClaim, BudgetHold
from .prices import PriceTable, cost_micros, format_usd, worst_case_micros

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._limits.cost import Cost
    from .prices import ModelPrice

_MILLION = 1_000_000

__all__ = [
    "MIN_CAPPED_OUTPUT",
    "Account",
    "Budget",
    "BudgetBook",
    "BudgetClaim",
    "BudgetHold",
    "BudgetStatus",
]

MIN_CAPPED_OUTPUT = 16
"""The fewest output tokens a call is sent with when the budget lowers its ``max_tokens``: a
reply cut shorter is rarely worth paying for, so below this the call is refused instead."""


@attrs.frozen(eq=False, kw_only=True, repr=False)
class Budget(Value):
    """One budget: a limit on micro-dollars, tokens (input + output), or both."""

    scope: Literal["global", "tag", "job"] = "global"
    tag: str | None = None
    """The tag a ``tag`` budget covers."""
    max_micros: int | None = None
    max_tokens: int | None = None

    @property
    def name(self) -> str:
        return f"tag {self.tag!r}" if self.scope == "tag" else self.scope


@attrs.define(eq=False, repr=False)
class Account(Record):
    """One budget's running totals, kept by the book (the holds of :mod:`.hold` name them)."""

    budget: Budget
    spent_micros: int = 0
    spent_tokens: int = 0
    reserved_micros: int = 0
    reserved_tokens: int = 0
    refused: int = 0


@attrs.frozen(eq=False, repr=False)
class BudgetStatus(Value):
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
        self._global: list[Account] = []
        self._tags: dict[str, list[Account]] = {}
        self._all: list[Account] = []
        for budget in budgets:
            account = Account(budget)
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
        account = Account(budget, spent_micros=spent_micros, spent_tokens=spent_tokens)
        if budget.scope == "tag":
            if budget.tag is None:
                raise ValueError("a tag budget needs its tag")
            self._tags.setdefault(budget.tag, []).append(account)
        else:
            self._global.append(account)
        self._all.append(account)

    def accounts_for(self, claim: BudgetClaim) -> tuple[Account, ...]:
        tagged = self._tags.get(claim.tag, ()) if claim.tag is not None else ()
        return (*self._global, *tagged)

    def hold(self, claim: BudgetClaim, cost: Cost) -> BudgetHold | BudgetExceeded | None:
        """Reserve ``cost``'s worst case for an attempt of ``claim``.

        Returns the hold (with ``max_output`` set when the budget lowered a guessed output),
        a :class:`BudgetExceeded` when it can never fit, or None when it fits only after
        attempts in flight settle (ask again then).
        """
        accounts = self.accounts_for(claim)
        if not accounts:
            return self._reserve(accounts, claim, 0, cost.input_tokens + cost.output_tokens)
        price = None
        if any(a.budget.max_micros is not None for a in accounts):
            price = self.prices.lookup(claim.provider, claim.model)
            if price is None:
                account = next(a for a in accounts if a.budget.max_micros is not None)
                account.refused += 1
                return BudgetExceeded(
                    f"the {account.budget.name} budget is in dollars and {claim.provider}:"
                    f"{claim.model} has no known price, so its cost cannot be bounded; give"
                    " it a price in ledger.prices"
                )
        micros = 0 if price is None else worst_case_micros(price, cost)
        tokens = cost.input_tokens + cost.output_tokens
        short = self._short(accounts, micros, tokens)
        if short is None:
            if any(self._waits(a, micros, tokens) for a in accounts):
                return None
            return self._reserve(accounts, claim, micros, tokens)
        if not claim.output_set:
            if any(a.reserved_micros or a.reserved_tokens for a in accounts):
                return None  # calls in flight may settle below their reservations
            output = self._affordable_output(accounts, price, cost)
            if output >= MIN_CAPPED_OUTPUT:
                capped = attrs.evolve(cost, output_tokens=output)
                micros = 0 if price is None else worst_case_micros(price, capped)
                held = self._reserve(accounts, claim, micros, cost.input_tokens + output)
                held.max_output = output
                return held
        short.refused += 1
        return self._refusal(short, claim, cost, micros, tokens)

    @staticmethod
    def _short(accounts: Sequence[Account], micros: int, tokens: int) -> Account | None:
        """The first account whose budget left (reservations aside) is below the worst case."""
        for account in accounts:
            budget = account.budget
            if budget.max_micros is not None and micros > budget.max_micros - account.spent_micros:
                return account
            if budget.max_tokens is not None and tokens > budget.max_tokens - account.spent_tokens:
                return account
        return None

    @staticmethod
    def _waits(account: Account, micros: int, tokens: int) -> bool:
        """Whether the worst case fits ``account`` only once reservations are settled."""
        budget = account.budget
        micros_left = budget.max_micros
        if micros_left is not None:
            micros_left -= account.spent_micros + account.reserved_micros
            if micros > micros_left:
                return True
        if budget.max_tokens is not None:
            return tokens > budget.max_tokens - account.spent_tokens - account.reserved_tokens
        return False

    @staticmethod
    def _affordable_output(
        accounts: Sequence[Account], price: ModelPrice | None, cost: Cost
    ) -> int:
        """The most output tokens (up to ``cost``'s) every account's budget left pays for,
        beside the prompt's worst case; negative when not even the prompt fits."""
        output = cost.output_tokens
        for account in accounts:
            budget = account.budget
            if budget.max_micros is not None and price is not None:
                p = price.for_prompt(cost.input_tokens)
                left = (budget.max_micros - account.spent_micros) * _MILLION
                left -= cost.input_tokens * max(p.input, p.cache_write)
                if p.output > 0:
                    output = min(output, left // p.output)
                elif left < 0:
                    output = -1
            if budget.max_tokens is not None:
                left_tokens = budget.max_tokens - account.spent_tokens - cost.input_tokens
                output = min(output, left_tokens)
        return output

    def _reserve(
        self, accounts: tuple[Account, ...], claim: BudgetClaim, micros: int, tokens: int
    ) -> BudgetHold:
        held = BudgetHold(accounts, micros, tokens, claim)
        for account in accounts:
            account.reserved_micros += micros
            account.reserved_tokens += tokens
        if accounts:
            self._holds.add(held)
        return held

    @staticmethod
    def _refusal(
        account: Account, claim: BudgetClaim, cost: Cost, micros: int, tokens: int
    ) -> BudgetExceeded:
        budget = account.budget
        if not claim.output_set:
            left = []
            if budget.max_micros is not None:
                left.append(_usd(max(0, budget.max_micros - account.spent_micros)))
            if budget.max_tokens is not None:
                left.append(f"{max(0, budget.max_tokens - account.spent_tokens)} tokens")
            return BudgetExceeded(
                f"the {budget.name} budget has {' and '.join(left)} left, less than this call's"
                f" prompt ({cost.input_tokens} tokens estimated) and {MIN_CAPPED_OUTPUT} output"
                " tokens cost"
            )
        if budget.max_micros is not None and micros > budget.max_micros - account.spent_micros:
            micros_left = budget.max_micros - account.spent_micros
            return BudgetExceeded(
                f"the {budget.name} budget has {_usd(max(0, micros_left))} left of"
                f" {_usd(budget.max_micros)}, and this call may cost up to"
                f" {_usd(micros)} ({cost.input_tokens} prompt tokens estimated,"
                f" {cost.output_tokens} output tokens at most)"
            )
        assert budget.max_tokens is not None
        tokens_left = budget.max_tokens - account.spent_tokens
        return BudgetExceeded(
            f"the {budget.name} budget has {max(0, tokens_left)} tokens left of"
            f" {budget.max_tokens}, and this call may use up to {tokens}"
        )

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

    def shared_name(self, account: Account) -> str:
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
