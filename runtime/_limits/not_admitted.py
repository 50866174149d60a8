"""What a look at a quota key decides when it admits nobody now: :class:`Wait` for room in the
windows, :class:`Refuse` an ask that can never be admitted, :class:`StoreDown` when the shared
store does not answer. Pure, like :mod:`sluice._limits.admission`, whose ``decide`` hands them
out (and serves their names): they load with the first ask a key does not admit at once, so a
program whose calls are admitted as they come never defines them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Generic, TypeVar

import attrs

from .._backoff import store_retry_delay
from .._errors import BudgetExceeded, CallError, StoreUnavailable, TooLargeForQuota
from .._ledger.prices import format_usd
from .._record import Value

if TYPE_CHECKING:
    from .admission import QuotaKey, Waiter
    from .store_rare import BudgetRefused, TooLarge

__all__ = ["Refuse", "StoreDown", "Wait", "refusal", "store_down"]

W = TypeVar("W", bound="Waiter")


@attrs.frozen(eq=False, repr=False)
class Refuse(Value, Generic[W]):
    """Refuse the head waiter (taken out of the queue) with ``error``, then go on with the next."""

    waiter: W
    error: CallError


@attrs.frozen(eq=False, repr=False)
class Wait(Value):
    """Admit nobody more now; look at the key again at ``until``."""

    until: float


@attrs.frozen(eq=False, repr=False)
class StoreDown(Value, Generic[W]):
    """The shared store did not answer: refuse ``refused`` (taken out of the queue) with
    ``error``; look at the key again at ``until`` (inf: nobody is left waiting for the store)."""

    refused: tuple[W, ...]
    error: StoreUnavailable
    until: float


def refusal(waiter: W, answer: TooLarge | BudgetRefused | CallError) -> Refuse[W]:
    """Refuse ``waiter`` (taken out of the queue) for the store's ``answer``: a cost beyond a
    whole window, a shared budget that can never cover it, or the store's own error."""
    from .store_rare import BudgetRefused, TooLarge  # what the store answered

    if isinstance(answer, TooLarge):
        return Refuse(waiter, too_large(answer))
    if isinstance(answer, BudgetRefused):
        return Refuse(waiter, budget_refused(answer))
    return Refuse(waiter, answer)


def store_down(key: QuotaKey[W], error: StoreUnavailable, now: float, grace: float) -> StoreDown[W]:
    """The store is asked again after a backoff from when it stopped answering; a waiter
    whose ``wait_for_store`` ends within ``grace`` of that (``admission.STORE_GRACE``) is
    refused now."""
    if key.store_down_since is None:
        key.store_down_since = now
    retry_at = now + store_retry_delay(now - key.store_down_since)

    def gives_up(waiter: W) -> bool:
        until = waiter.wait_for_store
        return until is None or until <= retry_at + grace

    refused = tuple(key.waiters.drop(gives_up))
    return StoreDown(refused, error, retry_at if key.waiters else math.inf)


def too_large(answer: TooLarge) -> TooLargeForQuota:
    return TooLargeForQuota(
        f"the call needs {answer.amount} {answer.dimension.replace('_', ' ')} but the quota"
        f" allows only {answer.limit} per {answer.period:g} s; lower max_tokens or shorten"
        " the prompt"
    )


def budget_refused(answer: BudgetRefused) -> BudgetExceeded:
    left = (
        f"${format_usd(max(0, answer.left))}"
        if answer.unit == "usd"
        else f"{max(0, answer.left)} tokens"
    )
    return BudgetExceeded(
        f"the shared {answer.account} budget has {left} left, less than this call may cost"
    )
