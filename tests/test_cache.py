"""The response cache's pure parts: the key, the LRU, the file store, the replayed events."""

from __future__ import annotations

import os
import subprocess
import sys

import attrs
import pytest

from sluice import (
    CacheConfig,
    ChatRequest,
    ChatResult,
    Completed,
    Deadlines,
    Message,
    ReasoningDelta,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolOptions,
)
from sluice._cache import LruCache, ResponseCache, replay_events, request_key
from sluice._cache.sqlite import SQLiteCacheStore
from sluice._config import config_from_env, load_config
from sluice._errors import ConfigError
from sluice._messages import ReasoningPart, TextPart, Timings, Usage
from sluice._tools import CapabilityOverride

WEATHER = Tool(
    name="get_weather",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
BASE = ChatRequest(model="sim:echo", messages=[Message.system("Be brief."), Message.user("Hi")])


def result(text: str = "Hello", **fields) -> ChatResult:
    fields.setdefault("message", Message.assistant(text))
    fields.setdefault("finish_reason", "stop")
    return ChatResult(
        call_id="c1",
        provider="sim",
        model="echo",
        usage=Usage(10, 2),
        attempts=2,
        timings=Timings(queued=0.5, time_to_first_token=1.0, total=2.0),
        request_id="req-1",
        models_tried=("sim:echo",),
        **fields,
    )


# The key -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"model": "sim:other"},
        {"messages": [Message.system("Be brief."), Message.user("Hi!")]},
        {"messages": [Message.user("Hi")]},
        {"tools": [WEATHER]},
        {"tool_choice": "none"},
        {"parallel_tool_calls": False},
        {"temperature": 0.5},
        {"top_p": 0.9},
        {"max_tokens": 10},
        {"stop": ["\n"]},
        {"seed": 7},
        {"extra_body": {"top_k": 3}},
        {"extra_headers": {"anthropic-beta": "context-1m-2025-08-07"}},
        {"fallbacks": ["sim:other"]},
        {"tool_options": ToolOptions(max_corrections=0)},
    ],
    ids=lambda change: next(iter(change)),
)
def test_every_part_of_the_question_changes_the_key(change):
    assert request_key(attrs.evolve(BASE, **change)) != request_key(BASE)


def test_a_tool_choice_needs_its_tools_and_each_change_of_a_tool_counts():
    with_tool = attrs.evolve(BASE, tools=[WEATHER], tool_choice="auto")
    keys = {
        request_key(with_tool),
        request_key(attrs.evolve(with_tool, tool_choice="required")),
        request_key(attrs.evolve(with_tool, tool_choice="get_weather")),
        request_key(attrs.evolve(with_tool, tools=[attrs.evolve(WEATHER, description="x")])),
        request_key(
            attrs.evolve(with_tool, tools=[attrs.evolve(WEATHER, parameters={"type": "object"})])
        ),
    }
    assert len(keys) == 5


def test_configured_params_and_the_backend_are_part_of_the_key():
    plain = request_key(BASE)
    assert request_key(BASE, params={"provider": {}, "model": {}}) != request_key(
        BASE, params={"provider": {"temperature": 0}, "model": {}}
    )
    assert request_key(BASE, base_url="http://a/v1") != request_key(BASE, base_url="http://b/v1")
    assert request_key(BASE, params={}) == plain


@pytest.mark.parametrize(
    "change",
    [
        {"stream": False},
        {"tag": "job-7"},
        {"priority": "background"},
        {"deadlines": Deadlines(total=5)},
        {"on_partial": "fail"},
        {"response_cache": True},
        {"cache_breakpoints": True},
        {
            "messages": [
                Message.system("Be brief."),
                Message.user([TextPart("Hi", cache_control={"type": "ephemeral"})]),
            ]
        },
    ],
    ids=lambda change: next(iter(change)),
)
def test_how_a_call_runs_is_not_part_of_the_key(change):
    assert request_key(attrs.evolve(BASE, **change)) == request_key(BASE)


def test_mapping_order_does_not_change_the_key():
    one = attrs.evolve(BASE, extra_body={"a": 1, "b": {"x": 1, "y": 2}})
    two = attrs.evolve(BASE, extra_body={"b": {"y": 2, "x": 1}, "a": 1})
    assert request_key(one) == request_key(two)


