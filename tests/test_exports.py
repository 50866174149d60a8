"""The public surface is deliberate: pinned here, like httpx's exported-members test."""

import tomllib
from pathlib import Path

import sluice

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_exactly_the_public_names():
    # Names loaded on first use (sluice._LAZY) are public too, whether loaded yet or not.
    public = {name for name in vars(sluice) if not name.startswith("_")} | set(sluice._LAZY)
    modules = {name for name in public if type(getattr(sluice, name)).__name__ == "module"}
    assert sorted(sluice.__all__) == sorted(public - modules)
    assert len(sluice.__all__) == len(set(sluice.__all__))


def test_every_package_folder_is_listed_for_installation():
    """A subpackage missing from pyproject's list works in a checkout but not when installed."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {"sluice", "sluice.actors"} | {
        ".".join(("sluice", *p.parent.relative_to(ROOT / "runtime").parts))
        for p in (ROOT / "runtime").glob("*/**/__init__.py")
    }
    assert found == listed


def test_pinned_public_api():
    assert {
        "open_runtime",
        "Runtime",
        "ChatRequest",
        "ChatResult",
        "Message",
        "Tool",
        "RuntimeConfig",
        "CallError",
        "RateLimited",
        "StreamReset",
        "Completed",
        "Failed",
        "run_batch",
        "BatchSummary",
        "BatchProgress",
        "BatchInterrupt",
    } <= set(sluice.__all__)


def test_the_front_doors_are_pinned():
    """sluice.aio and sluice.sync offer the trio API's surface, each under the same names."""
    import sluice.aio
    import sluice.sync

    assert sluice.aio.__all__ == [
        "CallStream",
        "EmbedOutcomes",
        "Ledger",
        "MapOutcomes",
        "Runtime",
        "open_runtime",
        "run_batch",
    ]
    assert sluice.sync.__all__ == [
        "CallStream",
        "EmbedOutcomes",
        "Ledger",
        "MapOutcomes",
        "Runtime",
        "chat",
        "open_runtime",
        "run_batch",
    ]
    for door in (sluice.aio, sluice.sync):
        assert all(hasattr(door, name) for name in door.__all__)
        methods = ("chat", "stream", "map", "embed", "embed_many", "statistics", "ledger_totals")
        for method in methods:
            assert callable(getattr(door.Runtime, method)), (door, method)
