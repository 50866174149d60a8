"""sluice: a trio runtime that moves LLM API traffic.

Every call passes through one admission point (the RateLimiter), one actor per provider backend
(ProviderActor), a ledger of every token (TokenLedger) and a Supervisor that retries so that no
call is lost. Start it with :func:`open_runtime`; see the README for a tour.
"""

import sys as _sys

# Neither typing (for TYPE_CHECKING) nor importlib: loading them would be most of what
# `import sluice` costs. Type checkers treat any name TYPE_CHECKING as true; it is deleted below.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ._cache.response import CacheStatistics as CacheStatistics
    from ._cache.response import ResponseCache as ResponseCache
    from ._capabilities import CapabilityOverride as CapabilityOverride
    from ._capabilities import ToolOptions as ToolOptions
    from ._config import BreakerConfig as BreakerConfig
    from ._config import BudgetConfig as BudgetConfig
    from ._config import CacheConfig as CacheConfig
    from ._config import Deployment as Deployment
    from ._config import EmbedLimits as EmbedLimits
    from ._config import GatewayConfig as GatewayConfig
    from ._config import LedgerConfig as LedgerConfig
    from ._config import MetricsConfig as MetricsConfig
    from ._config import ModelConfig as ModelConfig
    from ._config import ModelGroup as ModelGroup
    from ._config import PriceConfig as PriceConfig
    from ._config import ProviderConfig as ProviderConfig
    from ._config import QuirksConfig as QuirksConfig
    from ._config import RateLimitConfig as RateLimitConfig
    from ._config import ReplyLimits as ReplyLimits
    from ._config import RetryConfig as RetryConfig
    from ._config import RoutingStrategy as RoutingStrategy
    from ._config import RuntimeConfig as RuntimeConfig
    from ._config import Secret as Secret
    from ._config import TracingConfig as TracingConfig
    from ._config import WindowLimit as WindowLimit
    from ._config import load_config as load_config
    from ._embed_many import EmbedOutcome as EmbedOutcome
    from ._embed_many import EmbedOutcomes as EmbedOutcomes
    from ._embeddings import EmbedRequest as EmbedRequest
    from ._embeddings import EmbedResult as EmbedResult
    from ._embeddings import EncodingFormat as EncodingFormat
    from ._errors import ActorCrashed as ActorCrashed
    from ._errors import AuthenticationFailed as AuthenticationFailed
    from ._errors import BadRequest as BadRequest
    from ._errors import BudgetExceeded as BudgetExceeded
    from ._errors import CallError as CallError
    from ._errors import CallTimeout as CallTimeout
    from ._errors import CircuitOpen as CircuitOpen
    from ._errors import ConfigError as ConfigError
    from ._errors import ConnectionFailed as ConnectionFailed
    from ._errors import ContentFiltered as ContentFiltered
    from ._errors import ContextTooLong as ContextTooLong
    from ._errors import EmptyResponse as EmptyResponse
    from ._errors import FatalError as FatalError
    from ._errors import InternalError as InternalError
    from ._errors import NotFound as NotFound
    from ._errors import Overloaded as Overloaded
    from ._errors import ProtocolError as ProtocolError
    from ._errors import RateLimited as RateLimited
    from ._errors import RetryableError as RetryableError
    from ._errors import RuntimeClosed as RuntimeClosed
    from ._errors import ServerError as ServerError
    from ._errors import SluiceError as SluiceError
    from ._errors import StoreUnavailable as StoreUnavailable
    from ._errors import StreamBroken as StreamBroken
    from ._errors import TooLargeForQuota as TooLargeForQuota
    from ._errors import ToolCallError as ToolCallError
    from ._events import Admitted as Admitted
    from ._events import CallEvent as CallEvent
    from ._events import Completed as Completed
    from ._events import Failed as Failed
    from ._events import FallingBack as FallingBack
    from ._events import FirstToken as FirstToken
    from ._events import Queued as Queued
    from ._events import ReasoningDelta as ReasoningDelta
    from ._events import ReasoningSignature as ReasoningSignature
    from ._events import Retrying as Retrying
    from ._events import StreamReset as StreamReset
    from ._events import TextDelta as TextDelta
    from ._events import ToolCallDelta as ToolCallDelta
    from ._events import UsageReported as UsageReported
    from ._gateway import serve as serve
    from ._gateway.app import GatewaySettings as GatewaySettings
    from ._gateway.http import ServerLimits as ServerLimits
    from ._gateway.vkeys import KeyRing as KeyRing
    from ._gateway.vkeys import VirtualKey as VirtualKey
    from ._jobs.batch import BatchInterrupt as BatchInterrupt
    from ._jobs.batch import BatchProgress as BatchProgress
    from ._jobs.batch import BatchSummary as BatchSummary
    from ._jobs.batch import run_batch as run_batch
    from ._jobs.batch_lines import RetryErrors as RetryErrors
    from ._jobs.batch_lines import Shard as Shard
    from ._jobs.batch_report import Interrupted as Interrupted
    from ._jobs.provider_batch.engine import LaneOptions as LaneOptions
    from ._jobs.provider_batch.engine import Via as Via
    from ._ledger.book import Dimension as Dimension
    from ._ledger.book import LedgerKey as LedgerKey
    from ._ledger.book import LedgerTotals as LedgerTotals
    from ._ledger.budget import BudgetStatus as BudgetStatus
    from ._ledger.summary import LedgerSummary as LedgerSummary
    from ._limits.queue import Priority as Priority
    from ._mail import EventBatch as EventBatch
    from ._mail_rare import KeyStatistics as KeyStatistics
    from ._messages import CacheBreakpoint as CacheBreakpoint
    from ._messages import ChatRequest as ChatRequest
    from ._messages import ChatResult as ChatResult
    from ._messages import ContentPart as ContentPart
    from ._messages import Deadlines as Deadlines
    from ._messages import FilePart as FilePart
    from ._messages import FinishReason as FinishReason
    from ._messages import ImagePart as ImagePart
    from ._messages import Message as Message
    from ._messages import ReasoningPart as ReasoningPart
    from ._messages import ResponseFormat as ResponseFormat
    from ._messages import Role as Role
    from ._messages import SpecificTool as SpecificTool
    from ._messages import TextPart as TextPart
    from ._messages import Timings as Timings
    from ._messages import Tool as Tool
    from ._messages import ToolCall as ToolCall
    from ._messages import ToolChoice as ToolChoice
    from ._messages import ToolResultPart as ToolResultPart
    from ._messages import Usage as Usage
    from ._observe.metrics import Metrics as Metrics
    from ._observe.records import AttemptHook as AttemptHook
    from ._observe.records import AttemptRecord as AttemptRecord
    from ._observe.records import CallHook as CallHook
    from ._observe.records import CallRecord as CallRecord
    from ._observe.records import Hooks as Hooks
    from ._observe.records import Outcome as Outcome
    from ._routing_stats import DeploymentStatistics as DeploymentStatistics
    from ._runtime import CallStream as CallStream
    from ._runtime import MapOutcome as MapOutcome
    from ._runtime import MapOutcomes as MapOutcomes
    from ._runtime import ProviderHealth as ProviderHealth
    from ._runtime import Runtime as Runtime
    from ._runtime import RuntimeStatistics as RuntimeStatistics
    from ._runtime import open_runtime as open_runtime
    from ._tool_capabilities import StructuredOutput as StructuredOutput
    from ._tool_capabilities import ToolCapabilities as ToolCapabilities
    from .actors._token_ledger import TokenLedgerHandle as TokenLedgerHandle
    from .providers._definition import AuthStyle as AuthStyle

