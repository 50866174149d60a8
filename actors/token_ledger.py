"""The TokenLedger: running totals of calls and tokens per ``provider:model``."""

from __future__ import annotations

from typing import assert_never

import attrs
import trio

from sluice.errors import RuntimeClosed
from sluice.mail import GetTotals, LedgerMsg, LedgerTotals, RecordCall, RecordUsage

from .tell import take, tell

__all__ = ["TokenLedgerHandle", "run_token_ledger"]


async def run_token_ledger(
    inbox: trio.MemoryReceiveChannel[LedgerMsg],
    totals: dict[str, LedgerTotals] | None = None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep the totals until every sender of ``inbox`` is closed.

    ``totals`` is owned by the caller, so a restarted ledger continues where the crashed one
    stopped. ``GetTotals`` answers with a copy, so the asker cannot change the ledger's state.
    """
    totals = {} if totals is None else totals

    def entry(provider: str, model: str) -> LedgerTotals:
        key = f"{provider}:{model}"
        found = totals.get(key)
        if found is None:
            found = totals[key] = LedgerTotals()
        return found

    task_status.started()
    while True:
        try:
            msg = await take(inbox)
        except trio.EndOfChannel:
            return
        match msg:
            case RecordUsage(provider=provider, model=model, usage=usage):
                t = entry(provider, model)
                t.input_tokens += usage.input_tokens
                t.output_tokens += usage.output_tokens
                t.cache_read_tokens += usage.cache_read_tokens
                t.cache_write_tokens += usage.cache_write_tokens
                t.reasoning_tokens += usage.reasoning_tokens
            case RecordCall(provider=provider, model=model, ok=ok, attempts=attempts):
                t = entry(provider, model)
                t.calls += 1
                t.failures += 0 if ok else 1
                t.attempts += attempts
            case GetTotals(reply_to=reply_to):
                snapshot = {k: attrs.evolve(v) for k, v in totals.items()}
                try:
                    reply_to.send_nowait(snapshot)
                except (trio.BrokenResourceError, trio.WouldBlock):
                    pass
            case _:
                assert_never(msg)


@attrs.frozen
class TokenLedgerHandle:
    """What the other actors and the runtime hold to reach the TokenLedger."""

    _mailbox: trio.MemorySendChannel[LedgerMsg]

    async def record(self, msg: RecordUsage | RecordCall) -> None:
        """Record usage or a call's end; shielded, so a cancelled call still gets counted."""
        await tell(self._mailbox, msg)

    async def totals(self) -> dict[str, LedgerTotals]:
        reply_to, reply = trio.open_memory_channel[dict[str, LedgerTotals]](1)
        with reply_to, reply:
            try:
                await self._mailbox.send(GetTotals(reply_to))
                return await reply.receive()
            except (trio.BrokenResourceError, trio.EndOfChannel) as exc:
                raise RuntimeClosed("the token ledger has stopped") from exc
