"""Service-level objectives from the command line: ``ttft_p99=500ms``. Pure.

An SLO names a metric (``ttft``, ``itl``, ``tpot``, ``e2e``), a percentile and a bound. The
run meets it when that percentile of the metric over the run is within the bound. A request
is *good* (counts toward goodput) when it succeeded and its own value of every SLO metric is
within the bound: its TTFT, TPOT and end-to-end latency, and for ITL its own ITL at the SLO's
percentile. This is the per-request definition DistServe and vLLM's ``--goodput`` use.
"""

from __future__ import annotations

import re

import attrs

from ..._errors import ConfigError

__all__ = ["METRICS", "Slo", "parse_seconds", "parse_slo"]

METRICS = ("ttft", "itl", "tpot", "e2e")
_FORM = re.compile(
    r"^(?P<metric>[a-z0-9]+)_p(?P<pct>\d+(?:\.\d+)?)=(?P<value>[0-9.]+)(?P<unit>ms|s|us)?$"
)
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@attrs.frozen
class Slo:
    metric: str
    percentile: float
    """In percent: 99 for p99, 99.9 for p99.9."""
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.metric}_p{self.percentile:g}"

    def describe(self) -> str:
        return f"{self.name} <= {self.seconds * 1000:g} ms"


def parse_slo(text: str) -> Slo:
    """``METRIC_pPCT=VALUE[ms|s|us]`` (seconds without a unit) as an :class:`Slo`.

    Raises:
        ConfigError: another form, an unknown metric, or a percentile outside (0, 100].
    """
    found = _FORM.match(text.strip().lower())
    if found is None:
        raise ConfigError(
            f"--slo {text!r}: expected METRIC_pPCT=VALUE with a unit, e.g. ttft_p99=500ms"
        )
    metric = found["metric"]
    if metric not in METRICS:
        raise ConfigError(
            f"--slo {text!r}: unknown metric {metric!r}; use one of {', '.join(METRICS)}"
        )
    percentile = float(found["pct"])
    if not 0 < percentile <= 100:
        raise ConfigError(f"--slo {text!r}: the percentile must be in (0, 100]")
    try:
        value = float(found["value"])
    except ValueError:
        raise ConfigError(f"--slo {text!r}: {found['value']!r} is not a number") from None
    return Slo(metric, percentile, value * _UNITS[found["unit"] or "s"])


def parse_seconds(text: str, *, flag: str) -> float:
    """``10ms``, ``0.5s``, ``250us`` or a bare number of seconds, as seconds.

    Raises:
        ConfigError: another form, or a negative value.
    """
    found = re.fullmatch(r"([0-9]*\.?[0-9]+)(ms|s|us)?", text.strip().lower())
    if found is None:
        raise ConfigError(f"{flag} {text!r}: expected a duration such as 10ms, 0.5s or 2")
    return float(found[1]) * _UNITS[found[2] or "s"]