_HOMES: dict[str, tuple[str, ...]] = {
    "sluice._cache.response": ("CacheStatistics", "ResponseCache"),
    "sluice._capabilities": ("CapabilityOverride", "ToolOptions"),
    "sluice._tool_capabilities": ("StructuredOutput", "ToolCapabilities"),
    "sluice._config": (
        "BreakerConfig",
        "BudgetConfig",
        "CacheConfig",
        "Deployment",
        "EmbedLimits",
        "GatewayConfig",
        "LedgerConfig",
        "MetricsConfig",
        "ModelConfig",
        "ModelGroup",
        "PriceConfig",
        "ProviderConfig",
        "QuirksConfig",
        "RateLimitConfig",
        "ReplyLimits",
        "RetryConfig",
        "RoutingStrategy",
        "RuntimeConfig",
        "Secret",
        "TracingConfig",
        "WindowLimit",
        "load_config",
    ),
    "sluice._embed_many": ("EmbedOutcome", "EmbedOutcomes"),
    "sluice._embeddings": ("EmbedRequest", "EmbedResult", "EncodingFormat"),
    "sluice._errors": (
        "ActorCrashed",
        "AuthenticationFailed",
        "BadRequest",
        "BudgetExceeded",
        "CallError",
        "CircuitOpen",
        "ConfigError",
        "ConnectionFailed",
        "ContentFiltered",
        "ContextTooLong",
        "EmptyResponse",
        "FatalError",
        "InternalError",
        "NotFound",
        "Overloaded",
        "ProtocolError",
        "RetryableError",
        "RuntimeClosed",
        "ServerError",
        "SluiceError",
        "StoreUnavailable",
        "TooLargeForQuota",
    ),
    "sluice._errors.rare": ("CallTimeout", "RateLimited", "StreamBroken", "ToolCallError"),
    "sluice._events": ("Completed", "FirstToken", "TextDelta", "UsageReported"),
    "sluice._events.rare": (
        "Admitted",
        "CallEvent",
        "Failed",
        "FallingBack",
        "Queued",
        "ReasoningDelta",
        "ReasoningSignature",
        "Retrying",
        "StreamReset",
        "ToolCallDelta",
    ),
    "sluice._gateway": ("serve",),
    "sluice._gateway.app": ("GatewaySettings",),
    "sluice._gateway.http": ("ServerLimits",),
    "sluice._gateway.vkeys": ("KeyRing", "VirtualKey"),
    "sluice._jobs.batch": ("BatchInterrupt", "BatchProgress", "BatchSummary", "run_batch"),
    "sluice._jobs.batch_lines": ("RetryErrors", "Shard"),
    "sluice._jobs.batch_report": ("Interrupted",),
    "sluice._jobs.provider_batch.engine": ("LaneOptions", "Via"),
    "sluice._ledger.book": ("Dimension", "LedgerKey", "LedgerTotals"),
    "sluice._ledger.budget": ("BudgetStatus",),
    "sluice._ledger.summary": ("LedgerSummary",),
    "sluice._limits.queue": ("Priority",),
    "sluice._mail": ("EventBatch",),
    "sluice._mail_rare": ("KeyStatistics",),
    "sluice._messages": (
        "CacheBreakpoint",
        "ChatRequest",
        "ChatResult",
        "ContentPart",
        "Deadlines",
        "FilePart",
        "FinishReason",
        "ImagePart",
        "Message",
        "ReasoningPart",
        "ResponseFormat",
        "Role",
        "SpecificTool",
        "TextPart",
        "Timings",
        "Tool",
        "ToolCall",
        "ToolChoice",
        "ToolResultPart",
        "Usage",
    ),
    "sluice._observe.metrics": ("Metrics",),
    "sluice._observe.records": (
        "AttemptHook",
        "AttemptRecord",
        "CallHook",
        "CallRecord",
        "Hooks",
        "Outcome",
    ),
    "sluice._routing_stats": ("DeploymentStatistics",),
    "sluice._runtime": (
        "CallStream",
        "MapOutcome",
        "MapOutcomes",
        "ProviderHealth",
        "Runtime",
        "RuntimeStatistics",
        "open_runtime",
    ),
    "sluice.actors._token_ledger": ("TokenLedgerHandle",),
    "sluice.providers._definition": ("AuthStyle",),
}
"""Where each public name lives. Every one is imported on first use (PEP 562): ``import sluice``
loads none of them, and touching a name loads only its module and what that module needs, so
a program pays for the parts it uses (a plain chat does not load the embedding, tools, batch,
gateway or cache layers). Type checkers read the imports above."""

