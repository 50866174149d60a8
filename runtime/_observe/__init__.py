"""Observability: Prometheus metrics, OpenTelemetry traces, hooks and event logs.

Nothing here is loaded by ``import sluice``; the runtime loads the observer when it opens, and
``prometheus_client`` and ``opentelemetry`` only when metrics or tracing are enabled. The hook
records (:mod:`.records`) load when first named: a runtime without hooks never builds one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .records import AttemptRecord as AttemptRecord
    from .records import CallRecord as CallRecord
    from .records import Hooks as Hooks

__all__ = ["AttemptRecord", "CallRecord", "Hooks"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import records

        return getattr(records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
