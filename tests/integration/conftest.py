"""Fixtures of the tests that run on real containers."""

import os

import pytest

from ready_cluster import Cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """Three nodes, set up once for the session (setup.yml takes minutes on a fresh node); under
    pytest-xdist the workers' clusters start from the first one's set-up nodes."""
    # pytest-xdist's workers keep their temporary directories side by side, in one of the session's;
    # one worker alone has no one to share its nodes with (the commit would be wasted).
    shared = (tmp_path_factory.getbasetemp().parent
              if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 else None)
    ready = Cluster(tmp_path_factory.mktemp("cluster"), shared)
    ready.up()
    yield ready
    ready.down()
