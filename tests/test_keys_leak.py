"""A key never shows in any output: failing ``sluice chat`` runs (a closed port, a 401 from the
simulator over loopback) with a known key from the environment, the command line and the key
store; everything they print, log records at DEBUG included, is searched for it."""

import logging
import socket
import subprocess
import sys

import httpx
import orjson
import pytest

import sluice
from sluice._config import ProviderConfig, RetryConfig, RuntimeConfig, Secret
from sluice._errors import CallError, SluiceError
from sluice.providers._keys import KeyStore

from .helpers import sim_process

KEY = "sk-LEAKCHECK-7d1f0c9a2b4e6f8a0c2e4a6b8d0f1e3c"
PIECES = (KEY, KEY[3:], KEY[-16:], KEY[:20])
"""The key and long pieces of it: none may appear anywhere."""
TIMEOUT = 60

# Runs the CLI with every log record of every logger printed to stderr.
WRAPPER = """
import logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                    format="LOG %(name)s %(levelname)s %(message)s")
from sluice._cli import main
sys.exit(main(sys.argv[1:]))
"""


def assert_no_key(*texts: str) -> None:
    for text in texts:
        for piece in PIECES:
            assert piece not in text, f"key material found in output:\n{text}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def env(tmp_path):
    """A clean environment for the CLI: own platform directories, one attempt per call."""
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "OPENAI_"))}
    base.update(
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        SLUICE_LEDGER_DB="off",
        SLUICE_RETRY__MAX_ATTEMPTS="1",
    )
    return base


@pytest.fixture
def simulator():
    """A simulator subprocess over loopback; yields its base URL."""
    with sim_process() as url:
        yield url


def run_chat(env, *args):
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, "chat", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        check=False,
    )
    return proc


@pytest.mark.parametrize("as_json", [False, True])
def test_closed_port_with_a_key_from_the_environment(env, as_json):
    env["OPENAI_API_KEY"] = KEY
    url = f"http://127.0.0.1:{closed_port()}/v1"
    proc = run_chat(env, "openai:gpt-4o", "hi", "--base-url", url, *(["--json"] if as_json else []))
    assert proc.returncode == 1, proc.stderr
    assert "LOG sluice.providers._registry DEBUG provider openai" in proc.stderr  # logs captured
    if as_json:
        assert orjson.loads(proc.stdout)["error"]["type"] == "ConnectionFailed"
        assert "key from env" in proc.stderr
    else:
        assert "ConnectionFailed" in proc.stderr or "connect" in proc.stderr
    assert_no_key(proc.stdout, proc.stderr)


def write_config(tmp_path, url, **extra):
    entry = {"base_url": url, "headers": {"x-sim-fault": "401"}, **extra}
    path = tmp_path / "sluice.toml"
    lines = ["[providers.deepseek]"]
    for key, value in entry.items():
        if isinstance(value, dict):
            inner = ", ".join(f'"{k}" = "{v}"' for k, v in value.items())
            lines.append(f"{key} = {{ {inner} }}")
        else:
            lines.append(f'{key} = "{value}"')
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("as_json", [False, True])
def test_401_from_the_simulator_with_a_key_on_the_command_line(env, tmp_path, simulator, as_json):
    env["SLUICE_CONFIG"] = str(write_config(tmp_path, simulator))
    flags = ["--api-key", KEY, *(["--json"] if as_json else [])]
    proc = run_chat(env, "deepseek:deepseek-chat", "hi", *flags)
    assert proc.returncode == 1, proc.stderr
    assert "key from config" in proc.stderr
    if as_json:
        error = orjson.loads(proc.stdout)["error"]
        assert error["status"] == 401
    else:
        assert "401" in proc.stderr or "API key" in proc.stderr
    assert_no_key(proc.stdout, proc.stderr)


@pytest.mark.parametrize("as_json", [False, True])
def test_401_from_the_simulator_with_a_key_from_the_store(env, tmp_path, simulator, as_json):
    store = KeyStore(
        tmp_path / "config" / "sluice" / "keys.enc", tmp_path / "data" / "sluice" / "master.key", {}
    )
    store.set("deepseek", KEY)
    env["SLUICE_CONFIG"] = str(write_config(tmp_path, simulator))
    proc = run_chat(env, "deepseek:deepseek-chat", "hi", *(["--json"] if as_json else []))
    assert proc.returncode == 1, proc.stderr
    assert "key from store" in proc.stderr
    assert_no_key(proc.stdout, proc.stderr)
    for path in (store.path, store.master_key_path):
        assert_no_key(path.read_text())


def test_providers_commands_never_print_the_key(env, tmp_path, simulator):
    env["SLUICE_CONFIG"] = str(write_config(tmp_path, simulator))
    env["DEEPSEEK_API_KEY"] = KEY
    for args in (
        ["providers", "list"],
        ["providers", "list", "--json"],
        ["providers", "check", "deepseek", "--model", "deepseek-chat", "--json"],
        ["providers", "models", "deepseek"],
        ["keys", "list", "--json"],
    ):
        proc = subprocess.run(
            [sys.executable, "-c", WRAPPER, *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=env,
            check=False,
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        assert_no_key(proc.stdout, proc.stderr)


async def test_in_process_the_key_is_sent_but_never_logged_or_in_the_error(caplog):
    caplog.set_level(logging.DEBUG)
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("authorization"))
        body = {
            "error": {"message": "Incorrect API key provided.", "type": "invalid_request_error"}
        }
        return httpx.Response(401, json=body)

    config = RuntimeConfig(
        providers={"openai": ProviderConfig(api_key=Secret(KEY))},
        retry=RetryConfig(max_attempts=1),
    )
    error = None
    async with sluice.open_runtime(
        config, transport=httpx.MockTransport(handler), environ={}
    ) as rt:
        try:
            await rt.chat("openai:gpt-4o", "hi")
        except SluiceError as exc:
            error = exc
    assert sent == [f"Bearer {KEY}"]
    assert isinstance(error, CallError) and error.status == 401
    records = "\n".join(f"{r.getMessage()} {r.args!r} {r.__dict__!r}" for r in caplog.records)
    assert_no_key(str(error), repr(error), repr(error.__dict__), caplog.text, records, repr(config))
