"""Checks a command makes before its first call: fail once, early, with one message.

What is wrong for every call of a run (an unknown provider, a missing key, a base URL that is
not a URL, an output that is the input or that cannot be written) is found here and reported
as one :class:`~sluice._errors.ConfigError` (exit status 2) instead of one failure per call.
Nothing here reads an input file's content or writes a byte: a refused command leaves every
file as it was. ``chat``, ``batch`` and ``loadtest`` share these functions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .._checks import http_url_problem
from .._errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .._config import RuntimeConfig

__all__ = [
    "check_base_url",
    "check_batch_paths",
    "check_providers",
    "check_writable",
    "same_file",
]


def check_base_url(url: str, where: str) -> str:
    """``url`` when it is an absolute http(s) URL with a host.

    Raises:
        ConfigError: it is not; the message names ``where`` it came from.
    """
    problem = http_url_problem(url)
    if problem is not None:
        raise ConfigError(f"{where}: base URL {problem}")
    return url


def check_providers(
    config: RuntimeConfig,
    providers: Iterable[str],
    *,
    environ: Mapping[str, str] | None = None,
    every: bool = True,
) -> None:
    """Resolve each provider of ``providers`` the way the runtime will (definition, config,
    key from the config, environment or key store) and check its base URL.

    Args:
        every: True: any provider that cannot be used is an error (every call needs it, as
            with ``--model``). False: only when none of them can be used (each line of a
            batch names its own, and lines of a usable provider still run).

    Raises:
        ConfigError: one message naming each provider's problem.
    """
    from ..providers._registry import resolve_provider

    problems: list[str] = []
    names = sorted(set(providers))
    for name in names:
        try:
            spec = resolve_provider(name, config, environ)
            if spec.base_url is not None:
                check_base_url(spec.base_url, f"provider {name!r}")
        except ConfigError as exc:
            problems.append(str(exc))
    if problems and (every or len(problems) == len(names)):
        raise ConfigError("; ".join(problems))


def same_file(a: Path, b: Path) -> bool:
    """True when ``a`` and ``b`` name one file: the same path, a link to it, or the same
    inode (a hard link). False when either does not exist (then writing one cannot touch
    the other)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def check_writable(path: Path, what: str) -> None:
    """Refuse a ``path`` that cannot be written: a folder, a file without write permission,
    or a parent folder that cannot be created or written. Creates nothing.

    Raises:
        ConfigError: naming ``what`` (``output``, ``summary file``) and the reason.
    """
    if path.is_dir():
        raise ConfigError(f"{what} {path} is a folder; give a file name")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{what} {path} cannot be written (permission denied)")
        return
    folder = path.absolute().parent
    while not folder.exists():  # the nearest folder that exists: the rest would be created
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(f"cannot create the folder for {what} {path}: {folder} is a file")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {path} cannot be created: folder {folder} is not writable")


def check_batch_paths(
    input_file: Path, output: Path, summary: Path, *, resume: bool, overwrite: bool
) -> None:
    """What ``sluice batch`` checks before it reads or writes anything: the input is a file;
    neither the output nor its summary file is the input (by path, link or inode); an output
    that already holds lines is kept unless ``overwrite`` (``resume`` continues it); both
    can be written.

    Raises:
        ConfigError: the first problem found, with what to do about it.
    """
    if resume and overwrite:
        raise ConfigError("--resume keeps the output and --overwrite replaces it: give one")
    if not input_file.is_file():
        problem = "is not a file" if input_file.exists() else "does not exist"
        raise ConfigError(f"input file {input_file} {problem}")
    from .._jobs.batch_guard import input_record_path, lock_path

    beside = (
        ("output", output),
        ("summary file", summary),
        ("input record", Path(input_record_path(str(output)))),
        ("lock file", Path(lock_path(str(output)))),
    )
    for what, path in beside:
        if same_file(input_file, path):
            raise ConfigError(
                f"the {what} {path} is the input file {input_file}: writing it would destroy "
                "the input; give another -o"
            )
    if not resume and not overwrite and output.is_file() and output.stat().st_size > 0:
        raise ConfigError(
            f"output {output} already holds results ({output.stat().st_size} bytes); "
            "--resume continues it, --overwrite replaces it"
        )
    check_writable(output, "output")
    check_writable(summary, "summary file")
