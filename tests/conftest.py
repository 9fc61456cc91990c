"""Shared fixtures. One Ray session for the whole run (starting Ray costs seconds); unit tests never use it.

``make test`` runs every test in one pytest-xdist run (``--dist loadgroup``): the tests that
use the shared Ray session are put in one group, ``ray``, so that they all run in one worker
and one session, in collection order; every other test (the unit tests, the in-process
``local`` variants, the tests that start ``troupe serve`` as a process of its own) runs
beside them in the other workers. A test is in the ``ray`` group when it asks for
``ray_session`` (directly or through a fixture) or is parametrized with a placement; a test
that starts the shared session without being in the group fails at setup, so a wrong
grouping shows instead of starting a second session.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

RAY_GROUP = "ray"
# The deployments' placements (tests/e2e/conftest.py's PLACEMENTS): a test parametrized with
# one reaches its app through ``troupe_apps``, which needs the shared session.
_PLACEMENT_PARAMS = frozenset({"replica", "pooled", "dedicated"})


def _uses_shared_ray(item: pytest.Item) -> bool:
    if "ray_session" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(
        isinstance(value, str) and value in _PLACEMENT_PARAMS for value in callspec.params.values()
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _uses_shared_ray(item):
            item.add_marker(pytest.mark.xdist_group(RAY_GROUP))


def _ray_started() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _in_ray_group(item: pytest.Item) -> bool:
    return any(mark.args == (RAY_GROUP,) for mark in item.iter_markers("xdist_group"))


def _refuse_a_second_session(item: pytest.Item, before: bool) -> None:
    if not before and _ray_started() and not _in_ray_group(item):
        pytest.fail(
            f"{item.nodeid} started Ray but is not in the {RAY_GROUP!r} xdist group: "
            "make it ask for ray_session (tests/conftest.py groups the tests by that)"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    before = _ray_started()
    result = yield
    _refuse_a_second_session(item, before)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    before = _ray_started()
    result = yield
    _refuse_a_second_session(item, before)
    return result


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray

    # Shut down only what this fixture started; never `ray stop`.
    started = not ray.is_initialized()
    if started:
        # Serve apps deployed in this session serve HTTP from their replicas, as `troupe serve`
        # runs them (direct ingress); Serve's proxy still runs, on its own port, for the tests
        # of the proxy path. Set before ray.init: the processes Ray starts inherit it.
        from troupe.serve.deployment import direct_ingress_env, free_port_range

        os.environ.update(direct_ingress_env(free_port_range(16), 16))
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()
