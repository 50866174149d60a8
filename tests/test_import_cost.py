"""``import sluice`` loads only what a call needs (the CLI, the simulator and the rest stay out),
and a plain call loads only its own codec and transport on top."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import orjson

from .faulty_server import FaultyServer

if TYPE_CHECKING:
    from pathlib import Path

# The embedding layer: loaded by the first embedding call (Runtime.embed, embed_many, the
# actors' embedding branches, a codec's embedding methods), never by a chat.
EMBEDDING_LAYER = (
    "sluice._embeddings",
    "sluice._protocols.openai_embed",
    "sluice._embed_calls",
    "sluice._embed_many",
    "sluice._embed_packing",
    "sluice._embeddings_format",
    "sluice.providers._embedding",
    "sluice._protocols.embed_shared",
)

# What a call does not need; each is loaded on first use by the code that needs it.
NOT_FOR_A_CALL = (
    "rich",
    "cyclopts",
    "click",
    "pygments",
    "h11",
    "httpx",
    "cattrs",
    "jsonref",
    "cryptography",
    "coredis",
    "sqlite3",
    "platformdirs",
    "tomllib",
    "difflib",
    # The entry-point machinery (provider plugins) and what it brings.
    "importlib.metadata",
    "email",
    "zipfile",
    "csv",
    # Exact dollar amounts (budgets, prices given as text) only.
    "decimal",
    "sluice.providers._plugins",
    "sluice.providers._keys",  # the key store: for a key in neither config nor environment
    "sluice._openai_parse",
    "sluice.simulator",
    "sluice._cache",
    "sluice._cli",
    "sluice._gateway",
    "sluice._jobs",
    "sluice._ledger.sqlite",
    "sluice._ledger.redis",
    "sluice._limits.redis_store",
    "sluice._limits.store_epoch",  # HistoryLost with it: only a shared store raises it
    # The actors' messages a call that goes through at once never sends, the ledger's
    # questions and answers, a quota store's rarer answers, the groups' statistics.
    "sluice._mail_rare",
    "sluice._errors.rare",  # the errors with fields of their own: a failure loads them
    "sluice._events.rare",  # the events a plain call never makes: a stream loads them
    "sluice._ledger.summary",
    "sluice._limits.store_rare",
    "sluice._routing_stats",
    # The parts of a conversation a plain text chat never builds, the tool options and
    # capability overrides, and the config classes a config for one never holds.
    "sluice._conversation_rare",
    "sluice._capabilities",
    "sluice._config.groups",
    "sluice._config.spending",
    "sluice._config.windows",
    "sluice._config.overrides",
    "sluice._config.embed_limits",
    "sluice._tools.schema",
    "sluice._tools.repair",
    # A call that succeeds at once asks no retry policy; a runtime without budgets keeps no
    # budget book; a config built in code reads no file; a ledger store comes with the ledger.
    "sluice._retry_policy",
    "sluice._call_setbacks",
    "sluice._ledger.budget",
    "sluice._config.load",
    "sluice._ledger.store",
    # The codecs and the transports load when a provider first needs one.
    "sluice._protocols.openai",
    "sluice._protocols.anthropic",
    "sluice._protocols.gemini",
    "sluice._protocols.ollama",
    "sluice.transport._pool",
    "sluice.transport._httpx_adapter",
    # A stream's and a map's parts load with the first stream or map (a chat reads its one
    # final batch without them).
    "sluice._streams",
    "sluice._cursor",
    # The front doors load on first use of sluice.aio / sluice.sync.
    "asyncio",
    "concurrent.futures",
    "sluice._snapshots",
    "sluice.aio",
    "sluice.sync",
    "sluice._guest",
    "sluice._portal",
    "sluice._observe",
    "prometheus_client",
    "opentelemetry",
    # sluice.ray (the ray extra) loads only when imported by name.
    "sluice.ray",
    "ray",
    "pyarrow",
    *EMBEDDING_LAYER,
)

NOT_FOR_A_PLAIN_CALL = (
    "rich",
    "cyclopts",
    "click",
    "pygments",
    "h11",
    "httpx",
    "cattrs",
    "coredis",
    "importlib.metadata",
    "decimal",
    "sluice.providers._plugins",
    "sluice.providers._keys",  # the key store: for a key in neither config nor environment
    "sluice._openai_parse",
    "sluice.simulator",
    "sluice._cache",
    "sluice._cli",
    "sluice._gateway",
    "sluice._jobs",
    "sluice._ledger.redis",
    "sluice._limits.redis_store",
    "sluice._protocols.anthropic",
    "sluice._protocols.gemini",
    "sluice._protocols.ollama",
    "sluice.transport._httpx_adapter",
    "sluice._observe.metrics",
    "sluice._observe.tracing",
    "sluice._observe.hooks",
    "sluice._observe.records",  # the hooks' records: no hooks, none built
    "sluice._protocols.http_errors",  # the error replies' mapping: the calls succeed
    "prometheus_client",
    "opentelemetry",
    "asyncio",
    "sluice._snapshots",  # statistics and health: loaded when first asked for
    "sluice._retry_policy",  # the calls succeed: no failure asks the retry policy
    "sluice._call_setbacks",  # nor tells the Supervisor's step a setback
    # No limits configured: no window, no adaptive limit, no wait or refusal at admission,
    # no store outage to back off from.
    "sluice._limits.window",
    "sluice._limits.adaptive",
    "sluice._limits.not_admitted",
    "sluice._backoff",
    "sluice._ledger.budget",  # no budgets configured
    "sluice._config.load",  # the config is built in code
    # Nothing withdrawn, refused, abandoned, lost, reloaded, asked or flushed: none of the
    # actors' rarer messages, no ledger question or summary, no store refusal or budget ask,
    # no statistics.
    "sluice._mail_rare",
    "sluice._errors.rare",  # no 429, no stream cut short, no deadline passed, no misfire
    "sluice._ledger.summary",
    "sluice._limits.store_rare",
    "sluice._routing_stats",
    "sluice.transport._statistics",
    # Text in, text out: no image, file, tool, tool call or result, named tool choice,
    # response format, tool options or capability override; and a config with no groups,
    # prices, budgets, windows, model entries, quirks or embedding limits.
    "sluice._conversation_rare",
    "sluice._capabilities",
    "sluice._config.groups",
    "sluice._config.spending",
    "sluice._config.windows",
    "sluice._config.overrides",
    "sluice._config.embed_limits",
    # A ledger that keeps no file (SLUICE_LEDGER_DB=off below) loads no SQLite code.
    "sqlite3",
    "sluice._ledger.sqlite",
    *EMBEDDING_LAYER,
)
"""What opening a runtime and making calls to one OpenAI-compatible provider over sluice's own
transport does not load: the other codecs, httpx (which brings rich and click when they are
installed), the simulator, the services that are off."""

_PLAIN_CALL = """
import json, sys
import trio
import sluice

