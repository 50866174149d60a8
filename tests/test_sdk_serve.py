"""The official ``openai`` SDK through a real ``sluice serve`` process (a virtual key from a key
file) in front of a real ``sluice sim`` process: the Responses API plain, streamed (the SDK's
own accumulator rebuilds the response from the events) and with a function tool, to an
OpenAI-protocol upstream and to an Anthropic-protocol one; embeddings of one input, of 100,
with ``dimensions``, in base64 (the SDK's default) and in floats; and the simulator's own
``/v1/responses`` reached by the SDK directly. Loopback, real clock, behaviour only."""

import base64
import json
import signal
import struct
import subprocess
from typing import Any

import openai
import pytest

from .helpers import SLUICE, sim_process

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER: Any = {  # the SDK's FunctionToolParam, which also wants 'strict'
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
    assert reply.usage is not None and reply.usage.output_tokens_details.reasoning_tokens > 0
    (call,) = final.output
    assert call.type == "function_call" and "city" in json.loads(call.arguments)


EMBEDDER = "simoa:text-embedding-3-small"


def test_embeddings_one_and_a_hundred_inputs(client):
    one = client.embeddings.create(model=EMBEDDER, input="hello world")
    (item,) = one.data
    assert item.index == 0 and len(item.embedding) > 1
    assert all(isinstance(x, float) for x in item.embedding)
    assert one.usage.prompt_tokens == 2 and one.model == EMBEDDER
    texts = [f"chunk {i} of a corpus" for i in range(100)]
    many = client.embeddings.create(model=EMBEDDER, input=texts)
    assert [d.index for d in many.data] == list(range(100))
    assert len({tuple(d.embedding) for d in many.data}) == 100
    again = client.embeddings.create(model=EMBEDDER, input=[texts[42]])
    assert again.data[0].embedding == many.data[42].embedding


def test_embeddings_dimensions_and_encodings(client):
    small = client.embeddings.create(model=EMBEDDER, input=["a", "b"], dimensions=8)
    assert [len(d.embedding) for d in small.data] == [8, 8]
    # The SDK asks for base64 by default and decodes it; asked for floats, it gets floats.
    floats = client.embeddings.create(
        model=EMBEDDER, input=["a", "b"], dimensions=8, encoding_format="float"
    )
    for packed, plain in zip(small.data, floats.data, strict=True):
        assert packed.embedding == list(struct.unpack("<8f", struct.pack("<8f", *plain.embedding)))
    raw = client.embeddings.with_raw_response.create(
        model=EMBEDDER, input="a", dimensions=4, encoding_format="base64"
    )
    wire = json.loads(raw.http_response.text)["data"][0]["embedding"]
    assert isinstance(wire, str) and len(base64.b64decode(wire)) == 16


def test_token_ids_are_refused_clearly(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model=EMBEDDER, input=[[1, 2, 3]])
    assert "token-id arrays are not supported" in caught.value.message
