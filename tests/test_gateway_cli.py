"""``sluice serve`` and ``sluice keys issue | revoke | issued`` as a user runs them: real
processes over loopback (``--workers 2`` on one port, SIGTERM drains and exits)."""

import json
import os
import signal
import subprocess

import httpx
import pytest

from sluice._cli import main

from .helpers import SLUICE


def _serve(*flags, env=None):
    proc = subprocess.Popen(
        [SLUICE, "serve", "--port", "0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    banner = proc.stdout.readline()
    if "listening on " not in banner:
        proc.kill()
        raise AssertionError(banner + proc.stdout.read())
    return proc, banner.split("listening on ")[1].split()[0]


def test_keys_issue_issued_revoke(tmp_path, capsys):
    path = tmp_path / "keys.json"
    code = main(
        [
            "keys",
            "issue",
            "team-a",
            "--rpm",
            "60",
            "--budget",
            "5",
            "--keys-file",
            str(path),
            "--json",
        ]
    )
    assert code == 0
    issued = json.loads(capsys.readouterr().out)
    assert issued["name"] == "team-a" and issued["rpm"] == 60 and issued["budget_usd"] == 5.0
    token = issued["key"]
    assert token.startswith("sk-sluice-") and token not in path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert main(["keys", "issue", "team-a", "--keys-file", str(path)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["keys", "issued", "--keys-file", str(path)]) == 0
    listing = capsys.readouterr().out
    assert "team-a" in listing and "live" in listing and "rpm 60" in listing
    assert main(["keys", "revoke", "team-a", "--keys-file", str(path)]) == 0
    assert main(["keys", "issued", "--keys-file", str(path), "--json"]) == 0
    capsys.readouterr()
    assert main(["keys", "revoke", "nobody", "--keys-file", str(path)]) == 2
    assert "no key named 'nobody'" in capsys.readouterr().err


def test_serve_with_a_key_file_then_sigterm_drains_and_exits(tmp_path, capsys):
    path = tmp_path / "keys.json"
    assert main(["keys", "issue", "svc", "--keys-file", str(path), "--json"]) == 0
    token = json.loads(capsys.readouterr().out)["key"]
    body = {"model": "sim:sim-small", "messages": [{"role": "user", "content": "hi"}]}
    proc, url = _serve("--keys-file", str(path), "--no-metrics")
    try:
        assert httpx.get(f"{url}/metrics", timeout=20).status_code == 404
        reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=20)
        assert reply.status_code == 401
        assert reply.json()["error"]["code"] == "invalid_api_key"
        reply = httpx.post(
            f"{url}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {token}"},
            timeout=20,
        )
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert "Traceback" not in out


def test_two_workers_share_one_port():
    proc, url = _serve("--workers", "2", "--no-auth")
    try:
        pids = set()
        for _ in range(64):
            with httpx.Client() as client:  # a new connection each time
                pids.add(client.get(f"{url}/health").json()["pid"])
            if len(pids) == 2:
                break
        assert len(pids) == 2
        with httpx.Client(base_url=url, timeout=20) as client:
            reply = client.post(
                "/v1/chat/completions",
                json={"model": "sim:sim-small", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert reply.status_code == 200
            # Each worker serves its own process's registry, its own /health counted in it.
            scraped = client.get("/metrics")
            assert scraped.status_code == 200
            assert 'sluice_gateway_requests_total{route="/health",status="200"}' in scraped.text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_serve_refuses_bad_settings(capsys):
    assert main(["serve", "--workers", "0"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err
    assert main(["serve", "--alias", "nonsense"]) == 2
    assert "NAME=provider:model" in capsys.readouterr().err
    assert main(["serve", "--models", " , "]) == 2
    assert "--models: name at least one model" in capsys.readouterr().err


def test_serve_models_refuses_every_other_model_with_404():
    proc, url = _serve(
        "--no-auth", "--models", "sim:sim-small,fast", "--alias", "fast=sim:sim-small"
    )
    try:
        with httpx.Client(base_url=url, timeout=20) as client:
            for model in ("sim:sim-small", "fast"):
                reply = client.post(
                    "/v1/chat/completions",
                    json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
                )
                assert reply.status_code == 200, reply.text
            reply = client.post(
                "/v1/chat/completions",
                json={"model": "sim:m-1", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert reply.status_code == 404
            assert reply.json()["error"]["code"] == "model_not_found"
            reply = client.post(
                "/v1/messages",
                headers={"anthropic-version": "2023-06-01"},
                json={
                    "model": "sim:m-1",
                    "max_tokens": 8,
                    "messages": [{"role": "user", "content": "hi"}],
                },
            )
            assert reply.status_code == 404
            assert reply.json()["error"]["type"] == "not_found_error"
            assert "m-1" not in client.get("/metrics").text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out


def test_sigterm_lets_a_stream_in_flight_finish(tmp_path):
    from .helpers import sim_process

    with sim_process("--tps", "20", "--output-tokens", "30") as sim_url:
        config = tmp_path / "config.json"
        config.write_text(
            json.dumps(
                {
                    "ledger": {"persist": False},
                    "providers": {"slow": {"protocol": "openai", "base_url": sim_url}},
                }
            )
        )
        proc, url = _serve("--no-auth", "--config", str(config))
        body = {
            "model": "slow:sim-small",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        try:
            with (
                httpx.Client(timeout=20) as client,
                client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply,
            ):
                lines = reply.iter_lines()
                assert next(line for line in lines if line.startswith("data: "))
                proc.send_signal(signal.SIGTERM)
                rest = list(lines)
            assert [line for line in rest if line][-1] == "data: [DONE]"
            with pytest.raises(httpx.HTTPError):
                httpx.get(f"{url}/health", timeout=5)
        finally:
            try:  # the one SIGTERM drains and exits; a second one would kill at once
                out, _ = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
        assert proc.returncode == 0, out
