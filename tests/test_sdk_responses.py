"""The official ``openai`` SDK's Responses API through a real ``sluice serve`` process (a virtual
key from a key file) in front of a real ``sluice sim`` process: plain, streamed (the SDK's own
accumulator rebuilds the response from the events) and with a function tool, to an
OpenAI-protocol upstream and to an Anthropic-protocol one; and the simulator's own
``/v1/responses`` reached by the SDK directly. Loopback, real clock, behaviour only."""

import json
import signal
import subprocess

import openai
import pytest

from .helpers import SLUICE, sim_process

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather",
    "parameters": SCHEMA,
}
QUESTION = "What is the weather in Paris?"
OPENAI_BACKEND = "simoa:sim-small"
ANTHROPIC_BACKEND = "simant:sim-small"
BACKENDS = [OPENAI_BACKEND, ANTHROPIC_BACKEND]


@pytest.fixture(scope="module")
def simulator():
    """``sluice sim`` on a free loopback port; yields its ``/v1`` URL."""
    with sim_process() as url:
        yield url


@pytest.fixture(scope="module")
def gateway(simulator, tmp_path_factory):
    """``sluice serve`` on a free port in front of the simulator, over the OpenAI and the
    Anthropic protocol; yields (its URL, a virtual key)."""
    folder = tmp_path_factory.mktemp("gateway")
    config = folder / "config.toml"
    config.write_text(
        "[ledger]\npersist = false\n"
        f'[providers.simoa]\nprotocol = "openai"\nbase_url = "{simulator}"\napi_key = "sk-up"\n'
        f'[providers.simant]\nprotocol = "anthropic"\nbase_url = "{simulator}"\n'
        'api_key = "sk-up"\n'
    )
    keys = folder / "keys.json"
    capture = folder / "issued.json"
    with capture.open("w") as out:
        code = subprocess.run(
            [SLUICE, "keys", "issue", "sdk", "--keys-file", str(keys), "--json"],
            stdout=out,
            check=False,
        ).returncode
    assert code == 0
    token = json.loads(capture.read_text())["key"]
    proc = subprocess.Popen(
        [SLUICE, "serve", "--port", "0", "--config", str(config), "--keys-file", str(keys)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "listening on " in banner, banner + proc.stdout.read()
        yield banner.split("listening on ")[1].split()[0], token
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "Traceback" not in out and token not in out


@pytest.fixture
def client(gateway):
    url, token = gateway
    with openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=20) as c:
        yield c


@pytest.mark.parametrize("model", BACKENDS)
def test_responses_create(client, model):
    reply = client.responses.create(model=model, input=QUESTION, instructions="Be brief.")
    assert reply.object == "response" and reply.status == "completed"
    assert reply.model == model
    assert reply.output_text
    assert reply.instructions == "Be brief."
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0


@pytest.mark.parametrize("model", BACKENDS)
def test_responses_streamed(client, model):
    events = list(client.responses.create(model=model, input=QUESTION, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and events[-1].response.output_text == text
    # The SDK's own accumulator rebuilds the same response from the events.
    with client.responses.stream(model=model, input=QUESTION) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.output_text == "".join(deltas) and final.usage.output_tokens > 0


@pytest.mark.parametrize("model", BACKENDS)
def test_responses_function_tool(client, model):
    reply = client.responses.create(
        model=model, input=QUESTION, tools=[WEATHER], tool_choice="required"
    )
    (call,) = reply.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id
    assert isinstance(json.loads(call.arguments)["city"], str)
    answer = client.responses.create(
        model=model,
        tools=[WEATHER],
        input=[
            {"role": "user", "content": QUESTION},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ],
    )
    assert answer.output_text and answer.output[0].type == "message"
    with client.responses.stream(
        model=model, input=QUESTION, tools=[WEATHER], tool_choice="required"
    ) as stream:
        pieces = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    (item,) = final.output
    assert item.type == "function_call" and item.arguments == "".join(pieces)
    assert "city" in json.loads(item.arguments)


def test_a_wrong_key_and_a_bad_body_are_openai_errors(gateway):
    url, token = gateway
    with (
        openai.OpenAI(base_url=f"{url}/v1", api_key="sk-wrong", max_retries=0) as c,
        pytest.raises(openai.AuthenticationError),
    ):
        c.responses.create(model=OPENAI_BACKEND, input="hi")
    with (
        openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0) as c,
        pytest.raises(openai.BadRequestError) as caught,
    ):
        c.responses.create(model=OPENAI_BACKEND, input="hi", previous_response_id="resp_1")
    assert "previous_response_id" in caught.value.message


def test_the_simulator_serves_the_responses_api_to_the_sdk(simulator):
    with openai.OpenAI(base_url=simulator, api_key="sk-sim", max_retries=0, timeout=20) as c:
        reply = c.responses.create(
            model="sim-small", input=QUESTION, reasoning={"effort": "low", "summary": "auto"}
        )
        with c.responses.stream(
            model="sim-small", input=QUESTION, tools=[WEATHER], tool_choice="required"
        ) as stream:
            final = stream.get_final_response()
    reasoning, message = reply.output
    assert reasoning.type == "reasoning" and reasoning.summary[0].text
    assert message.type == "message" and reply.output_text
    assert reply.usage.output_tokens_details.reasoning_tokens > 0
    (call,) = final.output
    assert call.type == "function_call" and "city" in json.loads(call.arguments)