_LAZY = {name: module for module, names in _HOMES.items() for name in names}
del TYPE_CHECKING

_SUBMODULES = frozenset({"aio", "sync", "actors", "providers", "transport"})
"""Public submodules loaded on first use as attributes: ``sluice.aio`` (asyncio),
``sluice.sync`` (threads), and the three that ``import sluice`` used to load as a side effect
(``sluice.providers.ProviderDefinition`` after a bare ``import sluice`` keeps working).
``sluice.stores``, ``sluice.simulator`` and ``sluice.ray`` are imported by name, as always."""


def __getattr__(name: str) -> "Any":
    if name in _SUBMODULES:
        __import__(f"sluice.{name}")
        return _sys.modules[f"sluice.{name}"]
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sluice' has no attribute {name!r}")
    __import__(module)
    value = getattr(_sys.modules[module], name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBMODULES})


__all__ = [
    "ActorCrashed",
    "Admitted",
    "AttemptHook",
    "AttemptRecord",
    "AuthStyle",
    "AuthenticationFailed",
    "BadRequest",
    "BatchInterrupt",
    "BatchProgress",
    "BatchSummary",
    "BreakerConfig",
    "BudgetConfig",
    "BudgetExceeded",
    "BudgetStatus",
    "CacheBreakpoint",
    "CacheConfig",
    "CacheStatistics",
    "CallError",
    "CallEvent",
    "CallHook",
    "CallRecord",
    "CallStream",
    "CallTimeout",
    "CapabilityOverride",
    "ChatRequest",
    "ChatResult",
    "CircuitOpen",
    "Completed",
    "ConfigError",
    "ConnectionFailed",
    "ContentFiltered",
    "ContentPart",
    "ContextTooLong",
    "Deadlines",
    "Deployment",
    "EmbedLimits",
    "EmbedOutcome",
    "EmbedOutcomes",
    "EmbedRequest",
    "EmbedResult",
    "EncodingFormat",
    "DeploymentStatistics",
    "Dimension",
    "EmptyResponse",
    "EventBatch",
    "Failed",
    "FallingBack",
    "FatalError",
    "FilePart",
    "FinishReason",
    "FirstToken",
    "GatewayConfig",
    "GatewaySettings",
    "Hooks",
    "ImagePart",
    "InternalError",
    "Interrupted",
    "KeyRing",
    "KeyStatistics",
    "LaneOptions",
    "LedgerConfig",
    "LedgerKey",
    "LedgerSummary",
    "LedgerTotals",
    "MapOutcome",
    "MapOutcomes",
    "Message",
    "Metrics",
    "MetricsConfig",
    "ModelConfig",
    "ModelGroup",
    "NotFound",
    "Outcome",
    "Overloaded",
    "PriceConfig",
    "Priority",
    "ProtocolError",
    "ProviderConfig",
    "ProviderHealth",
    "Queued",
    "QuirksConfig",
    "RateLimitConfig",
    "RateLimited",
    "ReasoningDelta",
    "ReasoningSignature",
    "ReasoningPart",
    "ReplyLimits",
    "ResponseCache",
    "ResponseFormat",
    "RetryConfig",
    "RetryErrors",
    "RetryableError",
    "Retrying",
    "Role",
    "RoutingStrategy",
    "Runtime",
    "RuntimeClosed",
    "RuntimeConfig",
    "RuntimeStatistics",
    "Secret",
    "ServerError",
    "ServerLimits",
    "Shard",
    "SluiceError",
    "SpecificTool",
    "StoreUnavailable",
    "StreamBroken",
    "StreamReset",
    "StructuredOutput",
    "TextDelta",
    "TextPart",
    "Timings",
    "TokenLedgerHandle",
    "TooLargeForQuota",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallError",
    "ToolCapabilities",
    "ToolChoice",
    "ToolOptions",
    "ToolResultPart",
    "TracingConfig",
    "Usage",
    "Via",
    "UsageReported",
    "VirtualKey",
    "WindowLimit",
    "load_config",
    "open_runtime",
    "run_batch",
    "serve",
]
