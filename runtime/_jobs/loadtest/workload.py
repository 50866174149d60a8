"""What each request asks: prompts from a JSONL dataset, a trace or synthetic ones, output
lengths, shared prefixes and multi-turn sessions. Pure apart from reading the dataset file.

Lengths are token counts drawn from a :class:`Lengths` distribution. A synthetic prompt of
``n`` tokens is ``n`` words from a fixed vocabulary (one word is about one token for English
BPE tokenizers, and exactly one by the simulator's token rule, so against it requested lengths
are exact). ``max_tokens`` is the drawn output length, so a server that honours it produces
exactly that many tokens. Every draw comes from the run's seeded generator, so the same seed
gives the same requests.

Shared prefixes (prompt-cache studies): with ``prefix_ratio`` r and ``prefix_pool`` k, each
synthetic prompt of ``n`` tokens starts with the first ``round(r n)`` words of one of k fixed
prefixes (chosen at random per request), then the request's own words; the length stays
``n``. Trace entries (Mooncake's format: ``input_length``, ``output_length``, ``hash_ids``) set
each request's lengths, and their prompts are built from one fixed block of
:data:`TRACE_BLOCK_TOKENS` words per hash id, so requests that share hash ids share exactly
those prefix blocks, as in the traced workload. Multi-turn sessions (``turns`` > 1): each turn
sends the whole conversation so far (every earlier user message and the reply the server
actually gave) and a new user message of ``input_tokens``.
"""

from __future__ import annotations

import functools
import math
import random
from typing import TYPE_CHECKING, Any, Literal

import attrs
import orjson

from ..._errors import ConfigError
from ..._messages import Message

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "TRACE_BLOCK_TOKENS",
    "DatasetPrompt",
    "Lengths",
    "TraceEntry",
    "WorkItem",
    "Workload",
    "load_dataset",
    "parse_lengths",
]

TRACE_BLOCK_TOKENS = 512
"""Tokens per hash id in a Mooncake-style trace (the block size its hash ids stand for)."""

_ROLES = ("system", "user", "assistant")
_VOCABULARY = """
the quick brown fox jumps over a lazy dog while seven bright lanterns glow across river stone
harbor meadow signal orbit canvas thread market garden bridge window engine valley copper
ember summit cedar falcon marble rhythm circuit beacon compass
"""
_WORDS = tuple(_VOCABULARY.split())


@attrs.frozen
class Lengths:
    """A distribution of token counts: ``fixed`` (always ``a``), ``uniform`` (``a`` to ``b``
    inclusive) or ``normal`` (mean ``a``, deviation ``b``, rounded, at least ``minimum``)."""

    kind: Literal["fixed", "uniform", "normal"]
    a: float
    b: float = 0.0
    minimum: int = 1

    def draw(self, rng: random.Random) -> int:
        match self.kind:
            case "fixed":
                return max(self.minimum, round(self.a))
            case "uniform":
                return max(self.minimum, rng.randint(round(self.a), round(self.b)))
            case "normal":
                return max(self.minimum, round(rng.gauss(self.a, self.b)))

    @property
    def mean(self) -> float:
        """The mean, ignoring the floor at ``minimum``."""
        return (self.a + self.b) / 2 if self.kind == "uniform" else self.a

    def describe(self) -> str:
        match self.kind:
            case "fixed":
                return f"{self.a:g}"
            case "uniform":
                return f"uniform:{self.a:g}:{self.b:g}"
            case "normal":
                return f"normal:{self.a:g}:{self.b:g}"


def parse_lengths(text: str, *, flag: str = "lengths", minimum: int = 1) -> Lengths:
    """``N``, ``fixed:N``, ``uniform:LO:HI`` or ``normal:MEAN:STD`` as a :class:`Lengths`.

    Raises:
        ConfigError: any other form, or numbers that make no distribution.
    """
    parts = text.strip().split(":")
    forms = "N, fixed:N, uniform:LO:HI or normal:MEAN:STD"
    try:
        numbers = [float(p) for p in parts[1:]] if len(parts) > 1 else [float(parts[0])]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected {forms}") from None
    kind = parts[0] if len(parts) > 1 else "fixed"
    if any(not math.isfinite(n) or n < 0 for n in numbers):
        raise ConfigError(f"{flag} {text!r}: numbers must be finite and not negative")
    if kind == "fixed" and len(numbers) == 1:
        if numbers[0] < minimum:
            raise ConfigError(f"{flag} {text!r}: must be at least {minimum}")
        return Lengths("fixed", numbers[0], minimum=minimum)
    if kind == "uniform" and len(numbers) == 2:
        low, high = numbers
        if low > high or high < minimum:
            raise ConfigError(f"{flag} {text!r}: need LO <= HI and HI >= {minimum}")
        return Lengths("uniform", low, high, minimum=minimum)
    if kind == "normal" and len(numbers) == 2:
        return Lengths("normal", numbers[0], numbers[1], minimum=minimum)
    raise ConfigError(f"{flag} {text!r}: expected {forms}")


