"""``sluice batch --budget`` spends what it may: a real process against the suite's own server
(``tests/faulty_server.py``), whose usage per reply and whose price (from the config) are known,
so the test knows what every line costs.

Each line costs 3 prompt tokens at $1/M and 50 output tokens at $4/M: 203 micro-dollars. Its
worst case, with no ``max_tokens``, is the guessed 1,024 output tokens: about 4,100
micro-dollars, most of a $0.005 budget. Twenty lines cost 4,060 and must all be answered (the
worst case refused them once 900 were spent, with 80% of the budget left); forty cost more
than the budget, which must then be spent to within 5% and never past it.
"""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import orjson

from .faulty_server import FaultyServer, input_lines
from .helpers import SLUICE, clean_env, whole_lines

if TYPE_CHECKING:
    from pathlib import Path

BUDGET_MICROS = 5_000
LINE_MICROS = 3 * 1 + 50 * 4


def run_budgeted_batch(tmp_path: Path, n: int) -> tuple[list[dict], dict]:
    config = tmp_path / "config.json"
    prices = {"local:m": {"input": 1.0, "output": 4.0}}
    config.write_bytes(orjson.dumps({"ledger": {"prices": prices}}))
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(input_lines(n)))
    out = tmp_path / "out.jsonl"
    with FaultyServer(completion_tokens=50) as server:
        argv = [SLUICE, "batch", str(source), "-o", str(out), "--model", "local:m"]
        argv += ["--base-url", server.url, "--config", str(config), "--budget", "0.005"]
        argv += ["--allow-failures"]
        done = subprocess.run(argv, env=clean_env(tmp_path), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    summary = orjson.loads((tmp_path / "out.summary.json").read_bytes())
    return whole_lines(out), summary


def cost_micros(summary: dict) -> int:
    return round(float(summary["cost_usd"]) * 1_000_000)


def test_cheap_lines_whose_worst_case_is_most_of_the_budget_all_finish(tmp_path):
    lines, summary = run_budgeted_batch(tmp_path, 20)
    assert [line["error"] for line in lines] == [None] * 20
    assert cost_micros(summary) == 20 * LINE_MICROS


def test_lines_that_cost_more_than_the_budget_spend_it_to_within_5_percent(tmp_path):
    lines, summary = run_budgeted_batch(tmp_path, 40)
    assert sorted(line["custom_id"] for line in lines) == sorted(f"r{i}" for i in range(40))
    errors = [line["error"] for line in lines if line["error"] is not None]
    assert errors and all(e["code"] == "BudgetExceeded" for e in errors)
    assert 0.95 * BUDGET_MICROS <= cost_micros(summary) <= BUDGET_MICROS
    # Each answered line was billed what the server reported, never more than it allowed.
    output = [
        line["response"]["body"]["usage"]["completion_tokens"]
        for line in lines
        if not line["error"]
    ]
    assert sum(3 * 1 + t * 4 for t in output) == cost_micros(summary)
