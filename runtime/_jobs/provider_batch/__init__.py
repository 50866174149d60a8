"""The provider lane of ``sluice batch``: lines sent through a provider's own Batch API.

:mod:`.backend` is the boundary between the lane's engine (planning, the state file, polling,
merging results into the output) and the wire clients of each provider's batch API.
"""
