"""One process's side of shared budgets while the store cannot be trusted. Pure: no I/O, no trio.

A shared budget lives in the store (:mod:`sluice._limits.redis_script`), which every process
asks before it spends. Two things break that, and :class:`BudgetShares` keeps what this
process needs to stay within the budget through both:

* **The store does not answer** (``on_store_error="local"``). The process may then spend only
  its local share of what was left when the store went away: ``share * (limit - spent -
  reserved)``, all as the store last reported them, less what this process spent that the
  store has not been told yet. With ``N`` processes each holding a share ``s``, ``N * s <= 1``
  keeps the budget whole. Spend made meanwhile is booked into the store when it answers again,
  once (:meth:`BudgetShares.take_booking`, sent with a unique id the store applies once, and
  dropped from what is pending only after a round trip that carried it succeeded).
* **The store lost its history** (restarted empty). Each process then reports, once per loss,
  a floor (what it last knew of the store's spent plus reserved, or the ledger's sum) and its
  own spend since it started (:meth:`BudgetShares.contribution`); the store keeps the highest
  floor and the sum of the processes' own spend, whichever is larger. Until that is done the
  process admits at its local share.

Amounts are ``(micro-dollars, tokens)``; an account without a limit on one of them never
binds on it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .store import BudgetAsk

__all__ = ["BudgetShares"]


@attrs.define
class _Amounts:
    """One of an account's counters: micro-dollars and tokens."""

    micros: int = 0
    tokens: int = 0

    def add(self, micros: int, tokens: int) -> None:
        self.micros += micros
        self.tokens += tokens

    def pair(self) -> tuple[int, int]:
        return (self.micros, self.tokens)

    def clear(self) -> None:
        self.micros = self.tokens = 0


@attrs.define
class _Account:
    max_micros: int | None
    max_tokens: int | None
    spent: _Amounts = attrs.Factory(_Amounts)
    """Everything this process spent under the account since it started."""
    held: _Amounts = attrs.Factory(_Amounts)
    """Worst cases of this process's attempts in flight (not yet in a contribution)."""
    local_held: _Amounts = attrs.Factory(_Amounts)
    """Of ``held``: attempts admitted without the store."""
    unbooked: _Amounts = attrs.Factory(_Amounts)
    """Spend of attempts admitted without the store, not yet sent to it."""
    booking: _Amounts = attrs.Factory(_Amounts)
    """Spend sent to the store, not yet known to have arrived."""
    allowance: tuple[int, int] | None = None
    """During an outage: what this process may add to ``pending`` since ``base``."""
    base: tuple[int, int] = (0, 0)
    before: _Amounts = attrs.Factory(_Amounts)
    """Spend this process's ledger held for the account beyond what it spent since it
    started (a job's earlier runs, a virtual key's spend loaded at start)."""

    def pending(self) -> tuple[int, int]:
        """What this process may have spent that the store does not know of."""
        local, unbooked, booking = self.local_held, self.unbooked, self.booking
        return (
            local.micros + unbooked.micros + booking.micros,
            local.tokens + unbooked.tokens + booking.tokens,
        )


@attrs.define
class _Hold:
    names: tuple[str, ...]
    micros: int
    tokens: int
    local: bool
    covered: bool = False
    """Counted in a contribution already: its settlement is booked nowhere."""


