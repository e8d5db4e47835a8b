"""Simulations of a hashcrawl fleet: real coordination code, simulated everything else.

- ``simulations.model``: a Hypothesis state machine of crashes, pauses, joins, leaves,
  cut-offs and Redis restarts, judged after every step (``python -m simulations``).
- ``simulations.fleet``: hundreds of workers, a large crawl and churn, for the figures
  (``python -m simulations.fleet``).

See ``docs/simulation.md``.
"""
