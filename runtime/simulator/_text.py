"""Deterministic reply text and token counting. Pure: no trio, no sockets, no clock.

The simulator's one token rule: a token is a run of non-whitespace characters together with the
whitespace before it (:func:`count_tokens`). Prompts are counted by it, and generated replies
are sequences of words, each word one token, with a leading space on every token but the
first, so joining the tokens gives the reply text and counting the text by the same rule gives
back the reply's token count. JSON text (tool definitions, tool arguments, structured output)
is counted and streamed in :func:`split_fragments` pieces instead. Load generators that count
words (sluice loadtest; aiperf or GuideLLM with a whitespace tokenizer) therefore agree with
the usage the simulator reports, and a synthetic prompt of N words is N prompt tokens. Nothing
uses Python's ``hash()``, so results are stable across processes.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re

__all__ = [
    "WORDS",
    "count_tokens",
    "derive_seed",
    "generate_tokens",
    "split_fragments",
    "split_words",
]

_VOCABULARY = """
river stone lantern harbor meadow signal orbit canvas thread market garden bridge window
engine valley copper ember summit cedar falcon marble rhythm circuit beacon compass ledger
voyage quartz willow anchor cobalt prairie tunnel pillar glacier orchard parcel ribbon
saddle tangent vector kernel packet buffer socket stream channel latency token budget
quota lattice cluster replica shard kettle pepper walnut velvet thunder breeze harvest
island mosaic puzzle shadow silver timber violet wander gather follow measure balance
carry settle listen travel quiet steady bright gentle swift early simple careful honest
patient curious modest ready calm clear open light small large rapid
"""

WORDS: tuple[str, ...] = tuple(_VOCABULARY.split())
"""The vocabulary generated replies draw from."""

_SENTENCE_MIN = 5
_SENTENCE_MAX = 12


def derive_seed(*parts: bytes | str | int) -> int:
    """A 64-bit integer derived from ``parts`` with BLAKE2b (stable across runs and machines)."""
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        if isinstance(part, int):
            part = str(part)
        if isinstance(part, str):
            part = part.encode()
        h.update(len(part).to_bytes(4, "little"))
        h.update(part)
    return int.from_bytes(h.digest(), "little")


@functools.lru_cache(maxsize=1024)
def generate_tokens(seed: int, digest: bytes, count: int) -> tuple[str, ...]:
    """``count`` tokens of sentence-like text determined by ``seed`` and ``digest`` alone.

    Sentences start with a capital and end with a full stop; the reply may stop mid-sentence
    when ``count`` runs out. ``"".join(tokens)`` is the text. Results are cached, so a
    benchmark that repeats one request pays for generation once.
    """
    rng = random.Random(derive_seed(seed, digest))
    tokens: list[str] = []
    left_in_sentence = 0
    for _ in range(count):
        word = rng.choice(WORDS)
        if left_in_sentence == 0:
            word = word.capitalize()
            left_in_sentence = rng.randint(_SENTENCE_MIN, _SENTENCE_MAX)
        left_in_sentence -= 1
        if left_in_sentence == 0:
            word += "."
        tokens.append(f" {word}" if tokens else word)
    return tuple(tokens)


_WORDISH = re.compile(r"\s*\S+")
_FRAGMENT = re.compile(r"\w+|\s+|[^\w\s]+")


def count_tokens(text: str) -> int:
    """Tokens of ``text`` by the simulator's rule (see the module docstring): its runs of
    non-whitespace characters."""
    return len(_WORDISH.findall(text))


def split_words(text: str) -> tuple[str, ...]:
    """Split ``text`` into tokens of one word each, leading whitespace attached.

    ``"".join(split_words(t)) == t`` except for trailing whitespace, which is dropped.
    """
    return tuple(_WORDISH.findall(text))


def split_fragments(text: str) -> tuple[str, ...]:
    """Split JSON text into the pieces a model would stream it in.

    Runs of word characters, of whitespace and of punctuation each form one fragment, as in
    OpenAI's own streams (``{"`` | ``country`` | ``":"`` | ``UK`` | ``"}``).
    ``"".join(split_fragments(t)) == t`` always.
    """
    return tuple(_FRAGMENT.findall(text))