@attrs.frozen
class DatasetPrompt:
    """One dataset entry: the messages (as the runtime accepts them) and, if the entry says,
    how many output tokens to ask for."""

    messages: str | tuple[Message, ...]
    output_tokens: int | None = None


def load_dataset(path: Path) -> tuple[DatasetPrompt, ...]:
    """The prompts of a JSONL file, one object per line with ``prompt`` (a string) or
    ``messages`` (OpenAI-style ``[{"role", "content"}]``), and optionally ``output_tokens``
    (or ``max_tokens``). Blank lines are skipped.

    Raises:
        ConfigError: the file cannot be read, a line is not such an object, or it is empty.
    """
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read dataset {path}: {exc.strerror}") from None
    prompts: list[DatasetPrompt] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"dataset {path}, line {number}"
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON ({exc})") from None
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: expected an object with 'prompt' or 'messages'")
        prompts.append(_dataset_prompt(item, where))
    if not prompts:
        raise ConfigError(f"dataset {path} holds no prompts")
    return tuple(prompts)


def _dataset_prompt(item: dict[str, Any], where: str) -> DatasetPrompt:
    output = item.get("output_tokens", item.get("max_tokens"))
    if output is not None and (isinstance(output, bool) or not isinstance(output, int)):
        raise ConfigError(f"{where}: 'output_tokens' must be an integer")
    if output is not None and output < 1:
        raise ConfigError(f"{where}: 'output_tokens' must be at least 1")
    prompt = item.get("prompt")
    if isinstance(prompt, str) and prompt:
        return DatasetPrompt(prompt, output)
    messages = item.get("messages")
    if (
        isinstance(messages, list)
        and messages
        and all(
            isinstance(m, dict) and m.get("role") in _ROLES and isinstance(m.get("content"), str)
            for m in messages
        )
    ):
        return DatasetPrompt(tuple(Message(m["role"], m["content"]) for m in messages), output)
    raise ConfigError(
        f"{where}: expected a non-empty 'prompt' string or a 'messages' list of "
        '{"role": "system"|"user"|"assistant", "content": "text"} objects'
    )


@attrs.frozen
class TraceEntry:
    """One request of a trace: when it arrives (seconds from the first) and, when the trace
    says, its lengths and prefix-block hash ids."""

    offset: float
    input_length: int | None = None
    output_length: int | None = None
    hash_ids: tuple[int, ...] = ()


@attrs.frozen
class WorkItem:
    """One request to send: its messages, the input length asked for (None for a dataset
    prompt) and ``max_tokens``."""

    messages: str | tuple[Message, ...]
    input_tokens: int | None
    max_tokens: int