async def main(url):
    config = sluice.RuntimeConfig(
        providers={"openai": sluice.ProviderConfig(base_url=url, api_key=sluice.Secret("sk-t"))}
    )
    async with sluice.open_runtime(config) as rt:
        result = await rt.chat("openai:gpt-4o-mini", "hello")
        after_chat = sorted(sys.modules)
        async with rt.stream("openai:gpt-4o-mini", "again") as stream:
            async for _event in stream:
                pass
    print(json.dumps({"text": result.text, "modules": sorted(sys.modules), "chat": after_chat}))

trio.run(main, sys.argv[1])
"""


def test_import_sluice_leaves_out_what_a_call_does_not_need() -> None:
    code = "import json, sys\nimport sluice\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    loaded = set(orjson.loads(done.stdout))
    assert "sluice" in loaded
    assert [m for m in NOT_FOR_A_CALL if m in loaded] == []


def test_import_sluice_loads_none_of_its_parts() -> None:
    """Every public name loads on first use (PEP 562), so ``import sluice`` loads no submodule,
    and not even typing or importlib for itself; ``dir`` and ``__all__`` still list every name."""
    code = (
        "import json, sys\nbefore = set(sys.modules)\nimport sluice\n"
        "print(json.dumps({'new': sorted(set(sys.modules) - before), 'dir': dir(sluice)}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    report = orjson.loads(done.stdout)
    assert report["new"] == ["sluice"]
    assert {"Runtime", "open_runtime", "RuntimeConfig", "ChatRequest", "aio", "sync"} <= set(
        report["dir"]
    )


def test_the_subpackages_import_sluice_used_to_load_are_still_its_attributes() -> None:
    code = (
        "import sluice\n"
        "print(sluice.providers.ProviderDefinition.__name__, sluice.transport.__name__,"
        " sluice.actors.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert done.stdout.split() == [b"ProviderDefinition", b"sluice.transport", b"sluice.actors"]


def test_the_chat_path_loads_no_more_than_a_chat_needs() -> None:
    """Touching what a plain chat program uses (``benchmarks.import_time.CHAT``: the runtime,
    its config, a request) loads none of what a call does not need: not the embedding layer,
    not the tools layer beyond its corrections, not the CLI, gateway, jobs or codecs."""
    from benchmarks.import_time import CHAT

    code = f"import json, sys\n{CHAT}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    loaded = set(orjson.loads(done.stdout))
    assert {"sluice._runtime", "sluice._config", "sluice._messages"} <= loaded
    assert [m for m in NOT_FOR_A_CALL if m in loaded] == []


CHAT_PATH_ATTRS_CLASSES = 72
CHAT_PATH_SLUICE_MODULES = 74
"""What the chat path (``benchmarks.import_time.CHAT``) may define and load: each attrs class
costs the import a generated and compiled ``__init__`` (and ``__eq__``/``__hash__``), each
module a file to find and run. A change that adds to either on every program's path fails
here: make the new part load on first use, or raise the bound on purpose. (Raised once, to
81: the RateLimiter's handle, which every runtime uses, got a module of its own when the
RateLimiter's would have passed the bound on a module's length. Lowered to 78 by loading
parts on first use, then raised to 81 again: the actors' doors, the Supervisor's shared
parts and the ProviderActor's context got modules of their own when the doors made the
Supervisor's and the ProviderActor's modules pass that bound; no class was added. Lowered to
122 and 76: the call step's setbacks, the admission's refusals and waits, HistoryLost, the
streams' parts and the limits' windows, adaptive limit and backoff load on first use; and
the first call below went down with them, from 143 classes and 99 modules. Lowered to 104
classes, and the first call's to 104: the actors' rarer messages, the ledger's questions and
summaries, a limit's window specs, a store's refusals and budget asks and the groups' and the
transport's statistics and a proxy URL's reading load on first use, and a cache hit is its
result, no class of its own. Lowered to 72 classes and 74 modules, the first call's to 72 and
90: a failed attempt's outcome loads with the first failure, the errors with fields of their
own with the first of them, and the events a plain call never makes with the first of those;
the config classes a plain config never holds (groups, prices and budgets, windows, a model's
settings, quirks, embedding limits), the parts of a conversation a plain text chat never
builds (images, files, tool calls and results, tools, a named tool choice, a response format)
and the tool options and capability overrides load on first use.)"""

_COUNT = """
import json, sys
before = set(sys.modules)
{chat}
mine = sorted(m for m in set(sys.modules) - before if m == "sluice" or m.startswith("sluice."))
classes = sorted(
    f"{{name}}.{{value.__qualname__}}"
    for name in mine
    for value in list(vars(sys.modules[name]).values())
    if isinstance(value, type) and value.__module__ == name and "__attrs_attrs__" in vars(value)
)
print(json.dumps({{"modules": mine, "classes": classes}}))
"""


def test_the_chat_path_defines_no_more_attrs_classes_and_modules_than_its_bound() -> None:
    from benchmarks.import_time import CHAT

    done = subprocess.run(
        [sys.executable, "-c", _COUNT.format(chat=CHAT)], capture_output=True, check=True
    )
    found = orjson.loads(done.stdout)
    assert len(found["classes"]) <= CHAT_PATH_ATTRS_CLASSES, found["classes"]
    assert len(found["modules"]) <= CHAT_PATH_SLUICE_MODULES, found["modules"]
    # The counting sees the classes (attrs subclasses that are not decorated themselves are
    # not counted: they cost nothing of their own).
    assert "sluice._messages.ChatRequest" in found["classes"]
    assert "sluice._mail.Call" in found["classes"]
    assert "sluice._errors.Overloaded" not in found["classes"]
    # Nor are the classes only a call that meets something rarer builds, wherever they are
    # defined: each loads with the first of its kind.
    assert sorted(RARELY_BUILT & {name.rsplit(".", 1)[1] for name in found["classes"]}) == []


RARELY_BUILT = frozenset(
    {
        # The actors' messages no call that goes through at once sends.
        "AttemptLost",
        "ConsumerGone",
        "FlushLedger",
        "GetLimiterStats",
        "KeyStatistics",
        "QueryLedger",
        "Refusal",
        "Relimit",
        "ReloadProvider",
        "Withdraw",
        # The ledger's questions and answers.
        "LedgerQuery",
        "LedgerSummary",
        # A limit's windows (none unless configured), a quota store's answers but a
        # reservation or a wait, and a budget's ask.
        "WindowSpec",
        "BudgetAsk",
        "BudgetRefused",
        "TooLarge",
        # The model groups' statistics.
        "DeploymentStatistics",
        # A cache hit's answer (now the cached result itself).
        "Replay",
        # A failed attempt's outcome (sluice._mail_rare), and the errors with fields of their
        # own (sluice._errors.rare): a 429, a stream cut short, a deadline, a tool-call misfire.
        "AttemptFailed",
        "CallTimeout",
        "RateLimited",
        "StreamBroken",
        "ToolCallError",
        # The events a plain call never makes (sluice._events.rare): only a stream's consumer
        # is told it was queued and admitted; reasoning and tool-call deltas, what a retry or
        # a fallback says, an embedding call's end and a failure.
        "Admitted",
        "Embedded",
        "Failed",
        "FallingBack",
        "Queued",
        "ReasoningDelta",
        "ReasoningSignature",
        "Retrying",
        "StreamReset",
        "ToolCallDelta",
    }
    | {
        # The config classes a config for a plain chat never holds: model groups, prices and
        # budgets, windows beyond the per-minute limits, a model's settings, a provider's
        # quirks, embedding limits.
        "Deployment",
        "ModelGroup",
        "PriceConfig",
        "BudgetConfig",
        "WindowLimit",
        "ModelConfig",
        "QuirksConfig",
        "EmbedLimits",
    }
    | {
        # The parts of a conversation a plain text chat never builds (text, reasoning and
        # messages are built; a temporary correction message subclasses Message, so it stays
        # with it).
        "ImagePart",
        "FilePart",
        "ToolCall",
        "ToolResultPart",
        "Tool",
        "SpecificTool",
        "ResponseFormat",
        # A call's tool options and an override of what a provider or model can do with tools.
        "ToolOptions",
        "CapabilityOverride",
    }
)
"""Classes a plain chat never builds an instance of: a withdrawn ask, a refusal, a consumer
gone, an attempt lost, statistics, a reload, a ledger question, a window or budget the call
cannot fit."""


FIRST_CALL_ATTRS_CLASSES = 72
FIRST_CALL_SLUICE_MODULES = 90
"""What the chat path and then one plain call (``benchmarks.import_time.FIRST_CALL``) define and
load together: what is made to load on first use still counts here, so moving a part from the
import into the first call cannot pass for a saving."""


def test_the_first_call_defines_no_more_attrs_classes_and_modules_than_its_bound() -> None:
    from benchmarks.import_time import _first_call

    found = _first_call(sys.executable)
    assert found["chat_classes"] <= CHAT_PATH_ATTRS_CLASSES
    assert found["chat_sluice_modules"] <= CHAT_PATH_SLUICE_MODULES
    assert found["classes"] <= FIRST_CALL_ATTRS_CLASSES, found["call_loaded"]
    assert found["sluice_modules"] <= FIRST_CALL_SLUICE_MODULES, found["call_loaded"]
    assert "sluice._protocols.openai" in found["call_loaded"]  # the count sees the call's own
    rare = (
        "sluice._mail_rare",
        "sluice._errors.rare",
        "sluice._events.rare",
        "sluice._ledger.summary",
        "sluice._limits.store_rare",
        "sluice.transport._statistics",
        "sluice.transport._proxy_url",  # no proxy: FIRST_CALL's transport does not trust env
        "sluice._config.groups",
        "sluice._config.spending",
        "sluice._config.windows",
        "sluice._config.overrides",
        "sluice._config.embed_limits",
        "sluice._conversation_rare",
        "sluice._capabilities",
    )
    assert [m for m in rare if m in found["call_loaded"]] == []


def test_a_plain_call_loads_its_codec_and_transport_and_nothing_else(tmp_path: Path) -> None:
    with FaultyServer() as server:
        done = subprocess.run(
            [sys.executable, "-c", _PLAIN_CALL, server.url],
            capture_output=True,
            check=False,
            timeout=60,
            env={**os.environ, "HOME": str(tmp_path), "SLUICE_LEDGER_DB": "off"},
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    report = orjson.loads(done.stdout)
    assert report["text"] == "echo: hello"
    loaded = set(report["modules"])
    assert {"sluice._protocols.openai", "sluice.transport._pool"} <= loaded  # the call's own
    assert [m for m in NOT_FOR_A_PLAIN_CALL if m in loaded] == []
    # The rarer events load with the stream (its consumer is told the call was queued and
    # admitted), not with the chat before it, whose consumer reads only its end.
    assert "sluice._events.rare" in loaded
    assert "sluice._events.rare" not in report["chat"]


def test_the_front_doors_load_on_first_use() -> None:
    code = (
        "import json, sys\nimport sluice\nsluice.aio, sluice.sync\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    loaded = set(orjson.loads(done.stdout))
    assert {"sluice.aio", "sluice.sync", "asyncio"} <= loaded


def test_what_loads_on_first_use_keeps_its_old_address() -> None:
    """The rarer classes live in modules of their own, and the modules that held them still
    serve them (PEP 562), as the same objects sluice's public names are (the ledger's
    questions and answers moved with the functions that answer them)."""
    import sluice._errors
    import sluice._errors.rare as rare_errors
    import sluice._events
    import sluice._events.rare as rare_events
    import sluice._ledger
    import sluice._ledger.summary as summary
    import sluice._limits.store as store
    import sluice._mail as mail
    import sluice._routing as routing
    import sluice.stores
    import sluice.transport._pool
    from sluice import _mail_rare

    for name in _mail_rare.__all__:
        assert getattr(mail, name) is getattr(_mail_rare, name)
    for name in rare_errors.__all__:
        assert getattr(sluice, name) is getattr(sluice._errors, name) is getattr(rare_errors, name)
        assert issubclass(getattr(rare_errors, name), sluice.CallError)
    for name in rare_events.__all__:
        assert getattr(sluice._events, name) is getattr(rare_events, name)
        if name in sluice.__all__:
            assert getattr(sluice, name) is getattr(rare_events, name)
    assert sluice.CallEvent is sluice._events.CallEvent
    assert sluice.EventBatch is mail.EventBatch  # made once, then kept
    assert sluice.EventBatch == Sequence[sluice.CallEvent]
    assert {sluice.Failed, sluice.TextDelta} <= set(sluice.CallEvent.__args__)
    assert sluice.KeyStatistics is mail.KeyStatistics
    assert sluice.LedgerSummary is sluice._ledger.LedgerSummary is summary.LedgerSummary
    assert sluice.stores.LedgerQuery is summary.LedgerQuery
    assert sluice.stores.TooLarge is store.TooLarge
    assert sluice.stores.BudgetAsk is store.BudgetAsk
    assert sluice.stores.BudgetRefused is store.BudgetRefused
    assert sluice.DeploymentStatistics is routing.DeploymentStatistics
    assert sluice.transport.TransportStatistics is sluice.transport._pool.TransportStatistics


_TELLING = """
import json, sys
from sluice._errors import ServerError
from sluice._events import signature_events
from sluice._mail import AttemptSucceeded, attempt_failure
from sluice._messages import Message, ReasoningPart, TextPart
from sluice._protocols.base import AttemptOutput

