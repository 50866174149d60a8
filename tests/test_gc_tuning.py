"""The ``sluice`` command (a process of its own) sets the garbage collector for a service;
``main`` called in someone's process leaves it alone."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

from sluice._cli import main
from sluice._gc import YOUNG_THRESHOLD

_PROBE = (
    "import gc, sys; from sluice._cli import {entry} as entry; sys.argv = ['sluice', "
    "'--version']; code = entry(); print(gc.get_threshold()[0], gc.get_freeze_count() > 0)"
)


def _last_words(code: str, **environ: str) -> list[str]:
    """What ``code`` prints, run in a fresh interpreter with ``environ`` added: its words."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **environ},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


def probe(entry: str, **environ: str) -> tuple[int, bool]:
    young, frozen = _last_words(_PROBE.format(entry=entry), **environ)[-2:]
    return int(young), frozen == "True"


def test_the_console_script_freezes_startup_objects_and_collects_young_objects_less_often():
    assert probe("console_main") == (YOUNG_THRESHOLD, True)
    assert probe("console_main", SLUICE_GC="default") == (700, False)


def test_main_in_someone_elses_process_leaves_the_collector_alone():
    assert probe("main") == (700, False)
    before = gc.get_threshold()
    assert main(["--version"]) == 0
    assert gc.get_threshold() == before


_SETUP_PROBE = (
    "import gc; from sluice._gc import freeze_setup, tune_for_service; {tune}"
    "before = gc.get_freeze_count(); kept = [[i] for i in range(1000)]; freeze_setup(); "
    "print(gc.get_freeze_count() - before >= 1000)"
)


def _froze_setup(tune: str, **environ: str) -> bool:
    return _last_words(_SETUP_PROBE.format(tune=tune), **environ)[-1] == "True"


def test_a_tuned_process_freezes_what_its_setup_made_and_an_untuned_one_does_not():
    assert _froze_setup("tune_for_service(); ") is True
    assert _froze_setup("") is False  # someone's program: left alone
    assert _froze_setup("tune_for_service(); ", SLUICE_GC="default") is False