class BudgetShares:
    """This process's view of its shared budget accounts (see the module docstring)."""

    def __init__(self, share: float) -> None:
        if not 0 < share <= 1:
            raise ValueError("the local share is a fraction in (0, 1]")
        self.share = share
        self._accounts: dict[str, _Account] = {}
        self._holds: dict[str, _Hold] = {}
        self._known: Mapping[str, tuple[int, int, int, int]] = {}
        """The store's balances when the outage began."""
        self._local = False
        self._frozen: tuple[int, list[tuple[str, int, int, int, int]]] | None = None
        self._unbooked: set[str] = set()
        """Accounts with spend to book (so an admission need not look at every account)."""
        self._in_booking: set[str] = set()

    def _account(self, name: str, max_micros: int | None, max_tokens: int | None) -> _Account:
        account = self._accounts.get(name)
        if account is None:
            account = self._accounts[name] = _Account(max_micros, max_tokens)
        else:
            account.max_micros, account.max_tokens = max_micros, max_tokens
        return account

    def _note_ledger(self, ask: BudgetAsk) -> None:
        """Learn from ``ask.spent`` (what the process's ledger holds per account) the spend
        that predates this process's own count."""
        for (name, _, _), (micros, tokens) in zip(ask.accounts, ask.spent, strict=False):
            account = self._accounts[name]
            before, spent = account.before, account.spent
            before.micros = max(before.micros, micros - spent.micros)
            before.tokens = max(before.tokens, tokens - spent.tokens)

    # -- outages -------------------------------------------------------------------------

    def go_local(self, known: Mapping[str, tuple[int, int, int, int]]) -> None:
        """The store stopped answering; ``known`` is what it last reported per account
        (spent micros, spent tokens, reserved micros, reserved tokens)."""
        self._local = True
        self._known = dict(known)
        for account in self._accounts.values():
            account.allowance = None  # worked out at first use, from the balances above

    def back(self) -> None:
        """The store answers again: its own accounts decide from now on."""
        self._local = False
        for account in self._accounts.values():
            account.allowance = None

    def _allowance(self, name: str, account: _Account) -> tuple[int, int]:
        if account.allowance is None:
            sm, st, rm, rt = self._known.get(name, (0, 0, 0, 0))
            pending = account.pending()
            allowance = []
            for i, (limit, used) in enumerate(
                ((account.max_micros, sm + rm), (account.max_tokens, st + rt))
            ):
                if limit is None:
                    allowance.append(0)
                    continue
                left = max(0, limit - used - pending[i])
                allowance.append(math.floor(self.share * left))
            account.allowance = (allowance[0], allowance[1])
            account.base = pending
        return account.allowance

    def fits_local(self, ask: BudgetAsk) -> bool:
        """Whether an attempt may be admitted without the store: its worst case fits what
        is left of this process's share of every account it falls under."""
        amounts = (ask.micros, ask.tokens)
        for name, max_micros, max_tokens in ask.accounts:
            account = self._account(name, max_micros, max_tokens)
            allowance = self._allowance(name, account)
            pending = account.pending()
            for i, limit in enumerate((max_micros, max_tokens)):
                if limit is None:
                    continue
                used = pending[i] - account.base[i]
                if used + amounts[i] > allowance[i]:
                    return False
        return True

    # -- holds -----------------------------------------------------------------------------

    def admitted(self, ask: BudgetAsk, *, local: bool) -> None:
        """An attempt was admitted with ``ask``'s reservation, by the store or (``local``)
        without it."""
        names = []
        for name, max_micros, max_tokens in ask.accounts:
            account = self._account(name, max_micros, max_tokens)
            account.held.add(ask.micros, ask.tokens)
            if local:
                account.local_held.add(ask.micros, ask.tokens)
            names.append(name)
        self._note_ledger(ask)
        self._holds[ask.hold] = _Hold(tuple(names), ask.micros, ask.tokens, local)

    def settled(self, hold: str, micros: int | None, tokens: int) -> bool | None:
        """The attempt of ``hold`` spent ``micros`` and ``tokens`` (``micros`` None: all it
        reserved). Returns whether it was admitted without the store (None: unknown hold)."""
        held = self._holds.pop(hold, None)
        if held is None:
            return None
        charge = (held.micros, held.tokens) if micros is None else (micros, tokens)
        for name in held.names:
            account = self._accounts[name]
            account.spent.add(*charge)
            if held.covered:
                continue
            account.held.add(-held.micros, -held.tokens)
            if held.local:
                account.local_held.add(-held.micros, -held.tokens)
                account.unbooked.add(*charge)
                self._unbooked.add(name)
        return held.local

    # -- booking outage spend ----------------------------------------------------------------

    def take_booking(self) -> list[tuple[str, int, int]]:
        """Spend made without the store and not yet sent to it: (account, micros, tokens).
        It stays pending (counted against a later outage's share) until :meth:`booked`."""
        out = []
        for name in sorted(self._unbooked):
            account = self._accounts[name]
            unbooked = account.unbooked.pair()
            if unbooked != (0, 0):
                out.append((name, *unbooked))
                account.booking.add(*unbooked)
                account.unbooked.clear()
                self._in_booking.add(name)
        self._unbooked.clear()
        return out

    def booked(self) -> None:
        """A round trip that carried every booking taken so far succeeded."""
        for name in self._in_booking:
            self._accounts[name].booking.clear()
        self._in_booking.clear()

    # -- lost history --------------------------------------------------------------------

    def contribution(
        self, generation: int, known: Mapping[str, tuple[int, int, int, int]]
    ) -> list[tuple[str, int, int, int, int]]:
        """What this process reports after the store's ``generation``-th loss of history:
        (account, floor micros, floor tokens, own micros, own tokens) per account it knows.

        The floor is what the store last reported (spent plus reserved); own spend is what
        this process's ledger holds (what it spent since it started, and what its ledger had
        from before) plus the worst cases of its attempts in flight, which from now on are
        booked nowhere else. The same generation gets the same answer,
        so a rebuild sent again counts nothing twice.
        """
        if self._frozen is not None and self._frozen[0] == generation:
            return self._frozen[1]
        for held in self._holds.values():
            held.covered = True
        out = []
        for name in sorted(set(self._accounts) | set(known)):
            sm, st, rm, rt = known.get(name, (0, 0, 0, 0))
            account = self._accounts.get(name)
            own = (0, 0)
            if account is not None:
                before, spent, flying = account.before, account.spent, account.held
                own = (
                    before.micros + spent.micros + flying.micros,
                    before.tokens + spent.tokens + flying.tokens,
                )
                for counter in (flying, account.local_held, account.unbooked, account.booking):
                    counter.clear()
            out.append((name, sm + rm, st + rt, own[0], own[1]))
        self._unbooked.clear()
        self._in_booking.clear()
        self._frozen = (generation, out)
        return out

    def accounts(self) -> Iterable[str]:
        return self._accounts.keys()
