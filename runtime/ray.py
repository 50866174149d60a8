"""sluice inside Ray Data: ``Dataset.map_batches`` with quotas exact across the cluster.

::

    import ray, sluice
    from sluice.ray import Calls, Caller, skip_done

    calls = Calls(model="openai:gpt-4o-mini", prompt="question", max_wait=3600)
    ds = ray.data.read_parquet("questions/")
    ds = skip_done(ds, "answers/", calls)          # a rerun calls only what is missing
    ds = ds.map_batches(
        Caller,
        fn_constructor_kwargs={"calls": calls, "config": "sluice.toml", "job": "questions-1"},
        compute=ray.data.ActorPoolStrategy(size=4),   # concurrency=4 before Ray 2.51
        num_cpus=0.25,
        batch_size=256,
        batch_format="pyarrow",
    )
    ds.write_parquet("answers/")

Each of the pool's actors opens one sluice runtime (the blocking door,
:mod:`sluice.sync`: Ray's threads never see trio) on the config it is given. With the config's
``store = "redis://..."`` every quota, cooldown, learned limit and budget is shared by all
actors on all nodes, and each actor's ledger rows go to that Redis too (``sluice ledger
--store redis://...`` shows the cluster's spend), all under one job.

A batch of rows becomes concurrent calls (at most ``max_in_flight`` per actor) and comes back
as the same rows with the columns of :data:`OUTPUT_COLUMNS` added: the row's key, the answer's
text, finish reason, tool calls (JSON text), token counts, cost and ``provider:model``, or the
error's type and message. A failed call is a row with an error, never a failed task (unless
``Calls.raise_errors``).

Exactly once: Ray Data commits a task's output block only when the task returns, and an actor
returns a batch only once every one of its rows has an outcome. When an actor dies mid-batch,
Ray restarts it and runs the whole batch again there: the calls of the lost attempt may be
made (and paid) again, but its rows never reach the output, so each row is written once. Ray's
file sinks name each file from the write and the task's index, so a retried write replaces
its own file rather than adding one. Across runs, :func:`skip_done` drops the rows whose keys
the output already holds.

This module needs Ray: ``pip install 'sluice[ray]'``. ``import sluice`` never loads it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import attrs

from ._config import RuntimeConfig, load_config_file
from ._ledger.setup import price_table
from ._row_calls import OUTPUT_COLUMNS, BadRow, Calls, ColumnsBuilder
from .sync import open_runtime

try:
    import pyarrow as pa
    import ray
except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
    raise ImportError(
        f"sluice.ray needs Ray Data ({exc.name} is missing): pip install 'sluice[ray]'"
    ) from None

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ray.data import Dataset

    from ._messages import ChatRequest
    from .sync import Runtime

__all__ = ["OUTPUT_COLUMNS", "BadRow", "Caller", "Calls", "done_keys", "skip_done"]

log = logging.getLogger("sluice.ray")

_TYPES: dict[str, Any] = {
    "input_tokens": pa.int64(),
    "output_tokens": pa.int64(),
    "cost_usd": pa.float64(),
}
"""Arrow types of the output columns; the others are strings. Fixed, so that every block of
the output has one schema whatever its rows ended as."""


def _load(config: RuntimeConfig | str | os.PathLike[str] | None) -> RuntimeConfig:
    if isinstance(config, RuntimeConfig):
        return config
    if config is None:
        named = os.environ.get("SLUICE_CONFIG")
        return load_config_file(named) if named else RuntimeConfig()
    return load_config_file(config)


def _ray_job() -> str:
    return f"ray-{ray.get_runtime_context().get_job_id()}"


def _as_table(batch: Any) -> pa.Table:
    """A batch of any of Ray Data's formats as an Arrow table (``pyarrow`` costs nothing)."""
    if isinstance(batch, pa.Table):
        return batch
    if type(batch).__module__.startswith("pandas"):
        return pa.Table.from_pandas(batch, preserve_index=False)
    columns = {}
    for name, values in batch.items():
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            columns[name] = pa.array(values.tolist())
    return pa.table(columns)


