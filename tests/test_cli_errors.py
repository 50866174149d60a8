"""Every bad input gets one clear answer from the real CLI, and nothing is destroyed.

Each case runs the installed ``sluice`` in a fresh folder (its own HOME, no ambient config, key
or ledger) and checks the exit status, the first line of output, that a refusal is exactly one
``sluice: error:`` line, that no traceback appears, and which files changed. Calls go to the
simulator in-process or over loopback with the real clock; nothing asserts timing.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson
import pytest

from .helpers import SLUICE, clean_env, request_line

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

TIMEOUT = 60


def sluice(
    *args: str, cwd: Path, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SLUICE, *args],
        cwd=cwd,
        env=env,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: a file's bytes, or where a link points."""
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = f"-> {os.readlink(path)}"
        elif path.is_file():
            found[name] = path.read_bytes()
    return found


def two_lines(model: str = "sim:sim-small") -> str:
    return request_line("a", model) + "\n" + request_line("b", model) + "\n"


OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@dataclass
class Case:
    name: str
    args: tuple[str, ...]
    status: int
    first_line: str
    """A regular expression the first line of stderr (stdout when the status is 0) matches."""
    files: dict[str, str | bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    """Symbolic links: name -> target."""
    hard_links: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    changed: frozenset[str] = frozenset()
    """Files that may appear or change; every other file must be left exactly as it was."""
    check: Callable[[subprocess.CompletedProcess[str], Path], None] | None = None


def _replaced_output(done: subprocess.CompletedProcess[str], folder: Path) -> None:
    lines = (folder / "out.jsonl").read_bytes().splitlines()
    assert len(lines) == 2
    assert all(orjson.loads(line)["error"] is None for line in lines)


def _no_folder_made(done: subprocess.CompletedProcess[str], folder: Path) -> None:
    assert not (folder / "new").exists()


CASES = [
    # --- nothing destroyed ------------------------------------------------------------------
    Case(
        "batch output is the input",
        ("batch", "in.jsonl", "-o", "in.jsonl"),
        2,
        r"sluice: error: the output in\.jsonl is the input file in\.jsonl: .*give another -o",
        files={"in.jsonl": two_lines()},
    ),
    Case(
        "batch output is a link to the input",
        ("batch", "in.jsonl", "-o", "link.jsonl"),
        2,
        r"sluice: error: the output link\.jsonl is the input file",
        files={"in.jsonl": two_lines()},
        links={"link.jsonl": "in.jsonl"},
    ),
    Case(
        "batch output is a hard link to the input",
        ("batch", "in.jsonl", "-o", "hard.jsonl"),
        2,
        r"sluice: error: the output hard\.jsonl is the input file",
        files={"in.jsonl": two_lines()},
        hard_links={"hard.jsonl": "in.jsonl"},
    ),
    Case(
        "batch summary file would be the input",
        ("batch", "x.summary.json", "-o", "x.jsonl"),
        2,
        r"sluice: error: the summary file x\.summary\.json is the input file",
        files={"x.summary.json": two_lines()},
    ),
    Case(
        "batch output holds results",
        ("batch", "in.jsonl", "-o", "out.jsonl"),
        2,
        r"sluice: error: output out\.jsonl already holds results .*--resume continues it, "
        r"--overwrite replaces it",
        files={"in.jsonl": two_lines(), "out.jsonl": '{"paid": "for"}\n'},
    ),
    Case(
        "batch --resume with --overwrite",
        ("batch", "in.jsonl", "-o", "out.jsonl", "--resume", "--overwrite"),
        2,
        r"sluice: error: --resume keeps the output and --overwrite replaces it: give one",
        files={"in.jsonl": two_lines(), "out.jsonl": '{"paid": "for"}\n'},
    ),
    Case(
        "batch --overwrite replaces the output",
        ("batch", "in.jsonl", "-o", "out.jsonl", "--overwrite"),
        0,
        r"batch done: 2 lines written -> out\.jsonl",
        files={"in.jsonl": two_lines(), "out.jsonl": '{"paid": "for"}\n'},
        changed=frozenset({"out.jsonl", "out.summary.json", "out.input.json"}),
        check=_replaced_output,
    ),
    Case(
        "batch output folder cannot be created",
        ("batch", "in.jsonl", "-o", "in.jsonl/out.jsonl"),
        2,
        r"sluice: error: cannot create the folder for output in\.jsonl/out\.jsonl: "
        r".*in\.jsonl is a file",
        files={"in.jsonl": two_lines()},
    ),
    Case(
        "batch input missing",
        ("batch", "nothing.jsonl", "-o", "out.jsonl"),
        2,
        r"sluice: error: input file nothing\.jsonl does not exist",
    ),
    # --- fail once, early -------------------------------------------------------------------
    Case(
        "batch unknown provider",
        ("batch", "in.jsonl", "-o", "out.jsonl", "--model", "nowhere:m"),
        2,
        r"sluice: error: unknown provider 'nowhere'",
        files={"in.jsonl": two_lines()},
    ),
    Case(
        "batch lines all name an unknown provider",
        ("batch", "in.jsonl", "-o", "out.jsonl"),
        2,
        r"sluice: error: unknown provider 'nowhere'",
        files={"in.jsonl": two_lines("nowhere:m")},
    ),
    Case(
        "batch missing key",
        ("batch", "in.jsonl", "-o", "out.jsonl", "--model", "openai:gpt-4o-mini"),
        2,
        r"sluice: error: provider 'openai' needs an API key: set OPENAI_API_KEY",
        files={"in.jsonl": two_lines()},
    ),
    Case(
        "batch missing key creates no output folder",
        ("batch", "in.jsonl", "-o", "new/out.jsonl", "--model", "openai:gpt-4o-mini"),
        2,
        r"sluice: error: provider 'openai' needs an API key",
        files={"in.jsonl": two_lines()},
        check=_no_folder_made,
    ),
    Case(
        "batch base URL that is not a URL",
        ("batch", "in.jsonl", "-o", "out.jsonl", "--model", "openai:m", "--base-url", "nope"),
        2,
        r"sluice: error: --base-url: 'nope' is not an http:// or https:// URL with a host",
        files={"in.jsonl": two_lines()},
    ),
    Case(
        "chat unknown provider",
        ("chat", "nowhere:m", "hi"),
        2,
        r"sluice: error: unknown provider 'nowhere'",
    ),
    Case(
        "chat missing key",
        ("chat", "anthropic:claude-sonnet-4-5", "hi"),
        2,
        r"sluice: error: provider 'anthropic' needs an API key: set ANTHROPIC_API_KEY",
    ),
    Case(
        "chat base URL that is not a URL",
        ("chat", "openai:m", "hi", "--base-url", "not-a-url", "--api-key", "sk-x"),
        2,
        r"sluice: error: --base-url: 'not-a-url' is not an http:// or https:// URL",
    ),
    Case(
        "chat base URL with a port out of range",
        ("chat", "openai:m", "hi", "--base-url", "http://127.0.0.1:70000/v1"),
        2,
        r"sluice: error: --base-url: 'http://127\.0\.0\.1:70000/v1' is not a valid URL",
    ),
    # --- config types -----------------------------------------------------------------------
    Case(
        "config string for a list",
        ("chat", "sim:sim-small", "hi", "--config", "c.toml"),
        2,
        r"sluice: error: c\.toml: invalid config: expected a list of strings, got the string "
        r"'temperature' \(write \['temperature'\] for one item\) @ \$\.providers\['sim'\]"
        r"\.drop_params",
        files={"c.toml": '[providers.sim]\ndrop_params = "temperature"\n'},
    ),
    Case(
        "config base_url that is a number",
        ("chat", "acme:m", "hi", "--config", "c.toml"),
        2,
        r"sluice: error: c\.toml: invalid config: .*base_url: '42' is not an http:// or "
        r"https:// URL with a host",
        files={"c.toml": "[providers.acme]\nbase_url = 42\n"},
    ),
    Case(
        "config api_key_env that is not a variable name",
        ("chat", "acme:m", "hi", "--config", "c.toml"),
        2,
        r"sluice: error: c\.toml: invalid config: .*api_key_env: '\$ACME_KEY' is not an "
        r"environment variable name",
        files={
            "c.toml": '[providers.acme]\nbase_url = "http://127.0.0.1:9/v1"\n'
            'api_key_env = "$ACME_KEY"\n'
        },
    ),
    Case(
        "env override list split at commas",
        ("chat", "sim:sim-small", "hi"),
        0,
        r"\S",
        env={"SLUICE_PROVIDERS__SIM__DROP_PARAMS": "seed,top_p"},
    ),
    # --- one error format -------------------------------------------------------------------
    Case(
        "parser: missing argument",
        ("chat",),
        2,
        r"sluice: error: Command \"chat\" parameter MODEL requires an argument\. "
        r"\(see 'sluice chat --help'\)",
    ),
    Case(
        "parser: unknown option",
        ("batch", "in.jsonl", "-o", "out.jsonl", "--bogus"),
        2,
        r"sluice: error: Unknown option: --bogus\. \(see 'sluice batch --help'\)",
        files={"in.jsonl": two_lines()},
    ),
    Case(
        "parser: not a number",
        ("batch", "in.jsonl", "-o", "out.jsonl", "--max-in-flight", "lots"),
        2,
        r"sluice: error: Invalid value for --max-in-flight: .*\(see 'sluice batch --help'\)",
        files={"in.jsonl": two_lines()},
    ),
    Case(
        "parser: unknown command",
        ("chta", "sim:sim-small", "hi"),
        2,
        r"sluice: error: Unknown command \"chta\"\. .*\(see 'sluice --help'\)",
    ),
    Case(
        "parser: nested command",
        ("providers", "check", "--nope"),
        2,
        r"sluice: error: Unknown option: --nope\..* \(see 'sluice providers check --help'\)",
    ),
    Case(
        "ledger before any usage",
        ("ledger",),
        0,
        r"no usage recorded yet$",
        env={"SLUICE_LEDGER_DB": "never-written.sqlite3"},
    ),
    # --- input ------------------------------------------------------------------------------
    Case(
        "chat prompt from stdin",
        ("chat", "sim:sim-small", "-"),
        0,
        r"\S",
        stdin="say something\n",
    ),
    Case(
        "chat prompt from an empty stdin",
        ("chat", "sim:sim-small", "-"),
        2,
        r"sluice: error: the prompt '-' is read from standard input, which was empty",
    ),
    Case(
        "chat OpenAI-format tools file",
        ("chat", "sim:sim-small", "weather?", "--tools", "t.json", "--tool-choice", "required"),
        0,
        r"\[tool call get_weather\(\{\"city\":",
        files={"t.json": orjson.dumps(OPENAI_TOOLS).decode()},
    ),
    Case(
        "chat tools file with a wrong field",
        ("chat", "sim:sim-small", "weather?", "--tools", "t.json"),
        2,
        r"sluice: error: tools file t\.json, tool 0\.function\.name: expected a string, got a "
        r"number",
        files={"t.json": '[{"type": "function", "function": {"name": 3}}]'},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_cli_answers_every_case_clearly(case: Case, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for name, content in case.files.items():
        target = work / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    for name, target_name in case.links.items():
        (work / name).symlink_to(target_name)
    for name, target_name in case.hard_links.items():
        os.link(work / target_name, work / name)
    before = snapshot(work)

    done = sluice(*case.args, cwd=work, env=clean_env(tmp_path, **case.env), stdin=case.stdin)

    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert done.returncode == case.status, output
    stream = done.stdout if case.status == 0 else done.stderr
    first = stream.splitlines()[0] if stream else ""
    assert re.match(case.first_line, first), first
    if case.status == 2:
        assert done.stderr.count("\n") == 1, done.stderr  # one message, one line
        assert done.stdout == ""
    after = snapshot(work)
    for name in set(before) | set(after):
        if name not in case.changed:
            assert before.get(name) == after.get(name), f"{name} changed"
    if case.check is not None:
        case.check(done, work)
