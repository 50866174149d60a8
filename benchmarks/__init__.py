"""Benchmarks for sluice. Run them as modules from the repository root, e.g.
``python -m benchmarks.overhead --sim``; see ``benchmarks/README.md``."""