plain = Message(role="assistant", content=[ReasoningPart(text="thought"), TextPart(text="hi")])
won = AttemptSucceeded(AttemptOutput(message=plain, finish_reason="stop"), None, None, 0)
common = [attempt_failure(won), attempt_failure(None), signature_events("c", plain)]
before = sorted(m for m in sys.modules if m.endswith("rare"))
from sluice._mail import AttemptFailed
from sluice._mail_rare import AttemptLost, ConsumerGone

failed = AttemptFailed(ServerError("down"), 2)
signed = Message(
    role="assistant",
    content=[ReasoningPart(text="a", signature="s1"), ReasoningPart(text="", signature="s2")],
)
print(json.dumps({
    "common": [x is None or x == [] for x in common],
    "before": before,
    "failed": attempt_failure(failed) is failed,
    "others": [attempt_failure(ConsumerGone()), attempt_failure(AttemptLost(1))],
    "signed": [(e.signature, e.redacted) for e in signature_events("c", signed)],
}))
"""


def test_telling_a_success_apart_loads_none_of_the_rarer_classes() -> None:
    """A success's outcome and a whole reply without signed reasoning are told apart without
    looking up a rarer class; a failure, a consumer gone and an attempt lost are told apart as
    before, and signed reasoning still gives its events (their module loads then)."""
    done = subprocess.run([sys.executable, "-c", _TELLING], capture_output=True, check=True)
    found = orjson.loads(done.stdout)
    assert found["common"] == [True, True, True]
    assert found["before"] == []
    assert found["failed"] is True
    assert found["others"] == [None, None]
    assert found["signed"] == [["s1", False], ["s2", True]]


def test_the_config_classes_loaded_on_first_use_keep_their_old_addresses() -> None:
    """Each config class a plain config never holds is served where it was defined or
    imported before (the package, and the modules whose classes name it), as one object."""
    import sluice
    import sluice._config as config
    import sluice._config.ledger as ledger
    import sluice._config.provider as provider
    import sluice._config.quota as quota
    import sluice._config.runtime as runtime
    import sluice.providers._definition as definition
    from sluice import _capabilities
    from sluice._config import embed_limits, groups, overrides, spending, windows

    homes = {
        "Deployment": (groups, [config]),
        "ModelGroup": (groups, [config, runtime]),
        "RoutingStrategy": (groups, [config]),
        "PriceConfig": (spending, [config, ledger]),
        "BudgetConfig": (spending, [config, ledger]),
        "WindowLimit": (windows, [config, quota]),
        "ModelConfig": (overrides, [config, provider]),
        "QuirksConfig": (overrides, [config, provider]),
        "EmbedLimits": (embed_limits, [config, provider, definition]),
    }
    for name, (home, addresses) in homes.items():
        for module in addresses:
            assert getattr(module, name) is getattr(home, name), (name, module.__name__)
        assert getattr(sluice, name) is getattr(home, name)
    assert provider.CapabilityOverride is _capabilities.CapabilityOverride


def test_the_conversation_parts_loaded_on_first_use_keep_their_old_addresses() -> None:
    """The parts a plain text chat never builds are served by sluice._conversation and
    sluice._messages (PEP 562) and by sluice's public names, as one object each, and the
    ``ContentPart`` and ``ToolChoice`` unions still name every part."""
    import typing

    import sluice
    from sluice import _conversation, _conversation_rare, _messages

    for name in _conversation_rare.__all__:
        served = getattr(_conversation_rare, name)
        assert getattr(_conversation, name) is served, name
        assert getattr(_messages, name) is served, name
        assert getattr(sluice, name) is served, name
    assert typing.get_args(sluice.ContentPart) == (
        sluice.TextPart,
        sluice.ImagePart,
        sluice.FilePart,
        sluice.ToolCall,
        sluice.ToolResultPart,
        sluice.ReasoningPart,
    )
    assert _messages.ContentPart is _conversation.ContentPart is sluice.ContentPart
    assert sluice.ToolChoice is _conversation.ToolChoice
    assert typing.get_args(sluice.ToolChoice) == (
        typing.Literal["auto", "required", "none"],
        sluice.SpecificTool,
    )


def test_the_tool_options_loaded_on_first_use_keep_their_old_addresses() -> None:
    """sluice._capabilities holds the tool options and overrides, and still serves what every
    call's path now imports from sluice._tool_capabilities, as the same objects; the modules
    that named the options and overrides serve them too."""
    import sluice
    import sluice.providers._registry as registry
    from sluice import _capabilities, _messages, _tool_capabilities

    for name in _capabilities.__all__:
        if name in ("CapabilityOverride", "ToolOptions"):
            continue
        assert getattr(_capabilities, name) is getattr(_tool_capabilities, name), name
    assert sluice.ToolOptions is _messages.ToolOptions is _capabilities.ToolOptions
    assert sluice.CapabilityOverride is registry.CapabilityOverride
    assert registry.CapabilityOverride is _capabilities.CapabilityOverride
    assert sluice.ToolCapabilities is _tool_capabilities.ToolCapabilities


def test_what_describes_a_backend_loads_without_the_tool_options() -> None:
    """sluice's and sluice._tools' names for a backend's capabilities come from the module every
    call's path loads: asking for them builds no tool options or overrides."""
    code = (
        "import sys, sluice, sluice._tools as tools\n"
        "sluice.ToolCapabilities, sluice.StructuredOutput, tools.FULL, tools.capabilities_for\n"
        "print('sluice._capabilities' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert done.stdout.strip() == b"False"


_LATER_PARTS = """
import json, sys, typing
import sluice
from sluice._serde import get_converter
from sluice._protocols.openai_request import build_body

plain = sluice.ChatRequest(model="openai:m", messages=[
    sluice.Message.system("be brief"), sluice.Message.user("hi"),
    sluice.Message.assistant("hello"),
])
text_only = (plain.messages[2].tool_calls, build_body(plain)["messages"])
loaded_by_text = "sluice._conversation_rare" in sys.modules
request = get_converter().structure({
    "model": "openai:m",
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "see"},
            {"type": "image", "url": "https://x/i.png"},
            {"type": "file", "data": "QUJD", "media_type": "application/pdf"},
        ]},
        {"role": "assistant", "content": [{"type": "tool_call", "id": "c1", "name": "f"}]},
        {"role": "tool", "content": [{"type": "tool_result", "tool_call_id": "c1",
                                      "content": "42"}]},
    ],
    "tools": [{"name": "f"}],
    "response_format": {"type": "json_object"},
    "tool_options": {"capabilities": {"tool_choice": ["auto"]}, "max_corrections": 1},
}, sluice.ChatRequest)
hints = [typing.get_type_hints(c) for c in (sluice.ChatRequest, sluice.Message)]
print(json.dumps({
    "loaded_by_text": loaded_by_text,
    "text_only": [list(text_only[0]), text_only[1]],
    "parts": [type(p).__name__ for m in request.messages for p in m.content],
    "tools": [type(t).__name__ for t in request.tools],
    "format": type(request.response_format).__name__,
    "options": [type(request.tool_options).__name__,
                sorted(request.tool_options.capabilities.tool_choice)],
    "tool_calls": [c.name for c in request.messages[1].tool_calls],
}))
"""


def test_text_alone_loads_no_rarer_part_and_cattrs_still_builds_every_part() -> None:
    """In a fresh interpreter, text messages (their tool calls asked for, their OpenAI body
    built) load none of the rarer parts; then cattrs builds a request holding every kind,
    resolving the annotations that name them, and so does ``typing.get_type_hints``."""
    done = subprocess.run([sys.executable, "-c", _LATER_PARTS], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    assert orjson.loads(done.stdout) == {
        "loaded_by_text": False,
        "text_only": [
            [],
            [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
            ],
        ],
        "parts": ["TextPart", "ImagePart", "FilePart", "ToolCall", "ToolResultPart"],
        "tools": ["Tool"],
        "format": "ResponseFormat",
        "options": ["ToolOptions", ["auto"]],
        "tool_calls": ["f"],
    }


_LATER_CONFIG = """
import json, sys, typing
from sluice._config import load_config
from sluice.providers import _plugins

config = load_config({
    "providers": {"openai": {
        "quirks": {"max_tokens_field": "max_completion_tokens"},
        "models": {"gpt-4o": {"embed_limits": {"max_inputs": 8}, "tools": {"tool_choice": []}}},
        "embed_limits": {"max_tokens": 1000},
        "rate_limit": {"windows": [{"dimension": "requests", "limit": 5, "per": 1}]},
    }},
    "groups": {"fast": ["openai:a", {"model": "openai:b", "weight": 2}]},
    "ledger": {"prices": {"openai:a": {"input": 1, "output": 2}},
               "budgets": [{"max_usd": 5}]},
})
definition = _plugins._structure({"id": "acme", "display_name": "Acme",
    "base_url": "https://a.example/v1", "embed_limits": {"max_inputs": 4}})
openai = config.providers["openai"]
import sluice._config.ledger, sluice._config.quota, sluice._config.runtime
import sluice._config.provider, sluice.providers._definition
for cls in (type(config), type(openai), type(config.ledger), type(openai.rate_limit),
            type(definition)):
    typing.get_type_hints(cls)
print(json.dumps([
    type(config.groups["fast"].deployments[1]).__name__,
    type(config.ledger.prices["openai:a"]).__name__,
    type(config.ledger.budgets[0]).__name__,
    type(openai.rate_limit.windows[0]).__name__,
    type(openai.models["gpt-4o"]).__name__,
    type(openai.models["gpt-4o"].embed_limits).__name__,
    type(openai.quirks).__name__,
    type(openai.embed_limits).__name__,
    type(definition.embed_limits).__name__,
]))
"""


def test_a_config_file_builds_the_classes_loaded_on_first_use() -> None:
    """In a fresh interpreter, where none of them was loaded before, a config that holds every
    config class a plain chat leaves out loads: cattrs resolves the annotations that name them
    (each module keeps them as names once loaded), and so does ``typing.get_type_hints``."""
    done = subprocess.run([sys.executable, "-c", _LATER_CONFIG], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    assert orjson.loads(done.stdout) == [
        "Deployment",
        "PriceConfig",
        "BudgetConfig",
        "WindowLimit",
        "ModelConfig",
        "EmbedLimits",
        "QuirksConfig",
        "EmbedLimits",
        "EmbedLimits",
    ]


_READ_ANNOTATIONS = """
import inspect, json, sys, typing
{chat}
from sluice._conversation import TemporaryMessage
from sluice.providers._definition import ProviderDefinition
from sluice.providers._registry import ResolvedProvider

LATER = ("sluice._config.groups", "sluice._config.spending", "sluice._config.windows",
         "sluice._config.overrides", "sluice._config.embed_limits", "sluice._conversation_rare",
         "sluice._capabilities")
before = [m for m in LATER if m in sys.modules]
classes = (sluice.RuntimeConfig, sluice.ProviderConfig, sluice.LedgerConfig,
           sluice.RateLimitConfig, sluice.ChatRequest, sluice.Message, TemporaryMessage,
           ProviderDefinition, ResolvedProvider)
hints = {{c.__name__: set(c.__annotations__) <= set(typing.get_type_hints(c))
         for c in classes}}
evaluated = {{
    c.__name__: not any(isinstance(v, str) for v in inspect.get_annotations(c, eval_str=True)
                         .values())
    for c in classes
}}
import cattrs
config = cattrs.Converter().structure(
    {{"providers": {{"x": {{"base_url": "http://a.test/v1", "models": {{"m": {{}}}}}}}},
     "groups": {{"g": {{"deployments": [{{"model": "x:m"}}]}}}}}},
    sluice.RuntimeConfig,
)
print(json.dumps({{
    "before": before,
    "hints": hints,
    "evaluated": evaluated,
    "structured": [type(config.groups["g"]).__name__,
                   type(config.providers["x"].models["m"]).__name__],
}}))
"""


def test_annotations_naming_later_classes_resolve_for_anyone_who_reads_them() -> None:
    """A plain chat loads none of the classes it never builds, yet ``typing.get_type_hints``,
    ``inspect.get_annotations`` and a cattrs converter of the user's own read the public
    classes' annotations as before those classes loaded on first use: reading loads them."""
    from benchmarks.import_time import CHAT

    code = _READ_ANNOTATIONS.format(chat=CHAT)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    found = orjson.loads(done.stdout)
    assert found["before"] == []
    assert all(found["hints"].values()), found["hints"]
    assert all(found["evaluated"].values()), found["evaluated"]
    assert found["structured"] == ["ModelGroup", "ModelConfig"]
