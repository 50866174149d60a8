"""What an exception group from a nursery stands for at a public edge. Pure.

trio's nurseries wrap whatever their tasks raise in an exception group, and the tasks that were
cancelled because of it add their :class:`trio.Cancelled`. A caller of ``open_runtime`` or of a
store's opener should see the one failure itself (a ``ConfigError``, a user's own exception),
not a group of one wrapped in cancellations; a group that really holds several failures stays
a group.
"""

from __future__ import annotations

import trio

__all__ = ["sole_failure"]


def sole_failure(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception in ``group`` (nested groups included) that is not a cancellation,
    if there is exactly one; None otherwise."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        elif not isinstance(exc, trio.Cancelled):
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else None
