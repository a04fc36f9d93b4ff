"""Choosing among candidate builds by prediction, confirmed by measurement (backend-agnostic).

priors.py: what the benchmarks showed wins, per precision, model kind, size and CPU (evidence per row).
elimination.py: when a candidate's measured latency is clearly behind the leader's.
search.py: the loop over build(candidate) and measure(built) callables, fast or thorough, in a budget.
"""
