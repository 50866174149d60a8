"""Admission arithmetic for the RateLimiter: windows, costs, learned limits, adaptive slots.

Everything here is pure: time is passed in as ``now``, randomness as an ``rng``. The actor in
``sluice.actors._rate_limiter`` holds the state and does the waiting.
"""
