"""Load the recorded provider traffic in ``tests/conformance_data`` (see its INDEX.md).

The corpus is a copy of real provider wire traffic kept inside the repository, so every wire test
runs in any clone; ``SLUICE_CONFORMANCE_DIR`` points elsewhere (a newer corpus). A missing
manifest is an error at collection, never a silent skip.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import attrs
import orjson


def conformance_dir() -> Path:
    """Where the corpus is: ``$SLUICE_CONFORMANCE_DIR``, else ``tests/conformance_data``."""
    override = os.environ.get("SLUICE_CONFORMANCE_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent / "conformance_data"


@attrs.frozen
class Case:
    """One recorded exchange: a reply body, and where recorded, its headers and request."""

    provider: str
    name: str
    kind: str
    files: tuple[Path, ...]

    @property
    def id(self) -> str:
        return f"{self.provider}/{self.name}"

    def _file(self, suffix: str) -> Path | None:
        for path in self.files:
            if path.name == self.name + suffix:
                return path
        return None

    @property
    def body_path(self) -> Path | None:
        """The reply body: ``.sse``, ``.ndjson`` or ``.json``; None for a request-only case."""
        for suffix in (".sse", ".ndjson", ".json"):
            path = self._file(suffix)
            if path is not None:
                return path
        return None

    @property
    def streamed(self) -> bool:
        path = self.body_path
        return path is not None and path.suffix in (".sse", ".ndjson")

    def body(self) -> bytes:
        path = self.body_path
        assert path is not None, f"{self.id} has no reply body"
        return path.read_bytes()

    def status(self) -> int:
        """The recorded HTTP status; 200 when the case has no headers file."""
        path = self._file(".headers.json")
        if path is None:
            return 200
        return int(orjson.loads(path.read_bytes())["status"])

    def headers(self) -> dict[str, str]:
        """The reply headers, names lower-cased (a repeated name keeps its last value)."""
        path = self._file(".headers.json")
        if path is None:
            return {}
        return {k.lower(): v for k, v in orjson.loads(path.read_bytes())["headers"]}

    def request(self) -> Any | None:
        """The recorded request body as parsed JSON, or None."""
        path = self._file(".request.json")
        return None if path is None else orjson.loads(path.read_bytes())


def load_cases(
    providers: frozenset[str] | None = None, *, manifest_name: str = "manifest.json"
) -> list[Case]:
    """The cases of ``manifest.json``, in its order, optionally only for ``providers``.

    ``manifest_name`` names another manifest under the corpus root whose file paths are
    relative to that root (``openai_responses/manifest.json``, the Responses API's cases).
    """
    root = conformance_dir()
    manifest = root / manifest_name
    if not manifest.is_file():
        raise FileNotFoundError(f"no conformance manifest at {manifest}")
    cases = []
    for entry in orjson.loads(manifest.read_bytes())["cases"]:
        if providers is not None and entry["provider"] not in providers:
            continue
        files = tuple(root / f["path"] for f in entry["files"])
        cases.append(Case(entry["provider"], entry["case"], entry["kind"], files))
    return cases


def chunked(body: bytes, size: int) -> list[bytes]:
    """``body`` cut into pieces of ``size`` bytes (the last may be shorter)."""
    return [body[i : i + size] for i in range(0, len(body), size)]


def splits(case: Case, body: bytes) -> dict[str, list[bytes]]:
    """The ways every recorded body is fed to a decoder; all must give the same result."""
    rng = random.Random(case.name)
    cuts = sorted(rng.sample(range(1, len(body)), min(40, len(body) - 1)))
    return {
        "whole": [body],
        "1 byte": chunked(body, 1),
        "7 bytes": chunked(body, 7),
        "random": [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)],
    }


def decode_pieces(codec: Any, pieces: list[bytes]) -> tuple[Any, list[Any], int]:
    """Feed ``pieces`` to a fresh stream decoder of ``codec`` (events carry ``call-1``):
    the output, every event, and the chunks it counted."""
    decoder = codec.stream_decoder("call-1")
    events: list[Any] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    return decoder.finish(), events, decoder.chunks_seen
