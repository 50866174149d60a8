"""Observability: Prometheus metrics, OpenTelemetry traces, hooks and event logs.

Nothing here is loaded by ``import sluice``; the runtime loads it when it opens, and
``prometheus_client`` and ``opentelemetry`` only when metrics or tracing are enabled.
"""

from .records import AttemptRecord, CallRecord, Hooks

__all__ = ["AttemptRecord", "CallRecord", "Hooks"]
