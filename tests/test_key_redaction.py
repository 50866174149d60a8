"""Keys never leave: a server that echoes the request's key gets it masked everywhere.

Some proxies answer a bad key with a 401 whose body quotes the ``Authorization`` header. The
loopback server here does that in every field of its error. Each command runs the installed
``sluice`` with the key from the command line, the config, the environment or the key store;
every output stream and every file the commands wrote are searched for the key.
"""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import orjson
import pytest

from sluice._config import Secret
from sluice._errors import AuthenticationFailed, RateLimited
from sluice._redact import MASK, redact, redact_error, secrets_of

from .helpers import SLUICE, clean_env, request_line

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

KEY = "sk-proj-EchoedBack0123456789abcdefXYZ"
TIMEOUT = 60


class _EchoHandler(BaseHTTPRequestHandler):
    seen: list[str]

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        auth = self.headers.get("authorization", "")
        self.server.seen.append(auth)  # type: ignore[attr-defined]
        body = json.dumps(
            {
                "error": {
                    "message": f"Incorrect API key provided: {auth}. You sent {auth!r}.",
                    "type": f"invalid_key {auth}",
                    "code": auth,
                }
            }
        ).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("x-request-id", f"req {auth}")
        self.end_headers()
        self.wfile.write(body)

    do_POST = _answer
    do_GET = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def echo_server() -> Iterator[tuple[str, list[str]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoHandler)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def run(
    args: list[str], cwd: Path, env: dict[str, str], stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SLUICE, *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_an_echoed_key_appears_in_no_stream_and_no_file(echo_server, tmp_path):
    url, seen = echo_server
    work = tmp_path / "work"
    work.mkdir()
    (work / "in.jsonl").write_text(request_line("a", "x") + "\n" + request_line("b", "x") + "\n")
    (work / "config.toml").write_text(
        f'[providers.echo]\nbase_url = "{url}"\napi_key = "{KEY}"\n'
        f'[providers.fromenv]\nbase_url = "{url}"\napi_key_env = "ECHO_TEST_KEY"\n'
        f'[providers.stored]\nbase_url = "{url}"\n'
        "[retry]\nmax_attempts = 1\nwait_max_attempts = 1\n"
    )
    env = clean_env(tmp_path, ECHO_TEST_KEY=KEY, SLUICE_CONFIG=str(work / "config.toml"))
    stored = run(["keys", "set", "stored"], work, env, stdin=KEY + "\n")
    assert stored.returncode == 0, stored.stderr

    key_flags = ["--base-url", url, "--api-key", KEY]
    commands = [
        ["chat", "openai:gpt-4o-mini", "hi", *key_flags],
        ["chat", "openai:gpt-4o-mini", "hi", "--json", *key_flags],
        ["chat", "openai:gpt-4o-mini", "hi", "--no-stream", *key_flags],
        ["chat", "echo:m", "hi"],
        ["chat", "echo:m", "hi", "--json"],
        ["chat", "fromenv:m", "hi"],
        ["chat", "stored:m", "hi"],
        ["providers", "check", "echo"],
        ["batch", "in.jsonl", "-o", "out-flags.jsonl", "--model", "openai:m", *key_flags],
        ["batch", "in.jsonl", "-o", "out-config.jsonl", "--model", "echo:m"],
        ["batch", "in.jsonl", "-o", "out-env.jsonl", "--model", "fromenv:m", "--ordered"],
        ["batch", "in.jsonl", "-o", "out-store.jsonl", "--model", "stored:m", "--no-stream"],
        [
            "loadtest",
            "--model",
            "openai:m",
            *key_flags,
            "--requests",
            "3",
            "--concurrency",
            "1",
            "--out",
            "loadtest.json",
            "--report",
            "loadtest.html",
        ],
        [
            "loadtest",
            "--model",
            "echo:m",
            "--requests",
            "2",
            "--concurrency",
            "1",
            "--out",
            "lt2.json",
        ],
    ]
    streams = []
    for args in commands:
        done = run(args, work, env)
        text = done.stdout + done.stderr
        assert "Traceback" not in text, (args, text)
        assert done.returncode != 0 or args[0] in ("loadtest", "providers"), (args, text)
        streams.append((args, text))

    # The server did get (and echo) the key from every source, so the masking is what hid it.
    assert seen and all(value == f"Bearer {KEY}" for value in seen)
    for args, text in streams:
        assert KEY not in text, (args, text)
    chat_error = streams[0][1]
    assert f"Bearer {MASK}" in chat_error, chat_error
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "config.toml"]
    names = {p.name for p in written}
    assert {"out-flags.jsonl", "out-store.jsonl", "loadtest.json", "lt2.json"} <= names, names
    for path in written:
        assert KEY.encode() not in path.read_bytes(), path
    line = orjson.loads((work / "out-config.jsonl").read_bytes().splitlines()[0])
    assert line["error"]["code"] == "AuthenticationFailed" or MASK in str(line["error"])


def test_redact_masks_every_secret_whole():
    secrets = secrets_of(Secret(KEY), {"x-custom-token": "Bearer tok-12345", "accept": "json"})
    assert KEY in secrets and "tok-12345" in secrets and "json" not in secrets
    assert redact(f"Bearer {KEY} and {KEY}!", secrets) == f"Bearer {MASK} and {MASK}!"
    assert redact("nothing here", secrets) == "nothing here"


def test_redact_error_keeps_the_class_and_every_other_field():
    error = RateLimited(
        f"slow down {KEY}", status=429, error_type=f"t {KEY}", retry_after=3.0, quota="quota"
    )
    masked = redact_error(error, secrets_of(Secret(KEY)))
    assert type(masked) is RateLimited
    assert (masked.message, masked.error_type) == (f"slow down {MASK}", f"t {MASK}")
    assert (masked.status, masked.retry_after, masked.quota) == (429, 3.0, "quota")
    clean = AuthenticationFailed("bad key", status=401)
    assert redact_error(clean, secrets_of(Secret(KEY))) is clean
    assert redact_error(error, ()) is error
