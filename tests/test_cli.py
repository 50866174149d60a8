"""The ``sluice`` command line, in-process through ``main([...])`` and as a subprocess.

Calls go to the simulator over loopback with the real clock; tests assert output and exit
codes, never timing.
"""

from __future__ import annotations

import subprocess

import orjson
import pytest

from sluice._cli import main

from .helpers import SLUICE, sim_process

TIMEOUT = 60
USAGE_KEYS = {
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
}


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SLUICE, *args], capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False
    )


@pytest.fixture
def failing_server():
    """A simulator subprocess that answers every chat request with HTTP 500; yields its URL."""
    with sim_process("--rate-500", "1") as url:
        yield url


@pytest.fixture
def one_attempt(tmp_path, monkeypatch):
    """SLUICE_CONFIG pointing at a config with no retries, so failures come back at once."""
    path = tmp_path / "config.json"
    path.write_bytes(orjson.dumps({"retry": {"max_attempts": 1}}))
    monkeypatch.setenv("SLUICE_CONFIG", str(path))
    return path


def test_chat_json_prints_one_object_with_every_field(capsys):
    assert main(["chat", "sim:sim-small", "hello", "--json"]) == 0
    out = capsys.readouterr().out
    data = orjson.loads(out)
    assert out.count("\n") == 1
    assert set(data) == {
        "provider",
        "model",
        "text",
        "reasoning",
        "tool_calls",
        "finish_reason",
        "usage",
    }
    assert (data["provider"], data["model"], data["finish_reason"]) == ("sim", "sim-small", "stop")
    assert data["text"]
    assert data["tool_calls"] == []
    assert set(data["usage"]) == USAGE_KEYS
    assert data["usage"]["output_tokens"] > 0


def test_chat_streams_the_same_text_that_json_reports(capsys):
    assert main(["chat", "sim:sim-small", "hello", "--system", "Be brief."]) == 0
    streamed = capsys.readouterr().out
    assert main(["chat", "sim:sim-small", "hello", "--system", "Be brief.", "--json"]) == 0
    text = orjson.loads(capsys.readouterr().out)["text"]
    assert streamed == text + "\n"
    assert main(["chat", "sim:sim-small", "hello", "--system", "Be brief.", "--no-stream"]) == 0
    assert capsys.readouterr().out == text + "\n"


