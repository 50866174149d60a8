"""Model groups: one model name served by several deployments (:class:`ModelGroup`,
:class:`Deployment`).

Loaded with the first group a config names (or the first time these names are asked for): a
runtime without groups never builds one, so :mod:`.runtime` and the package serve them
(PEP 562) instead of importing them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs
from attrs.validators import ge, gt, le

from .._record import Value

__all__ = ["Deployment", "ModelGroup", "RoutingStrategy"]


def _deployment_model(_instance: Any, _attribute: Any, value: str) -> None:
    provider, sep, model = value.partition(":")
    if not sep or not provider or not model:
        raise ValueError(
            f"a deployment's model is 'provider:model' (a provider entry holds its base URL, key "
            f"and quotas), not {value!r}"
        )


@attrs.frozen(eq=False, kw_only=True, repr=False)
class Deployment(Value):
    """One place a model group's calls can go: a provider entry and a model name there."""

    model: str = attrs.field(validator=_deployment_model)
    """``provider:model``. Each provider entry has its own base URL, key, quotas, cooldown and
    circuit breaker, so two deployments of one group are usually two provider entries (two keys,
    or an Azure deployment beside OpenAI)."""
    weight: float = attrs.field(default=1.0, validator=gt(0))
    """Its share of the traffic under ``weighted``; its capacity under ``least-busy`` when its
    provider sets no request limit."""


def _deployments(value: Any) -> tuple[Deployment, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"deployments is a list of deployments, not {value!r}")
    found = tuple(
        Deployment(model=d)
        if isinstance(d, str)
        else Deployment(**d)
        if isinstance(d, Mapping)
        else d
        for d in value
    )
    if not all(isinstance(d, Deployment) for d in found):
        raise TypeError("each deployment is a Deployment, a mapping or a 'provider:model' string")
    if not found:
        raise ValueError("a model group needs at least one deployment")
    models = [d.model for d in found]
    if len(set(models)) != len(models):
        raise ValueError(f"a model group names a deployment twice: {models}")
    return found


def _finite(_instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"'{attribute.name}' must be a finite number of seconds, got {value!r}")


RoutingStrategy = Literal["least-busy", "lowest-latency", "most-headroom", "weighted"]


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ModelGroup(Value):
    """One model name served by several deployments (``model="fast"`` in a call).

    Each call goes to one deployment, chosen by ``strategy`` among those not cooling down after a
    429 and whose circuit breaker is closed; a retryable failure moves the call to another
    deployment of the group at once, before any fallback model.
    """

    deployments: tuple[Deployment, ...] = attrs.field(converter=_deployments)
    """The deployments: ``Deployment`` entries, mappings of their fields, or plain
    ``"provider:model"`` strings."""
    strategy: RoutingStrategy = "least-busy"
    """``least-busy``: fewest calls in flight relative to capacity (the provider's request limit
    per minute, else the weight). ``lowest-latency``: lowest moving average of time to first
    token, exploring the others now and then so a recovered deployment wins traffic back.
    ``most-headroom``: largest share left of its binding request window. ``weighted``: at random
    by weight."""
    affinity: Literal["none", "prefix", "key"] = "none"
    """Keep calls together while their deployment is usable, so provider prompt caches hit:
    ``prefix`` by the first messages' text, ``key`` by ``ChatRequest.affinity_key``."""
    exploration: float = attrs.field(default=0.05, validator=[ge(0), le(1)])
    """``lowest-latency``: the share of calls sent to a deployment other than the fastest."""
    latency_halflife: float = attrs.field(default=20.0, validator=gt(0))
    """``lowest-latency``: calls after which an old time to first token counts half."""
    hedge: float = attrs.field(default=5.0, validator=[ge(0), _finite])
    """Seconds an attempt may go without an answer (a streamed call: its first chunk; any
    other: the reply's head) while another deployment of the group could take the call. Past
    it, the attempt is abandoned, the deployment is marked slow, and the call moves on; the
    first-token deadline still bounds the last deployment tried. Set it above the slowest
    time to first token the group's models normally take (reasoning models may think for
    long before their first chunk). 0: never move a call for slowness."""
    slow_for: float = attrs.field(default=30.0, validator=[gt(0), _finite])
    """Seconds a deployment that missed the hedge time is passed over by routing while
    another is usable."""
