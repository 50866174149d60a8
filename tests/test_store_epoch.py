"""A quota store that comes back empty (a Redis restart without persistence, a flush) is
unknown history: found by its run id, and admitted against at each process's local share for
one full window. Exact times through ``clock="caller"``; the loss is the prefix's keys
deleted, run id included, as a restart without persistence leaves them.
"""

from __future__ import annotations

import logging
import uuid

import coredis
import pytest

from sluice._limits.cost import Cost
from sluice._limits.fallback import FallbackQuotaStore
from sluice._limits.redis_store import RedisQuotaStore
from sluice._limits.store import Reservation, WindowSpec
from sluice._limits.store_epoch import (
    RUN_KEY,
    HistoryLost,
    distrusted_until,
    history_lost,
    new_run_id,
)

ONE = Cost(1, 0, 0)


def test_a_changed_run_id_is_a_loss_only_for_a_process_that_knew_the_old_one():
    assert history_lost("a", "b")
    assert not history_lost("a", "a")
    assert not history_lost(None, "b")  # the first answer teaches the id
    assert new_run_id() != new_run_id()


def test_the_store_is_distrusted_for_the_longest_window_after_the_loss():
    assert distrusted_until(100.0, [60.0, 1.0, 86400.0]) == 86500.0
    assert distrusted_until(100.0, []) == 100.0


async def lose_everything(client: coredis.Redis, prefix: str) -> None:
    keys = await client.keys("{" + prefix + "}*")
    assert keys
    await client.delete(list(keys))


async def test_the_redis_store_refuses_to_admit_into_a_store_that_lost_its_history(redis_url):
    prefix = f"epoch-{uuid.uuid4().hex}"
    specs = (WindowSpec("requests", 2, 60.0),)
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        a = RedisQuotaStore(client, prefix=prefix, clock="caller")
        b = RedisQuotaStore(client, prefix=prefix, clock="caller")
        assert isinstance(await a.reserve("k", specs, ONE, 0.0), Reservation)
        assert isinstance(await b.reserve("k", specs, ONE, 1.0), Reservation)  # learns the id
        assert a.run_id == b.run_id == await client.get("{" + prefix + "}:" + RUN_KEY)
        assert await b.reserve("k", specs, ONE, 2.0) == 58.0
        await lose_everything(client, prefix)
        with pytest.raises(HistoryLost):
            await a.reserve("k", specs, ONE, 3.0)
        with pytest.raises(HistoryLost):
            await b.reserve("k", specs, ONE, 3.0)
        assert a.run_id == b.run_id != "" and a.run_id is not None
        # Nothing was admitted by the refused asks; the next ones run under the new id.
        assert isinstance(await a.reserve("k", specs, ONE, 4.0), Reservation)
        assert isinstance(await b.reserve("k", specs, ONE, 4.0), Reservation)
        assert await a.reserve("k", specs, ONE, 5.0) == 59.0


class Processes:
    """Fallback stores on one Redis prefix, each standing for a process; the times are the
    caller's (virtual)."""

    def __init__(self, client: coredis.Redis, names: str, share: float) -> None:
        self.client = client
        self.prefix = f"epoch-share-{uuid.uuid4().hex}"
        self.stores = {
            name: FallbackQuotaStore(
                RedisQuotaStore(client, prefix=self.prefix, clock="caller"), "fail", share
            )
            for name in names
        }
        self.admitted: dict[str, list[float]] = {name: [] for name in names}

    async def ask(self, name: str, now: float, times: int = 1) -> None:
        store = self.stores[name]
        for _ in range(times):
            got = await store.reserve("k", SPECS, ONE, now)
            if isinstance(got, Reservation):
                self.admitted[name].append(now)
                await store.settle(got, ONE)
                await store.end(got)

    async def lose_everything(self) -> None:
        await lose_everything(self.client, self.prefix)

    def busiest_window(self) -> int:
        times = sorted(t for admitted in self.admitted.values() for t in admitted)
        return max(sum(1 for u in times if t - 60 < u <= t) for t in times)


SPECS = (WindowSpec("requests", 10, 60.0),)


