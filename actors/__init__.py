"""The actors: one module per actor."""
