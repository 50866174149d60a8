"""sluice: a trio runtime that moves LLM API traffic.

Every call passes through one admission point (the RateLimiter), one actor per provider backend
(ProviderActor), a ledger of every token (TokenLedger) and a Supervisor that retries so that no
call is lost. Start it with :func:`open_runtime`; see the README for a tour.
"""

import importlib as _importlib
import typing as _typing

from ._config import BreakerConfig as BreakerConfig
from ._config import BudgetConfig as BudgetConfig
from ._config import CacheConfig as CacheConfig
from ._config import Deployment as Deployment
from ._config import LedgerConfig as LedgerConfig
from ._config import MetricsConfig as MetricsConfig
from ._config import ModelConfig as ModelConfig
from ._config import ModelGroup as ModelGroup
from ._config import PriceConfig as PriceConfig
from ._config import ProviderConfig as ProviderConfig
from ._config import QuirksConfig as QuirksConfig
from ._config import RateLimitConfig as RateLimitConfig
from ._config import RetryConfig as RetryConfig
from ._config import RuntimeConfig as RuntimeConfig
from ._config import Secret as Secret
from ._config import TracingConfig as TracingConfig
from ._config import WindowLimit as WindowLimit
from ._config import load_config as load_config
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
from ._events import Retrying as Retrying
from ._events import StreamReset as StreamReset
from ._events import TextDelta as TextDelta
from ._events import ToolCallDelta as ToolCallDelta
from ._events import UsageReported as UsageReported
from ._messages import ChatRequest as ChatRequest
from ._messages import ChatResult as ChatResult
from ._messages import Deadlines as Deadlines
from ._messages import FilePart as FilePart
from ._messages import ImagePart as ImagePart
from ._messages import Message as Message
from ._messages import ReasoningPart as ReasoningPart
from ._messages import ResponseFormat as ResponseFormat
from ._messages import SpecificTool as SpecificTool
from ._messages import TextPart as TextPart
from ._messages import Timings as Timings
from ._messages import Tool as Tool
from ._messages import ToolCall as ToolCall
from ._messages import ToolResultPart as ToolResultPart
from ._messages import Usage as Usage

# The runtime module imports the actors, which import sluice's submodules (never this package
# root), so this import order has no cycle.
from ._runtime import CallStream as CallStream
from ._runtime import MapOutcome as MapOutcome
from ._runtime import MapOutcomes as MapOutcomes
from ._runtime import ProviderHealth as ProviderHealth
from ._runtime import Runtime as Runtime
from ._runtime import RuntimeStatistics as RuntimeStatistics
from ._runtime import open_runtime as open_runtime
from ._tools.capabilities import CapabilityOverride as CapabilityOverride
from ._tools.capabilities import ToolCapabilities as ToolCapabilities
from ._tools.capabilities import ToolOptions as ToolOptions

if _typing.TYPE_CHECKING:
    from ._gateway import serve as serve
    from ._jobs.batch import BatchInterrupt as BatchInterrupt
    from ._jobs.batch import BatchProgress as BatchProgress
    from ._jobs.batch import BatchSummary as BatchSummary
    from ._jobs.batch import run_batch as run_batch
    from ._observe.records import AttemptRecord as AttemptRecord
    from ._observe.records import CallRecord as CallRecord
    from ._observe.records import Hooks as Hooks

# Loaded on first use, so that `import sluice` stays light for programs that only make calls.
_LAZY = {
    "BatchInterrupt": "sluice._jobs.batch",
    "BatchProgress": "sluice._jobs.batch",
    "BatchSummary": "sluice._jobs.batch",
    "run_batch": "sluice._jobs.batch",
    "serve": "sluice._gateway",
    "AttemptRecord": "sluice._observe.records",
    "CallRecord": "sluice._observe.records",
    "Hooks": "sluice._observe.records",
}


_DOORS = frozenset({"aio", "sync"})
"""Submodules loaded on first use: ``sluice.aio`` (asyncio) and ``sluice.sync`` (threads)."""


def __getattr__(name: str) -> _typing.Any:
    if name in _DOORS:
        return _importlib.import_module(f"sluice.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sluice' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ActorCrashed",
    "Admitted",
    "AttemptRecord",
    "AuthenticationFailed",
    "BadRequest",
    "BatchInterrupt",
    "BatchProgress",
    "BatchSummary",
    "BreakerConfig",
    "BudgetConfig",
    "BudgetExceeded",
    "CacheConfig",
    "CallError",
    "CallEvent",
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
    "ContextTooLong",
    "Deadlines",
    "Deployment",
    "EmptyResponse",
    "Failed",
    "FallingBack",
    "FatalError",
    "FilePart",
    "FirstToken",
    "Hooks",
    "ImagePart",
    "InternalError",
    "LedgerConfig",
    "MapOutcome",
    "MapOutcomes",
    "MetricsConfig",
    "Message",
    "ModelConfig",
    "ModelGroup",
    "NotFound",
    "Overloaded",
    "PriceConfig",
    "ProtocolError",
    "ProviderConfig",
    "ProviderHealth",
    "Queued",
    "QuirksConfig",
    "RateLimitConfig",
    "RateLimited",
    "ReasoningDelta",
    "ReasoningPart",
    "ResponseFormat",
    "RetryConfig",
    "RetryableError",
    "Retrying",
    "Runtime",
    "RuntimeClosed",
    "RuntimeConfig",
    "RuntimeStatistics",
    "Secret",
    "ServerError",
    "SluiceError",
    "SpecificTool",
    "StreamBroken",
    "StreamReset",
    "StoreUnavailable",
    "TextDelta",
    "TextPart",
    "Timings",
    "TooLargeForQuota",
    "TracingConfig",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallError",
    "ToolCapabilities",
    "ToolOptions",
    "ToolResultPart",
    "Usage",
    "UsageReported",
    "WindowLimit",
    "load_config",
    "open_runtime",
    "run_batch",
    "serve",
]