async def test_processes_admit_at_their_share_for_one_window_after_the_loss(redis_url, caplog):
    """Two processes, 10 a minute shared, local shares of 1/2. a admits 5 at 0 s, b 5 at 10 s;
    Redis loses everything at 20 s; both ask every second. Each tells Redis its 5 again, so
    each admits again only once its own have left the window (a at 60 s, b at 70 s); from 80 s
    Redis alone decides, and a asks first each second: it takes what frees at 120 and 130 s.
    No 60 s window holds more than 10, where trusting the empty Redis would have admitted 10
    more at 20 s."""
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        run = Processes(client, "ab", 0.5)
        await run.ask("a", 0.0, 5)
        await run.ask("b", 10.0, 6)
        await run.lose_everything()
        with caplog.at_level(logging.WARNING, "sluice._limits"):
            for second in range(20, 141):
                await run.ask("a", float(second), 6)
                await run.ask("b", float(second), 6)
    assert run.admitted["a"] == [0.0] * 5 + [60.0] * 5 + [120.0] * 5 + [130.0] * 5
    assert run.admitted["b"] == [10.0] * 5 + [70.0] * 5
    assert run.stores["a"].lost_at == run.stores["b"].lost_at == 20.0
    assert caplog.text.count("came back without its history") == 2
    assert run.busiest_window() == 10


async def test_a_process_under_its_share_waits_for_the_history_of_one_over_it(redis_url):
    """a admitted 7 at 0 s, b 3 at 10 s (shares of 1/2 = 5). After the loss at 20 s b's own
    window has room for 2 more, but a has told Redis its 7: b waits for them to leave."""
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        run = Processes(client, "ab", 0.5)
        await run.ask("a", 0.0, 7)
        await run.ask("b", 10.0, 3)
        await run.lose_everything()
        for second in range(20, 100):
            await run.ask("a", float(second), 6)
            await run.ask("b", float(second), 6)
    assert [t for t in run.admitted["a"] + run.admitted["b"] if 10 < t < 60] == []
    assert run.busiest_window() == 10


async def test_a_process_that_admits_nothing_finds_the_loss_and_tells_its_part(redis_url):
    """a admitted 6 at 0 s and then nothing; its background look at the run id (``check_run``)
    finds the loss at 20.2 s and tells Redis its 6. b, with 4 of its share of 5 used, finds
    the loss on its own admission and waits past the grace, then for a's 6 to leave."""
    # (Without a's part told, b would have admitted 1 at 21.5 s: 11 in that minute.)
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        run = Processes(client, "ab", 0.5)
        await run.ask("a", 0.0, 6)
        await run.ask("b", 10.0, 4)
        await run.lose_everything()
        await run.ask("b", 20.0)
        await run.stores["a"].primary.check_run(20.2)
        assert run.stores["a"].lost_at == 20.2
        for second in range(21, 100):
            await run.ask("b", float(second), 6)
    # b: 1 at 60 s (its share), 4 at 70 s (its own 4 left); from 80 s Redis alone: 5 more.
    assert run.admitted["b"] == [10.0] * 4 + [60.0] * 1 + [70.0] * 4 + [80.0] * 5
    assert run.busiest_window() == 10


async def test_an_attempt_under_way_at_the_loss_keeps_its_reservation_in_the_new_store(
    redis_url,
):
    """1 request per 10 s. a's call is admitted at 0 s and still waits for its first chunk when
    Redis loses everything at 1 s; a tells Redis of it under its reservation id, so its first
    chunk at 5 s re-dates the copy: b is admitted at 15 s, 10 s after the provider saw the
    request, not at 10 s. The new store's ids move past it."""
    specs = (WindowSpec("requests", 1, 10.0),)
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        run = Processes(client, "ab", 1.0)
        a, b = run.stores["a"], run.stores["b"]
        under_way = await a.reserve("k", specs, ONE, 0.0)
        assert isinstance(under_way, Reservation)
        assert isinstance(await b.reserve("k", specs, ONE, 0.5), float)  # b learns the run id
        await run.lose_everything()
        await a.primary.check_run(1.0)
        await a.redate(under_way, 5.0)
        await a.primary.flush(5.0)
        admitted = None
        for tenth in range(10, 200):
            got = await b.reserve("k", specs, ONE, tenth / 10)
            if isinstance(got, Reservation):
                admitted = tenth / 10, got.ref
                break
        await a.settle(under_way, ONE)
        await a.end(under_way)
    assert admitted is not None
    assert admitted[0] == 15.0
    # A ref is "<generation>.<id>": b's comes after a loss, a's before; the ids go on.
    assert admitted[1].startswith("1.") and under_way.ref.startswith("0.")
    assert int(admitted[1].partition(".")[2]) > int(under_way.ref.partition(".")[2])