@pytest.mark.parametrize("model", ["gpt-4o-mini", "sim:", ":x"])
def test_bad_model_string_exits_2_with_one_clear_line(capsys, model):
    assert main(["chat", model, "hello"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("sluice: error: ")
    assert "provider:model" in captured.err
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err


def test_bad_model_string_with_json_prints_an_error_object(capsys):
    assert main(["chat", "nope", "hello", "--json"]) == 2
    error = orjson.loads(capsys.readouterr().out)["error"]
    assert error["type"] == "ConfigError"
    assert error["status"] is None
    assert "provider:model" in error["message"]


def test_unknown_provider_and_missing_key_are_config_errors(capsys, monkeypatch):
    assert main(["chat", "nowhere:m", "hello"]) == 2
    assert "unknown provider 'nowhere'" in capsys.readouterr().err
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["chat", "openai:gpt-4o-mini", "hello"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err


def test_chat_against_a_base_url(capsys, failing_server, one_attempt):
    """--base-url makes any provider name an OpenAI-compatible backend; a 500 exits 1."""
    assert main(["chat", "local:any-model", "hello", "--base-url", failing_server, "--json"]) == 1
    error = orjson.loads(capsys.readouterr().out)["error"]
    assert error["status"] == 500
    assert error["type"] == "server_error"
    assert error["message"]


def test_failed_call_without_json_is_one_line_on_stderr(failing_server, one_attempt):
    done = run("chat", "sim:sim-small", "hello", "--base-url", failing_server)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("sluice: error: ")
    assert "HTTP 500" in done.stderr
    assert done.stderr.count("\n") == 1


def test_chat_subprocess_prints_valid_json():
    done = run("chat", "sim:sim-small", "hello", "--json")
    assert done.returncode == 0, done.stderr
    data = orjson.loads(done.stdout)
    assert data["provider"] == "sim"
    assert data["text"]


def test_batch_subprocess_writes_one_line_per_input_line(tmp_path):
    def request(custom_id, model="sim:sim-small"):
        return orjson.dumps(
            {
                "custom_id": custom_id,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": model,
                    "messages": [{"role": "user", "content": f"hi {custom_id}"}],
                },
            }
        ).decode()

    lines = [
        request("ok-1"),
        '{"custom_id": "broken", ',
        orjson.dumps(
            {"body": {"model": "sim:x", "messages": [{"role": "user", "content": "x"}]}}
        ).decode(),
        request("elsewhere", model="nowhere:m"),
        request("ok-2"),
        request("ok-3"),
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "results" / "out.jsonl"
    done = run("batch", str(source), "-o", str(out))
    assert done.returncode == 1, done.stderr  # some lines failed
    got = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(got) == len(lines)
    allowed = run("batch", str(source), "-o", str(out), "--allow-failures", "--overwrite")
    assert allowed.returncode == 0, allowed.stderr
    assert sorted(str(o["custom_id"]) for o in got) == [
        "None",
        "None",
        "elsewhere",
        "ok-1",
        "ok-2",
        "ok-3",
    ]
    failed = sorted(o["error"]["message"] for o in got if o["error"])
    assert [m.split(":")[0] for m in failed] == ["line 2", "line 3", "line 4"]
    assert "ok 3, failed 3" in done.stdout
    assert "tokens:" in done.stdout
    assert "calls/s" in done.stdout


def test_batch_with_config_model_and_base_url(tmp_path, capsys, failing_server):
    """--model names the provider that --base-url points at; --config sets the retry policy."""
    config = tmp_path / "config.json"
    config.write_bytes(orjson.dumps({"retry": {"max_attempts": 1, "wait_max_attempts": 1}}))
    source = tmp_path / "in.jsonl"
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}
    source.write_text(
        "\n".join(orjson.dumps({"custom_id": f"r{i}", "body": body}).decode() for i in range(3))
    )
    out = tmp_path / "out.jsonl"
    argv = [
        "batch",
        str(source),
        "-o",
        str(out),
        "--model",
        "local:m",
        "--base-url",
        failing_server,
    ]
    assert main([*argv, "--config", str(config), "--allow-failures"]) == 0
    got = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert sorted(o["custom_id"] for o in got) == ["r0", "r1", "r2"]
    assert {o["response"]["status_code"] for o in got} == {500}
    assert "ok 0, failed 3" in capsys.readouterr().out


def test_batch_bad_arguments_exit_2(tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text("")
    out = str(tmp_path / "out.jsonl")
    cases = [
        (["batch", str(tmp_path / "missing.jsonl"), "-o", out], "does not exist"),
        (
            ["batch", str(source), "-o", out, "--config", str(tmp_path / "nope.json")],
            "cannot read config file",
        ),
        (["batch", str(source), "-o", out, "--model", "gpt-4o"], "provider:model"),
        (["batch", str(source), "-o", out, "--base-url", "http://x/v1"], "give --model too"),
        (["batch", str(source), "-o", out, "--max-in-flight", "0"], "at least 1"),
    ]
    for argv, fragment in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert fragment in err, (argv, err)
        assert "Traceback" not in err
    bad_config = tmp_path / "bad.json"
    bad_config.write_text('{"retry": {"max_attempts": 0}}')
    assert main(["batch", str(source), "-o", out, "--config", str(bad_config)]) == 2
    assert "max_attempts" in capsys.readouterr().err


def test_empty_batch_runs_and_reports_zero(tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text("\n\n")
    out = tmp_path / "out.jsonl"
    assert main(["batch", str(source), "-o", str(out)]) == 0
    assert out.read_bytes() == b""
    assert "ok 0, failed 0" in capsys.readouterr().out


def test_sim_rejects_bad_settings(capsys):
    assert main(["sim", "--rate-429", "2"]) == 2
    assert "sluice: error: bad simulator setting" in capsys.readouterr().err
    # The latency-model flags reach the simulator's config and its checks.
    assert main(["sim", "--itl-jitter", "0.01"]) == 2
    assert "'itl_jitter' needs a pace" in capsys.readouterr().err
    assert main(["sim", "--capacity", "0"]) == 2
    assert "capacity" in capsys.readouterr().err


def test_help_and_parse_errors(capsys):
    assert main(["--help"]) == 0
    assert "batch" in capsys.readouterr().out
    assert main(["chat", "sim:sim-small"]) == 2  # PROMPT missing: cyclopts reports it


# --tools and --tool-choice -----------------------------------------------------------------

TOOLS_FILE = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
    {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
]


@pytest.fixture
def tools_file(tmp_path):
    path = tmp_path / "tools.json"
    path.write_bytes(orjson.dumps(TOOLS_FILE))
    return str(path)


@pytest.mark.parametrize("choice", ["required", "get_weather"])
def test_chat_json_shows_the_final_tool_call_of_a_forced_choice(capsys, tools_file, choice):
    """sim-notools ignores tool_choice: the call is forced through structured output and the
    JSON text comes back as an ordinary tool call."""
    argv = ["chat", "sim:sim-notools", "Weather in Paris?", "--tools", tools_file]
    assert main([*argv, "--tool-choice", choice, "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    (call,) = data["tool_calls"]
    assert (data["text"], data["finish_reason"]) == ("", "tool_calls")
    assert call["id"].startswith("call_")
    if choice == "get_weather":
        assert call["name"] == "get_weather"
    key = {"get_weather": "city", "search": "q"}[call["name"]]
    assert list(call["arguments"]) == [key] and isinstance(call["arguments"][key], str)


def test_chat_streaming_prints_the_tool_call_after_the_text(capsys, tools_file):
    argv = ["chat", "sim:sim-small", "Weather in Paris?", "--tools", tools_file]
    assert main([*argv, "--tool-choice", "search"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith('[tool call search({"q":"')
    assert ") id=call_" in lines[-1] and lines[-1].endswith("]")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[{", "is not valid JSON"),
        (b'{"name": "f"}', 'must hold a JSON list of {"name", "description", "parameters"}'),
        (b"[1]", "tool 0: expected an object with name, description, parameters"),
        (b'[{"description": "x"}]', "tool 0: 'name' must be a non-empty string"),
        (b'[{"name": "f", "params": {}}]', "tool 0: unknown key(s) 'params'"),
        (b'[{"name": "f", "parameters": []}]', "'parameters' must be a JSON schema object"),
        (b'[{"name": "f"}, {"name": "f"}]', "tool names must be unique; repeated: ['f']"),
    ],
)
def test_a_bad_tools_file_exits_2_with_one_clear_line(capsys, tmp_path, content, message):
    path = tmp_path / "tools.json"
    path.write_bytes(content)
    assert main(["chat", "sim:sim-small", "hi", "--tools", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"sluice: error: tools file {path}")
    assert message in captured.err and captured.err.count("\n") == 1


def test_tool_choice_problems_exit_2(capsys, tmp_path, tools_file):
    missing = tmp_path / "missing.json"
    assert main(["chat", "sim:sim-small", "hi", "--tools", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"sluice: error: cannot read tools file {missing}")
    assert main(["chat", "sim:sim-small", "hi", "--tool-choice", "auto"]) == 2
    assert capsys.readouterr().err == "sluice: error: --tool-choice needs --tools FILE.json\n"
    argv = ["chat", "sim:sim-small", "hi", "--tools", tools_file, "--tool-choice", "nope"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "sluice: error: sim:sim-small: tool_choice names the tool 'nope', which is not among "
        "the request's tools (get_weather, search)\n"
    )
