"""``sluice batch --cancel OUT``: stop the provider batches an output's journal lists."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import trio

from ..._errors import ConfigError
from ..batch_guard import OutputLock, lock_path
from .engine import LaneOptions
from .journal import Journal, journal_path

if TYPE_CHECKING:
    from ..._config import RuntimeConfig

__all__ = ["cancel_batches"]


def _open(name: str) -> tuple[OutputLock, Journal]:
    path = journal_path(name)
    if not os.path.exists(path):
        raise ConfigError(f"{name} has no batch journal ({path}): no batches to cancel")
    lock = OutputLock(lock_path(os.path.realpath(name)), f"output {name}")
    lock.acquire()
    try:
        return lock, Journal(path)
    except BaseException:
        lock.release()
        raise


async def cancel_batches(
    output: str | os.PathLike[str],
    config: RuntimeConfig,
    *,
    options: LaneOptions | None = None,
) -> list[str]:
    """Ask the providers to stop every batch the output's journal lists as not merged; the
    ids of those asked. The output is locked meanwhile (no run may be writing it). Lines the
    batches finished keep their results: ``--resume`` merges them and sends the rest again.

    Raises:
        ConfigError: another process writes the output, there is no journal, or a provider
            it names has no batch API in ``config``.
    """
    from ..._runtime import open_runtime

    lock, journal = await trio.to_thread.run_sync(_open, os.fspath(output))
    try:
        backends = (options or LaneOptions()).backends
        asked: list[str] = []
        async with open_runtime(config) as rt:
            for sub in journal.active():
                if sub.batch_id is None:
                    continue
                backend = backends(rt, sub.provider)
                if backend is None:
                    raise ConfigError(
                        f"{sub.provider} has no batch API in this config: cancel batch"
                        f" {sub.batch_id} at the provider"
                    )
                await backend.cancel(sub.batch_id)
                asked.append(sub.batch_id)
        return asked
    finally:
        journal.close()
        lock.release()