@attrs.frozen
class Workload:
    """Where prompts come from and how long replies should be.

    With a ``dataset``, prompts are taken in order (cycling), each entry's own output length
    winning over ``output_tokens``; otherwise prompts are synthetic, ``input_tokens`` long.
    """

    input_tokens: Lengths = Lengths("fixed", 128)
    output_tokens: Lengths = Lengths("fixed", 128)
    dataset: tuple[DatasetPrompt, ...] = ()
    dataset_name: str | None = None
    prefix_ratio: float = attrs.field(
        default=0.0, validator=[attrs.validators.ge(0), attrs.validators.le(1)]
    )
    """Share of each synthetic prompt taken from a shared prefix (see the module docstring)."""
    prefix_pool: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    """How many distinct shared prefixes there are."""
    trace: tuple[TraceEntry, ...] = ()
    """Per-request lengths and hash ids from a trace, by request index (cycling)."""
    turns: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    """Turns per session; above 1 each session is a growing conversation."""
    seed: int = 0
    """Seeds the shared prefixes and the trace blocks (fixed for the workload, not drawn)."""

    def item(self, index: int, rng: random.Random, *, prefix: str = "r") -> WorkItem:
        """Request ``index`` of the run (draws from ``rng``: call in request order).
        Synthetic prompts start with ``prefix`` and the index (warm-ups use ``w``)."""
        if self.dataset:
            entry = self.dataset[index % len(self.dataset)]
            output = entry.output_tokens or self.output_tokens.draw(rng)
            return WorkItem(entry.messages, None, output)
        traced = self.trace[index % len(self.trace)] if self.trace else None
        if traced is not None and traced.input_length is not None:
            size = traced.input_length
        else:
            size = self.input_tokens.draw(rng)
        if traced is not None and traced.output_length is not None:
            output = traced.output_length
        else:
            output = self.output_tokens.draw(rng)
        if traced is not None and traced.hash_ids:
            text = traced_prompt(size, traced.hash_ids, index, prefix, self.seed)
            return WorkItem(text, size, output)
        shared: tuple[str, ...] = ()
        if self.prefix_ratio:
            pool = rng.randrange(self.prefix_pool)
            shared = shared_prefix(self.seed, pool, round(size * self.prefix_ratio))
        return WorkItem(synthetic_prompt(size, rng, index, prefix, shared), size, output)

    def describe(self) -> dict[str, Any]:
        source = "synthetic"
        if self.dataset:
            source = f"dataset {self.dataset_name}"
        elif self.trace:
            source = f"trace ({len(self.trace)} entries)"
        return {
            "source": source,
            "dataset_prompts": len(self.dataset),
            "input_tokens": None if self.dataset else self.input_tokens.describe(),
            "output_tokens": self.output_tokens.describe(),
            "prefix_ratio": self.prefix_ratio,
            "prefix_pool": self.prefix_pool,
            "turns": self.turns,
        }


def synthetic_prompt(
    tokens: int,
    rng: random.Random,
    index: int,
    prefix: str = "r",
    shared: tuple[str, ...] = (),
) -> str:
    """``tokens`` words: the ``shared`` prefix words, then the request's index (so no two
    prompts share more than ``shared`` and a server's prefix cache cannot make the run look
    faster than real traffic), then words drawn from a small vocabulary."""
    words = [*shared[:tokens], f"{prefix}{index}"]
    words += draw_words(rng, max(tokens - len(words), 0))
    return " ".join(words[: max(tokens, 1)])


_SPAN = len(_WORDS)
_BITS = _SPAN.bit_length()


def draw_words(rng: random.Random, count: int) -> list[str]:
    """``count`` words of the vocabulary, each ``rng.choice(_WORDS)`` and the same ones: for
    a plain :class:`random.Random` its draw is written out (``choice`` takes the top bits of
    one ``getrandbits`` per word, drawing again while they are past the vocabulary), which
    spares the two Python calls ``choice`` makes per word of every prompt."""
    if type(rng) is not random.Random:  # a subclass may draw otherwise: ask it
        return [rng.choice(_WORDS) for _ in range(count)]
    words, span, bits, getrandbits = _WORDS, _SPAN, _BITS, rng.getrandbits
    drawn: list[str] = []
    add = drawn.append
    for _ in range(count):
        at = getrandbits(bits)
        while at >= span:
            at = getrandbits(bits)
        add(words[at])
    return drawn


@functools.lru_cache(maxsize=256)
def shared_prefix(seed: int, pool: int, tokens: int) -> tuple[str, ...]:
    """The first ``tokens`` words of shared prefix number ``pool`` (fixed by ``seed``)."""
    rng = random.Random(f"{seed}:prefix:{pool}")
    return (f"p{pool}", *(rng.choice(_WORDS) for _ in range(max(tokens - 1, 0))))[:tokens]


def traced_prompt(
    tokens: int, hash_ids: tuple[int, ...], index: int, prefix: str, seed: int
) -> str:
    """A prompt of ``tokens`` words made of the blocks of ``hash_ids`` (each
    :data:`TRACE_BLOCK_TOKENS` fixed words, the same for the same id), then the request's
    own words if the blocks run out. The request's index is not added: requests that share
    every block share the whole prompt, as the trace says they do."""
    words: list[str] = []
    for block in hash_ids:
        if len(words) >= tokens:
            break
        words += shared_prefix(seed, block, TRACE_BLOCK_TOKENS)
    if len(words) < tokens:
        words.append(f"{prefix}{index}")
        rng = random.Random(f"{seed}:trace-tail:{index}")
        words += draw_words(rng, tokens - len(words))
    return " ".join(words[: max(tokens, 1)])
