"""Fixtures of the tests that run on real containers."""

import pytest

from ready_cluster import Cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """Three nodes, set up once for the session (setup.yml takes minutes on a fresh node)."""
    ready = Cluster(tmp_path_factory.mktemp("cluster"))
    ready.up()
    yield ready
    ready.down()
