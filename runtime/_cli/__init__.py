"""The ``sluice`` command line: ``chat``, ``batch`` and ``sim``.

``main(argv)`` runs one command line and returns its exit status; the ``sluice`` console
script calls it. Commands are plain async functions run on trio by cyclopts.
"""

from ._app import app as app
from ._app import console_main as console_main
from ._app import main as main

__all__ = ["app", "console_main", "main"]
