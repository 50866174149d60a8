"""The Redis quota store's run id as one process knows it, and that process's part of the
store's history to tell it again when it lost its own: :class:`RunHistory`.

A store that comes back without its data has a new run id (see
:mod:`sluice._limits.store_epoch`). The process that finds it bumps its ``generation``: a
reservation is known by ``"<generation>.<id>"``, and one made before the loss means nothing to
the store now, so its settlement is dropped. Then it tells the store what it admitted itself
in the last window (:meth:`RunHistory.seed`), keeping the ids of attempts still under way, so
that their re-dating and settlement reach the copies. Pure: the store sends what this builds.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .headers import Dimension

__all__ = ["RunHistory", "SeedWindow", "wire_period"]

log = logging.getLogger("sluice._limits")

SeedWindow: TypeAlias = "tuple[str, Dimension, float, Sequence[tuple[float, int, str]]]"
"""(quota key, dimension, period, [(admitted at, amount, reservation id or ""), ...] oldest
first): a reservation id for an attempt still under way, whose re-dating and settlement then
reach the copy."""


def wire_period(value: float) -> str:
    """A window's period as the quota script names it."""
    return repr(float(value))


class RunHistory:
    """The store's run id as this process knows it, how often it was found lost, and what
    this process has to tell it then."""

    def __init__(self) -> None:
        self.run_id = ""
        """"" before the first script run."""
        self.generation = 0
        """Times the store was found to have lost its history."""
        self.lost_at: float | None = None
        """When this process last found the store's run id changed (None: never)."""
        self.history: Callable[[float], Sequence[SeedWindow]] | None = None
        """This process's own admissions still in their windows at a time (None: nothing to
        tell)."""
        self.seed_due = False
        """The store lost its history and has not been told this process's part yet."""
        self.carried: set[str] = set()
        """Refs of an earlier generation whose entries were told to the store again under
        their own ids: their re-dating and settlement still apply."""

    def lost(self, run: str, account: str, now: float) -> None:
        """The store answered with run id ``run`` (another than known), or without the budget
        ``account``: what was meant for it is forgotten. A new run id (not only an account
        gone) also means its windows are empty: this process's own admissions are due to be
        told again (see :meth:`seed`)."""
        self.generation += 1
        self.run_id = run
        self.carried.clear()
        if account:
            log.warning("quota store: budget account %r is gone; what it held is unknown", account)
            return
        self.lost_at = now
        self.seed_due = True
        log.warning(
            "quota store came back without its history (its run id changed): telling it this"
            " process's admissions of the last window; admissions at a local share for a window"
        )

    def ref(self, rid: str) -> str:
        """The reference of reservation ``rid`` made now."""
        return f"{self.generation}.{rid}"

    def live(self, ref: str) -> str | None:
        """The store's id of a reservation made since the last lost history, or told to the
        store again under its own id since; else None (its id means nothing there now)."""
        generation, _, rid = ref.partition(".")
        if generation == str(self.generation) or ref in self.carried:
            return rid
        return None

    def seed(self, now: float) -> tuple[list[Any], set[str]]:
        """The windows of the ``seed`` request that tells the store this process's admissions
        still in their windows at ``now`` (none: nothing to tell), and the refs whose entries
        keep their ids there; :meth:`seeded` once it is sent."""
        history = self.history(now) if self.history is not None else ()
        windows: list[Any] = []
        carried = set()
        for key, dimension, period, counted in history:
            entries = []
            for at, n, ref in counted:
                rid = ref.partition(".")[2] if ref else ""
                if rid:
                    carried.add(ref)
                entries.append([now - at, n, rid])
            windows.append([key, dimension, wire_period(period), entries])
        return windows, carried

    def seeded(self, carried: set[str]) -> None:
        """The store has been told (the refs ``carried`` keep their ids there)."""
        self.carried |= carried
        self.seed_due = False