class Caller:
    """A callable class for ``Dataset.map_batches``: each actor runs one sluice runtime.

    Args:
        calls: how each row becomes a call (:class:`Calls`).
        config: a :class:`~sluice.RuntimeConfig`, or the path of a config file every node can
            read; None: ``$SLUICE_CONFIG``, else defaults. Give it ``store = "redis://..."``
            so that the actors share their quotas; without one each actor has its own.
        max_in_flight: calls one actor runs at once. Rows of one batch are its calls, so a
            ``batch_size`` of several times this keeps the actor busy.
        job: the ledger's job for every call of every actor (give the same one to a rerun);
            None: the config's ``ledger.job``, else ``ray-`` and Ray's job id.
        progress_interval: seconds between an actor's progress lines on stderr (Ray shows
            them on the driver); None: no lines.

    Raises:
        ConfigError: the config cannot be read, or names an unknown provider.
    """

    def __init__(
        self,
        calls: Calls,
        config: RuntimeConfig | str | os.PathLike[str] | None = None,
        *,
        max_in_flight: int = 64,
        job: str | None = None,
        progress_interval: float | None = 30.0,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        loaded = _load(config)
        job = job or loaded.ledger.job or _ray_job()
        loaded = attrs.evolve(loaded, ledger=attrs.evolve(loaded.ledger, job=job))
        if loaded.store is None and not os.environ.get("SLUICE_STORE"):
            log.warning(
                "sluice.ray: the config names no store, so each actor keeps its own quotas; "
                "set store = 'redis://...' to share them across the cluster"
            )
        self.calls = calls
        self.job = job
        self._max_in_flight = max_in_flight
        self._prices = price_table(loaded.ledger)
        self._progress = _Progress(job, progress_interval)
        self._door = open_runtime(loaded)
        self._rt: Runtime | None = self._door.__enter__()

    def __call__(self, batch: Any) -> pa.Table:
        """The batch's rows with the output columns added, in the same order."""
        rt = self._rt
        if rt is None:
            raise RuntimeError("this Caller was closed")
        table = _as_table(batch)
        names = self.calls.output_names()
        taken = sorted(set(names) & set(table.column_names))
        if taken:
            raise ValueError(
                f"the input already has columns {taken}: give Calls a prefix= for the output's"
            )
        columns = self._run(rt, table)
        self._progress.batch_done(columns, rt)
        if self.calls.raise_errors and columns.first_error is not None:
            raise columns.first_error
        for name, values in zip(names, OUTPUT_COLUMNS, strict=True):
            table = table.append_column(
                name, pa.array(columns.columns[values], _TYPES.get(values, pa.string()))
            )
        return table

    def _run(self, rt: Runtime, table: pa.Table) -> ColumnsBuilder:
        used = [c for c in self.calls.columns_used() if c in table.column_names]
        rows = table.select(used).to_pylist() if used else [{}] * table.num_rows
        built = [self.calls.build(row) for row in rows]
        columns = ColumnsBuilder([key for key, _ in built], self._prices)
        requests: list[ChatRequest] = []
        where: list[int] = []
        for i, (_, request) in enumerate(built):
            if isinstance(request, BadRow):
                columns.fail(i, request)
            else:
                requests.append(request)
                where.append(i)
        if requests:
            with rt.map(requests, max_in_flight=self._max_in_flight) as outcomes:
                for outcome in outcomes:
                    index = where[outcome.index]
                    if outcome.result is not None:
                        columns.answer(index, outcome.result)
                    else:
                        assert outcome.error is not None
                        columns.fail(index, outcome.error)
        # The batch's usage is in the ledger store before its rows can be written: an actor
        # killed later loses nothing the ledger should hold.
        rt.ledger.flush()
        return columns

    def close(self) -> None:
        """Stop the actor's runtime (calls still running finish first)."""
        if self._rt is not None:
            self._rt = None
            self._door.__exit__(None, None, None)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at interpreter exit the runtime's thread may be gone already
            pass


class _Progress:
    """One actor's running counts, and a line on stderr every ``interval`` seconds."""

    def __init__(self, job: str, interval: float | None) -> None:
        self.job = job
        self.interval = interval
        self.done = self.failed = self.tokens = self.cost_micros = 0
        self._last = time.monotonic()

    def batch_done(self, columns: ColumnsBuilder, rt: Runtime) -> None:
        self.done += columns.answered
        self.failed += columns.failed
        self.tokens += columns.tokens
        self.cost_micros += columns.cost_micros
        now = time.monotonic()
        if self.interval is not None and now - self._last >= self.interval:
            self._last = now
            print(self.line(), file=sys.stderr, flush=True)

    def line(self) -> str:
        return (
            f"sluice job {self.job}: this actor {self.done} done, {self.failed} failed, "
            f"{self.tokens} tokens, ${self.cost_micros / 1e6:.6f}"
        )


# ---- resuming ----------------------------------------------------------------------------


def _files(path: str) -> Iterator[tuple[Any, str]]:
    from pyarrow import fs

    filesystem, root = (
        fs.FileSystem.from_uri(path)
        if "://" in path
        else (fs.LocalFileSystem(), os.path.abspath(path))
    )
    info = filesystem.get_file_info(root)
    if info.type == fs.FileType.NotFound:
        return
    if info.type == fs.FileType.File:
        yield filesystem, root
        return
    for found in filesystem.get_file_info(fs.FileSelector(root, recursive=True)):
        name = found.base_name
        if found.type == fs.FileType.File and not name.startswith((".", "_")):
            yield filesystem, found.path


def _keys_of(filesystem: Any, path: str, column: str) -> list[str]:
    import orjson
    import pyarrow.parquet as pq

    if path.endswith(".parquet"):
        table = pq.read_table(path, columns=[column], filesystem=filesystem)
        return [k for k in table.column(column).to_pylist() if k is not None]
    with filesystem.open_input_stream(path) as f:
        data = f.read()
    keys = []
    for line in data.splitlines():
        if line.strip():
            keys.append(orjson.loads(line)[column])
    return keys


def done_keys(output_path: str | os.PathLike[str], prefix: str = "") -> set[str]:
    """The row keys the output at ``output_path`` holds: a folder (or one file) of Parquet
    (``.parquet``) or JSON lines files, as ``write_parquet`` and ``write_json`` leave them;
    a missing path holds none.

    A file that cannot be read (one cut short when a job was stopped as it wrote) is left out
    with a warning naming it, so its rows are done again: delete it before reading the output.
    """
    column = prefix + "sluice_key"
    keys: set[str] = set()
    for filesystem, path in _files(os.fspath(output_path)):
        try:
            keys.update(_keys_of(filesystem, path, column))
        except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
            log.warning("sluice.ray: %s left out (its rows will be done again): %s", path, exc)
    return keys


class _DropDone:
    """``map_batches`` function keeping the rows whose keys are not in ``done``."""

    def __init__(self, done: set[str], calls: Calls) -> None:
        self.done = frozenset(done)
        self.calls = calls

    def __call__(self, batch: pa.Table) -> pa.Table:
        used = [c for c in self.calls.columns_used() if c in batch.column_names]
        rows = batch.select(used).to_pylist() if used else [{}] * batch.num_rows
        keep = [self.calls.build(row)[0] not in self.done for row in rows]
        return batch.filter(pa.array(keep, pa.bool_()))


def skip_done(ds: Dataset, output_path: str | os.PathLike[str], calls: Calls) -> Dataset:
    """``ds`` without the rows whose keys (under ``calls``) the output at ``output_path``
    already holds (see :func:`done_keys`): a rerun after a crash or a cancelled job then
    calls only what is missing. Rows that ended as errors count as done."""
    done = done_keys(output_path, calls.prefix)
    if not done:
        return ds
    return ds.map_batches(_DropDone(done, calls), batch_format="pyarrow", zero_copy_batch=True)
