"""The actors: one private module per actor (the tasks that own state, time and I/O).

Nothing here is public API: ``sluice.open_runtime`` starts and wires them. Their messages are
in ``sluice._mail``; how they fit together is in docs/architecture.md.
"""

__all__: list[str] = []