def test_the_key_is_the_same_in_every_process():
    """Sets (a capability override's modes) are sorted, not hashed: a file outlives a run."""
    code = (
        "from sluice import ChatRequest, ToolOptions\n"
        "from sluice._tools import CapabilityOverride\n"
        "from sluice._cache import request_key\n"
        "caps = CapabilityOverride(tool_choice=['auto', 'none', 'required', 'specific'])\n"
        "r = ChatRequest(model='sim:x', messages='hi', tool_options=ToolOptions("
        "capabilities=caps))\n"
        "print(request_key(r))\n"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            check=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    caps = CapabilityOverride(tool_choice=["auto", "none", "required", "specific"])
    here = ChatRequest(model="sim:x", messages="hi", tool_options=ToolOptions(capabilities=caps))
    assert keys == {request_key(here)}


# The LRU -----------------------------------------------------------------------------------


def test_lru_evicts_the_least_recently_used():
    lru: LruCache[str] = LruCache(2)
    lru.put("a", "A", 0)
    lru.put("b", "B", 0)
    assert lru.get("a", 0) == "A"  # now b is the least recently used
    lru.put("c", "C", 0)
    assert "b" not in lru and lru.get("a", 0) == "A" and lru.get("c", 0) == "C"
    stats = lru.statistics()
    assert (stats.entries, stats.evictions, stats.hits, stats.misses) == (2, 1, 3, 0)
    assert lru.get("b", 0) is None
    assert lru.statistics().misses == 1


def test_lru_entries_expire_after_their_ttl():
    lru: LruCache[str] = LruCache(10, ttl=60)
    lru.put("a", "A", 100.0)
    assert lru.get("a", 159.9) == "A"
    assert lru.get("a", 160.0) is None
    assert "a" not in lru
    assert lru.statistics().expirations == 1
    lru.put("a", "A2", 200.0)  # a new store starts a new lifetime
    assert lru.get("a", 259.0) == "A2"


def test_lru_refuses_no_room():
    with pytest.raises(ValueError, match="at least 1"):
        LruCache(0)


# ResponseCache -----------------------------------------------------------------------------


def test_a_hit_is_the_stored_reply_with_nothing_of_the_original_call():
    cache = ResponseCache(CacheConfig(enabled=True))
    cache.put("k", result())
    hit = cache.get("k", "c9")
    assert hit is not None
    assert hit == attrs.evolve(
        result(),
        call_id="c9",
        usage=Usage(),
        attempts=0,
        corrections=0,
        timings=Timings(),
        cached=True,
    )
    assert cache.get("other", "c10") is None
    stats = cache.statistics()
    assert (stats.hits, stats.misses, stats.stores, stats.entries) == (1, 1, 1, 1)


def test_results_are_frozen_so_no_hit_can_change_another():
    cache = ResponseCache(CacheConfig(enabled=True))
    cache.put("k", result())
    first = cache.get("k", "c1")
    assert first is not None
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        first.message = Message.assistant("changed")  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        first.message.content[0].text = "changed"  # type: ignore[misc,union-attr]
    assert isinstance(first.message.content, tuple)
    second = cache.get("k", "c2")
    assert second is not None and second.text == "Hello"


@pytest.mark.parametrize(
    "nothing",
    [
        result(""),
        result("   "),
        result("blocked", finish_reason="content_filter"),
    ],
    ids=["empty", "blank", "filtered"],
)
def test_a_reply_with_nothing_in_it_is_not_stored(nothing):
    cache = ResponseCache(CacheConfig(enabled=True))
    cache.put("k", nothing)
    assert cache.get("k", "c2") is None
    assert cache.statistics().skipped == 1


def test_the_memory_stays_within_max_entries():
    cache = ResponseCache(CacheConfig(enabled=True, max_entries=2))
    for key in "abc":
        cache.put(key, result(key))
    assert cache.get("a", "x") is None
    assert cache.get("c", "x") is not None
    stats = cache.statistics()
    assert (stats.entries, stats.evictions) == (2, 1)


def test_the_ttl_runs_on_the_given_clock():
    now = [1000.0]
    cache = ResponseCache(CacheConfig(enabled=True, ttl=30), clock=lambda: now[0])
    cache.put("k", result())
    now[0] = 1029.0
    assert cache.get("k", "c") is not None
    now[0] = 1030.0
    assert cache.get("k", "c") is None


# The file ----------------------------------------------------------------------------------


def test_the_file_keeps_results_and_gives_back_equal_values(tmp_path):
    path = tmp_path / "sub" / "cache.sqlite3"
    tool_call = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')
    stored = attrs.evolve(
        result(), message=Message.assistant([TextPart("Let me look."), tool_call]), cached=True
    )
    store = SQLiteCacheStore.open(path, ttl=None, max_stored=10, now=0)
    store.put("k", stored, now=1.0)
    store.close()
    again = SQLiteCacheStore.open(path, ttl=None, max_stored=10, now=2.0)
    assert again.get("k", now=3.0) == stored
    assert again.get("missing", now=3.0) is None
    again.close()
    assert again.get("k", now=3.0) is None  # closed: a miss, not an error


def test_opening_the_file_drops_expired_and_the_oldest_beyond_max_stored(tmp_path):
    path = tmp_path / "cache.sqlite3"
    store = SQLiteCacheStore.open(path, ttl=None, max_stored=10, now=0)
    for index in range(5):
        store.put(f"k{index}", result(f"r{index}"), now=float(index))
    store.close()
    store = SQLiteCacheStore.open(path, ttl=None, max_stored=3, now=10.0)
    assert store.count() == 3
    assert store.get("k1", now=10.0) is None and store.get("k4", now=10.0) is not None
    store.close()
    store = SQLiteCacheStore.open(path, ttl=7.5, max_stored=3, now=10.0)
    assert store.count() == 2  # the one stored at 2.0 is more than 7.5 s old
    assert store.get("k3", now=10.0) is not None
    assert store.get("k3", now=10.5) is None  # expired on reading too
    store.close()


def test_a_long_run_keeps_the_file_within_max_stored_plus_a_tenth(tmp_path):
    store = SQLiteCacheStore.open(tmp_path / "cache.sqlite3", ttl=None, max_stored=20, now=0)
    counts = []
    for index in range(100):
        store.put(f"k{index}", result(f"r{index}"), now=float(index))
        counts.append(store.count())
    assert max(counts) == 21  # trimmed back to 20 on every second (20 // 10) store
    assert counts[-1] == 20
    assert store.get("k79", now=100.0) is None and store.get("k80", now=100.0) is not None
    store.close()


def test_an_unreadable_entry_is_a_miss_and_is_dropped(tmp_path):
    path = tmp_path / "cache.sqlite3"
    store = SQLiteCacheStore.open(path, ttl=None, max_stored=10, now=0)
    assert store._db is not None
    store._db.execute(
        "INSERT INTO responses (key, stored_at, value) VALUES ('k', 0, ?)", (b'{"no": 1}',)
    )
    assert store.get("k", now=1.0) is None
    assert store.count() == 0
    store.close()


def test_a_file_that_cannot_be_opened_is_an_os_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError, match="cannot open the response cache file"):
        SQLiteCacheStore.open(blocker / "cache.sqlite3", ttl=None, max_stored=1, now=0)


