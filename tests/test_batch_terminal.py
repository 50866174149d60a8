"""``sluice batch`` on a terminal: the live display shows the figures the issue lists.

The real CLI runs with stderr on a pseudo-terminal (so rich draws its live view) against the
built-in simulator; the test reads what was drawn.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess

import orjson

from .helpers import SLUICE

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run_on_a_terminal(argv: list[str]) -> tuple[int, str]:
    master, slave = pty.openpty()
    env = {**os.environ, "SLUICE_LEDGER_DB": "off", "COLUMNS": "160"}
    with subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env
    ) as proc:
        os.close(slave)
        drawn = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not data:
                break
            drawn.append(data)
        code = proc.wait(timeout=60)
    os.close(master)
    return code, ANSI.sub("", b"".join(drawn).decode(errors="replace"))


def test_live_view_shows_progress_figures_and_the_quota(tmp_path):
    source = tmp_path / "in.jsonl"
    body = {"model": "sim:sim-small", "messages": [{"role": "user", "content": "hi"}]}
    source.write_bytes(
        b"\n".join(orjson.dumps({"custom_id": f"r{i}", "body": body}) for i in range(30))
    )
    out = tmp_path / "out.jsonl"
    code, screen = run_on_a_terminal(
        [SLUICE, "batch", str(source), "-o", str(out), "--rpm", "6000"]
    )
    assert code == 0, screen
    assert "30/30" in screen
    assert "ok 30, failed 0" in screen
    assert re.search(r"in flight \d+ \(queued \d+\), \d+ tok/s, \$\d+\.\d{6}", screen), screen
    # The quota windows in use: --rpm's minute and its pacing window of ceil(6000 / 60) a second.
    assert re.search(r"sim requests/60s 30/6000, sim requests/1s \d+/100", screen), screen
    assert len(out.read_bytes().splitlines()) == 30
