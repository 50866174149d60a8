"""The whole configuration of a runtime: :class:`RuntimeConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs
from attrs.validators import ge, gt, le

from .._messages import Deadlines
from .._record import Value, late_names
from .failures import RetryConfig
from .ledger import LedgerConfig
from .provider import ProviderConfig
from .replies import ReplyLimits
from .services import CacheConfig, GatewayConfig, MetricsConfig, TracingConfig

if TYPE_CHECKING:
    from .groups import ModelGroup  # noqa: TC004 (served below, PEP 562)

__all__ = ["RuntimeConfig", "check_group_names"]


def __getattr__(name: str) -> Any:
    # The groups load with the first one asked for (a config without groups builds none) and
    # stay a name here, so the annotation of ``groups`` resolves (see the package's docstring).
    if name == "ModelGroup":
        from .groups import ModelGroup

        globals()[name] = ModelGroup
        return ModelGroup
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_group_names(_instance: Any, _attribute: Any, value: Mapping[str, ModelGroup]) -> None:
    """Validator of :attr:`RuntimeConfig.groups`: calls name a group by its bare name."""
    for name in value:
        if not name or ":" in name:
            raise ValueError(
                f"group name {name!r} must be non-empty and hold no ':' (calls name a group by "
                "its bare name, e.g. model=\"fast\"; 'provider:model' names one deployment)"
            )


def _positive_or_none(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"'{attribute.name}' must be above 0 or null, got {value!r}")


@late_names("ModelGroup")
@attrs.frozen(eq=False, kw_only=True, repr=False)
class RuntimeConfig(Value):
    """Everything :func:`sluice.open_runtime` needs; every field has a working default."""

    providers: Mapping[str, ProviderConfig] = attrs.field(factory=dict)
    retry: RetryConfig = RetryConfig()
    deadlines: Deadlines = Deadlines(total=600.0, first_token=120.0, idle=60.0)
    """Default deadlines for every call; a provider's or a call's own override them per field."""
    reply_limits: ReplyLimits = ReplyLimits()
    """Time and size bounds on every reply that hold whatever the deadlines say."""
    stream_buffer: int = attrs.field(default=8, validator=ge(0))
    """Event batches buffered per call before the producer waits for the consumer."""
    ledger: LedgerConfig = LedgerConfig()
    """Usage accounting, prices, persistence and budgets."""
    cache: CacheConfig = CacheConfig()
    """The response cache (off unless enabled here or by a call)."""
    store: str | None = None
    """Where quotas, cooldowns and budgets are kept: ``redis://host:6379/0`` shares them with
    every process using the same Redis and ``store_prefix``. Unset: ``$SLUICE_STORE``, else
    this process's memory."""
    store_prefix: str = "sluice"
    """One prefix per deployment: processes with the same prefix share one set of quotas."""
    on_store_error: Literal["fail", "local"] = "fail"
    """When Redis does not answer: refuse calls (``StoreUnavailable``), or admit against a
    local share of each limit until it answers again."""
    store_local_share: float = attrs.field(default=0.25, validator=[gt(0), le(1)])
    """The fraction of each limit, and of what was left of each shared budget, one process may
    use while Redis does not answer."""
    metrics: MetricsConfig = MetricsConfig()
    """Prometheus metrics (off unless enabled)."""
    tracing: TracingConfig = TracingConfig()
    """OpenTelemetry traces (off unless enabled)."""
    gateway: GatewayConfig = GatewayConfig()
    """What ``sluice serve`` reads from the config (the runtime itself ignores it)."""
    groups: Mapping[str, ModelGroup] = attrs.field(factory=dict, validator=check_group_names)
    """Model groups by name: a call whose model is a group's name goes to one of its
    deployments (see :class:`ModelGroup`). A name holds no ``:``."""
    trim_memory_every: float | None = attrs.field(default=60.0, validator=_positive_or_none)
    """Seconds between giving the C allocator's free memory back to the system (glibc's
    ``malloc_trim``; elsewhere nothing), so that a long-running process's RSS follows what it
    uses instead of its highest peak. None: never (an application with its own policy)."""
