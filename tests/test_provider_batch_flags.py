"""The provider lane's options refused before anything runs: the flags and run_batch's."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice import ConfigError
from sluice._cli.batch import BatchFlags
from sluice._jobs.provider_batch.engine import ProviderLane


def test_lane_choice_and_its_refusals():
    assert ProviderLane.checked("realtime", None, False, None) is None
    lane = ProviderLane.checked("auto", 60.0, False, None)
    assert lane is not None and (lane.via, lane.deadline) == ("auto", 60.0)
    with pytest.raises(ConfigError, match="one of realtime, provider, auto"):
        ProviderLane.checked("sideways", None, False, None)
    with pytest.raises(ConfigError, match="deadline applies to via auto"):
        ProviderLane.checked("provider", 60.0, False, None)
    with pytest.raises(ConfigError, match="deadline applies to via auto"):
        ProviderLane.checked("auto", -1.0, False, None)
    with pytest.raises(ConfigError, match="ordered applies to the realtime lane"):
        ProviderLane.checked("provider", None, True, None)


def test_flags():
    out = Path("out.jsonl")
    assert BatchFlags(output=out, via="provider", batch_size=10).problem() is None
    assert BatchFlags(output=out, deadline="2h").problem() == "--deadline applies to --via auto"
    assert BatchFlags(output=out, poll_interval=0).problem() == "--poll-interval must be positive"
    assert BatchFlags(output=out, batch_size=0).problem() == "--batch-size must be at least 1"
