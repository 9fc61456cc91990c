"""Shared fixtures. One Ray session for the whole run (starting Ray costs seconds); unit tests never use it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray

    # Shut down only what this fixture started; never `ray stop`.
    started = not ray.is_initialized()
    if started:
        # Serve apps deployed in this session serve HTTP from their replicas, as `troupe serve`
        # runs them (direct ingress); Serve's proxy still runs, on its own port, for the tests
        # of the proxy path. And Ray runs as `troupe serve` starts it (LOCAL_RAY_ENV: no task
        # events, Serve's throughput mode, its control loop once a second): what is tested is
        # what runs, and `make test` took 16 s less (10 min 51 s against 11 min 7 s, 2026-12-05).
        # Set before ray.init: the processes Ray starts inherit it.
        from troupe.serve.deployment import LOCAL_RAY_ENV, direct_ingress_env, free_port_range

        os.environ.update({**LOCAL_RAY_ENV, **direct_ingress_env(free_port_range(16), 16)})
        # Ray starts a worker per CPU for the first driver, ahead of its first task. Watched
        # through an integration run, those two stayed `ray::IDLE` to the end while the tests'
        # actors and tasks started workers of their own: now workers start when one is needed.
        os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()