# Replayed events ---------------------------------------------------------------------------


def test_a_replay_carries_the_reply_as_deltas_then_completed():
    call = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')
    hit = attrs.evolve(result(), message=Message("assistant", (TextPart("Sure."), call)))
    events = replay_events(hit, quiet=False)
    assert events == [
        TextDelta("c1", "Sure."),
        ToolCallDelta("c1", 0, "call_1", "get_weather", '{"city": "Paris"}', {"city": "Paris"}),
        Completed("c1", hit),
    ]
    assert replay_events(hit, quiet=True) == [Completed("c1", hit)]


def test_a_replay_shows_reasoning_first():
    hit = attrs.evolve(
        result(),
        message=Message("assistant", (ReasoningPart(text="Hmm."), TextPart("Hi"))),
    )
    events = replay_events(hit, quiet=False)
    assert events[:2] == [ReasoningDelta("c1", "Hmm."), TextDelta("c1", "Hi")]


# Config ------------------------------------------------------------------------------------


def test_the_cache_section_loads_from_a_config_and_the_environment():
    config = load_config({"cache": {"enabled": True, "max_entries": 10, "ttl": 60, "path": "c.db"}})
    assert config.cache == CacheConfig(enabled=True, max_entries=10, ttl=60, path="c.db")
    assert load_config({}).cache == CacheConfig()  # off unless asked for
    with pytest.raises(ConfigError, match=r"did you mean 'max_entries'.*\$\.cache"):
        load_config({"cache": {"max_entry": 5}})
    with pytest.raises(ConfigError, match=r"max_entries"):
        load_config({"cache": {"max_entries": 0}})
    assert config_from_env({"SLUICE_CACHE__ENABLED": "true"}).cache.enabled
