"""The decoders' fast ``TextDelta`` constructor makes exactly what the class makes."""

from __future__ import annotations

import attrs
import pytest

from sluice._events import TextDelta, text_delta


def test_text_delta_equals_the_classs_own_construction() -> None:
    logprobs = {"content": [{"token": "hi", "logprob": -0.1}]}
    made = text_delta("call-1", "hi", logprobs)
    assert type(made) is TextDelta
    assert made == TextDelta("call-1", "hi", logprobs)
    assert text_delta("call-1", "hi") == TextDelta("call-1", "hi")
    assert repr(made) == repr(TextDelta("call-1", "hi", logprobs))
    assert attrs.evolve(made, text="ho") == TextDelta("call-1", "ho", logprobs)


def test_text_delta_sets_every_field_of_the_class() -> None:
    """A field added to TextDelta must be added to text_delta too: this fails until it is."""
    assert [field.name for field in attrs.fields(TextDelta)] == ["call_id", "text", "logprobs"]
    made = text_delta("c", "t")
    assert {field.name: getattr(made, field.name) for field in attrs.fields(TextDelta)} == {
        "call_id": "c",
        "text": "t",
        "logprobs": None,
    }


def test_text_delta_stays_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        text_delta("c", "t").text = "changed"  # type: ignore[misc]
