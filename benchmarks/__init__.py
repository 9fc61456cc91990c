"""Troupe's latency and throughput benchmarks: scenarios, a runner, peers side by side.

Run ``python -m benchmarks.run`` (see :mod:`benchmarks.run`); ``benchmarks/README.md`` maps the
modules. The load generator itself is ``troupe bench`` (:mod:`troupe.bench`).
"""
