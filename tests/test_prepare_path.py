"""The path of one ``ChatRequest`` from ``Runtime.stream`` to the Supervisor's mailbox, traced.

Every Python call into a ``sluice`` module while the request is submitted is recorded with the
modules waiting on the stack below it (``sys.setprofile``, for the test's own task only). The
path must:

- never climb back: no call enters a module that is still on the stack below its caller (the
  old runtime did this: the router called the runtime's ``blocked`` back, the runtime was
  called back by the Supervisor to prepare tools);
- enter the preparation module once, from the runtime;
- from there, visit each step's module once, in the order ``sluice._prepare`` documents.

The checker is a pure function over the recorded calls, and is itself tested against a trace
that climbs back and one that visits a module twice.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest
import trio

import sluice
from sluice import ChatRequest, ModelGroup, ProviderConfig, RuntimeConfig
from sluice._conversation import Tool
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

if TYPE_CHECKING:
    from types import FrameType

PREPARE = "sluice._prepare"
RUNTIME = "sluice._runtime"

TOOL = Tool(name="lookup", parameters={"type": "object", "properties": {}})
CONFIG = RuntimeConfig(
    providers={h: ProviderConfig(base_url=f"http://{h}.test/v1") for h in ("d1", "d2")},
    groups={"fast": ModelGroup(deployments=["d1:sim-small", "d2:sim-small"])},
)

DIRECT_STEPS = [
    "sluice._messages",  # 1 model: split_model
    "sluice._startup",  # 2 providers
    "sluice.providers._registry",  # 5 capabilities
    "sluice._tools.preparation",  # 5 tools
    "sluice._limits.cost",  # 7 cost
    "sluice._mail",  # 8 the Call
]
GROUP_STEPS = [
    "sluice._messages",
    "sluice._startup",
    "sluice.actors._supervisor_peers",  # 3 placement: open breakers
    "sluice._routing",  # 3 placement: the group's strategy
    "sluice.providers._registry",
    "sluice._tools.preparation",
    "sluice._limits.cost",
    "sluice._mail",
]

Entry = tuple[str, tuple[str, ...]]
"""A call into a sluice module: the module, and the sluice modules waiting below it (the
nearest first, consecutive frames of one module counted once)."""


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _record(entries: list[Entry], task: trio.lowlevel.Task, until: str):
    """A profile function that appends an entry for each call into a sluice module made by
    ``task`` from another module, with the modules on its stack up to the frame of ``until``.
    A coroutine resumed after an await is not a new call (the profiler reports it as one)."""
    seen: dict[int, FrameType] = {}  # holds the frames, so that no id is reused meanwhile

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        module = _module(frame)
        if not module.startswith("sluice"):
            return
        try:
            if trio.lowlevel.current_task() is not task:
                return
        except RuntimeError:  # the scheduler itself, between tasks
            return
        if id(frame) in seen:
            return  # a coroutine resumed after an await: not a new call
        seen[id(frame)] = frame
        below: list[str] = []
        caller = frame.f_back
        while caller is not None:
            name = _module(caller)
            if name == until:
                break
            if name.startswith("sluice") and (not below or below[-1] != name):
                below.append(name)
            caller = caller.f_back
        if not below or below[0] != module:  # a call within one module is not a move
            entries.append((module, tuple(below)))

    return profile


def climbs_back(entries: list[Entry]) -> list[str]:
    """Every call that enters a module still waiting on the stack below its caller."""
    return [
        f"{below[0]} -> {module} (waiting: {' < '.join(below)})"
        for module, below in entries
        if module in below[1:]
    ]


def step_modules(entries: list[Entry], hub: str = PREPARE) -> list[str]:
    """The modules ``hub`` itself calls, in order, consecutive calls into one counted once."""
    found: list[str] = []
    for module, below in entries:
        if below and below[0] == hub and (not found or found[-1] != module):
            found.append(module)
    return found


def check_path(entries: list[Entry]) -> list[str]:
    """What is wrong with a submission's path: climbs back, the preparation module entered
    other than once from the runtime, a step's module visited twice."""
    problems = climbs_back(entries)
    into_prepare = [below[:1] for module, below in entries if module == PREPARE]
    if into_prepare != [(RUNTIME,)]:
        problems.append(f"{PREPARE} entered {into_prepare} (want once, from {RUNTIME})")
    steps = step_modules(entries)
    twice = sorted({m for m in steps if steps.count(m) > 1})
    if twice:
        problems.append(f"{PREPARE} returns to {twice}: {steps}")
    return problems


async def _traced_stream(rt: sluice.Runtime, request: ChatRequest) -> list[Entry]:
    entries: list[Entry] = []
    task = trio.lowlevel.current_task()
    sys.setprofile(_record(entries, task, until=__name__))
    try:
        async with rt.stream(request) as stream:
            sys.setprofile(None)
            async for _ in stream:
                pass
    finally:
        sys.setprofile(None)
    assert stream.error is None, stream.error
    return entries


@pytest.mark.parametrize(
    ("model", "steps"),
    [("d1:sim-small", DIRECT_STEPS), ("fast", GROUP_STEPS)],
    ids=["direct", "group"],
)
@virtual_deadline(30)
async def test_a_request_goes_through_each_preparation_step_once_in_order(
    autojump_clock, model: str, steps: list[str]
) -> None:
    request = ChatRequest(model=model, messages="hi", tools=[TOOL])
    async with sluice.open_runtime(
        CONFIG, transport=mock_transport(SimulatorConfig()), environ={}
    ) as rt:
        first = await _traced_stream(rt, request)  # starts the providers on the way
        again = await _traced_stream(rt, request)
    for entries in (first, again):
        assert check_path(entries) == []
    assert step_modules(again) == steps
    # The first call also starts the providers (resolution, codec, transport, the actor),
    # all of it under the one visit to provider startup.
    assert step_modules(first) == steps


def test_the_check_sees_a_callback_into_a_module_below() -> None:
    # What the old runtime did when it placed a group's call: the router asked the runtime's
    # own `blocked` back for each deployment.
    entries: list[Entry] = [
        (RUNTIME, ()),
        ("sluice._routing", (RUNTIME,)),
        (RUNTIME, ("sluice._routing", RUNTIME)),
    ]
    assert climbs_back(entries) == [
        "sluice._routing -> sluice._runtime (waiting: sluice._routing < sluice._runtime)"
    ]


def test_the_check_sees_a_step_module_visited_twice_and_a_second_preparation() -> None:
    entries: list[Entry] = [
        (PREPARE, (RUNTIME,)),
        ("sluice._messages", (PREPARE, RUNTIME)),
        ("sluice._startup", (PREPARE, RUNTIME)),
        ("sluice._messages", (PREPARE, RUNTIME)),
        (PREPARE, (RUNTIME,)),
    ]
    problems = check_path(entries)
    assert len(problems) == 2
    assert "entered [('sluice._runtime',), ('sluice._runtime',)]" in problems[0]
    assert "returns to ['sluice._messages']" in problems[1]
