"""sluice: a trio runtime that moves LLM API traffic.

Every call passes through one admission point (the RateLimiter), one actor per provider backend
(ProviderActor), a ledger of every token (TokenLedger) and a Supervisor that retries so that no
call is lost. Start it with :func:`open_runtime`; see the README for a tour.
"""

import importlib as _importlib
import typing as _typing

# The runtime module imports the actors, which import sluice's submodules (never this package
# root), so this import order has no cycle.
from ._runtime import CallStream as CallStream
from ._runtime import MapOutcome as MapOutcome
from ._runtime import MapOutcomes as MapOutcomes
from ._runtime import ProviderHealth as ProviderHealth
from ._runtime import Runtime as Runtime
from ._runtime import RuntimeStatistics as RuntimeStatistics
from ._runtime import open_runtime as open_runtime
from .config import BreakerConfig as BreakerConfig
from .config import BudgetConfig as BudgetConfig
from .config import CacheConfig as CacheConfig
from .config import Deployment as Deployment
from .config import LedgerConfig as LedgerConfig
from .config import MetricsConfig as MetricsConfig
from .config import ModelConfig as ModelConfig
from .config import ModelGroup as ModelGroup
from .config import PriceConfig as PriceConfig
from .config import ProviderConfig as ProviderConfig
from .config import QuirksConfig as QuirksConfig
from .config import RateLimitConfig as RateLimitConfig
from .config import RetryConfig as RetryConfig
from .config import RuntimeConfig as RuntimeConfig
from .config import Secret as Secret
from .config import TracingConfig as TracingConfig
from .config import WindowLimit as WindowLimit
from .config import load_config as load_config
from .errors import ActorCrashed as ActorCrashed
from .errors import AuthenticationFailed as AuthenticationFailed
from .errors import BadRequest as BadRequest
from .errors import BudgetExceeded as BudgetExceeded
from .errors import CallError as CallError
from .errors import CallTimeout as CallTimeout
from .errors import CircuitOpen as CircuitOpen
from .errors import ConfigError as ConfigError
from .errors import ConnectionFailed as ConnectionFailed
from .errors import ContentFiltered as ContentFiltered
from .errors import ContextTooLong as ContextTooLong
from .errors import EmptyResponse as EmptyResponse
from .errors import FatalError as FatalError
from .errors import InternalError as InternalError
from .errors import NotFound as NotFound
from .errors import Overloaded as Overloaded
from .errors import ProtocolError as ProtocolError
from .errors import RateLimited as RateLimited
from .errors import RetryableError as RetryableError
from .errors import RuntimeClosed as RuntimeClosed
from .errors import ServerError as ServerError
from .errors import SluiceError as SluiceError
from .errors import StoreUnavailable as StoreUnavailable
from .errors import StreamBroken as StreamBroken
from .errors import TooLargeForQuota as TooLargeForQuota
from .errors import ToolCallError as ToolCallError
from .events import Admitted as Admitted
from .events import CallEvent as CallEvent
from .events import Completed as Completed
from .events import Failed as Failed
from .events import FallingBack as FallingBack
from .events import FirstToken as FirstToken
from .events import Queued as Queued
from .events import ReasoningDelta as ReasoningDelta
from .events import Retrying as Retrying
from .events import StreamReset as StreamReset
from .events import TextDelta as TextDelta
from .events import ToolCallDelta as ToolCallDelta
from .events import UsageReported as UsageReported
from .messages import ChatRequest as ChatRequest
from .messages import ChatResult as ChatResult
from .messages import Deadlines as Deadlines
from .messages import FilePart as FilePart
from .messages import ImagePart as ImagePart
from .messages import Message as Message
from .messages import ReasoningPart as ReasoningPart
from .messages import ResponseFormat as ResponseFormat
from .messages import SpecificTool as SpecificTool
from .messages import TextPart as TextPart
from .messages import Timings as Timings
from .messages import Tool as Tool
from .messages import ToolCall as ToolCall
from .messages import ToolResultPart as ToolResultPart
from .messages import Usage as Usage
from .tools.capabilities import CapabilityOverride as CapabilityOverride
from .tools.capabilities import ToolCapabilities as ToolCapabilities
from .tools.capabilities import ToolOptions as ToolOptions

if _typing.TYPE_CHECKING:
    from .gateway import serve as serve
    from .jobs.batch import BatchInterrupt as BatchInterrupt
    from .jobs.batch import BatchProgress as BatchProgress
    from .jobs.batch import BatchSummary as BatchSummary
    from .jobs.batch import run_batch as run_batch
    from .observe.records import AttemptRecord as AttemptRecord
    from .observe.records import CallRecord as CallRecord
    from .observe.records import Hooks as Hooks

# Loaded on first use, so that `import sluice` stays light for programs that only make calls.
_LAZY = {
    "BatchInterrupt": "sluice.jobs.batch",
    "BatchProgress": "sluice.jobs.batch",
    "BatchSummary": "sluice.jobs.batch",
    "run_batch": "sluice.jobs.batch",
    "serve": "sluice.gateway",
    "AttemptRecord": "sluice.observe.records",
    "CallRecord": "sluice.observe.records",
    "Hooks": "sluice.observe.records",
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
