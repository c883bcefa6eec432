"""Fixtures of the tests that run on real containers, and the order their files run in."""

import json
import os
import statistics
from collections import defaultdict
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling

from ready_cluster import Cluster

# The last measured run of these tests (bench/cluster_tests_cpu.py): each test's seconds.
MEASURED = Path(__file__).resolve().parents[2] / "bench" / "results" / "cluster_tests_cpu"


def file_seconds():
    """{test file: seconds its tests took in the measured run}, less the seconds a test spent
    setting up its worker's cluster."""
    seconds = {}
    for record in sorted(MEASURED.glob("*.jsonl")):
        for line in record.read_text().splitlines():
            test = json.loads(line)
            name = Path(test["test"].split("::")[0]).name
            seconds[name] = seconds.get(name, 0.0) + test["wall"] - test["cluster_up"]
    return seconds


def pytest_collection_modifyitems(items):
    """The longest files first: pytest-xdist's workers take whole files (--dist loadfile, with
    --no-loadscope-reorder) in this order as each finishes one, so they run out of work
    together, not one alone for a long last file. A file not measured yet counts as a middling one."""
    seconds = file_seconds()
    default = statistics.median(seconds.values()) if seconds else 0.0
    items.sort(key=lambda item: -seconds.get(item.path.name, default))  # stable: a file's own order stays
    # The files that never use the session's cluster go second: while the first worker sets that
    # cluster up from scratch, the other runs them instead of waiting to start its own from it.
    without = {item.path for item in items} - {item.path for item in items if uses_the_session_cluster(item)}
    first = next((item.path for item in items if item.path not in without), None)
    items.sort(key=lambda item: 0 if item.path == first else 1 if item.path in without else 2)


class FileWhenOneTestIsLeft(LoadFileScheduling):
    """--dist loadfile, but a worker is handed its next file when its current one has one test left
    to run, not two: a worker commits to a file that long before it is free, and with tests of a
    minute or two the other worker could have taken it sooner. One is the least: a worker runs a
    test only once it knows the next (for the fixtures' teardown)."""

    def _reschedule(self, node):  # pytest-xdist's own, as of 3.8: its heuristic is `> 2`
        if not node.shutting_down and self.workqueue and self._pending_of(self.assigned_work[node]) > 1:
            return
        super()._reschedule(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`make unit`'s --dist loadfile; any other mode keeps pytest-xdist's scheduler (None)."""
    return FileWhenOneTestIsLeft(config, log) if config.getvalue("dist") == "loadfile" else None


# {test file: [seconds of its tests' phases, the workers that ran them]}, for the summary below.
FILE_SECONDS: dict = defaultdict(lambda: [0.0, set()])


def pytest_runtest_logreport(report):
    """Every test phase's seconds, on the controller (pytest-xdist passes the workers' reports on)."""
    spent = FILE_SECONDS[report.nodeid.split("::")[0]]
    spent[0] += report.duration
    worker = getattr(getattr(report, "node", None), "gateway", None)
    if worker is not None:
        spent[1].add(worker.id)


def pytest_terminal_summary(terminalreporter):
    """Seconds a file took on its worker, the longest first: how the workers' loads compare, and
    what to measure again when the order of the files above runs one worker alone at the end."""
    if not FILE_SECONDS:
        return
    terminalreporter.section("seconds per test file")
    for name, (seconds, workers) in sorted(FILE_SECONDS.items(), key=lambda entry: -entry[1][0]):
        terminalreporter.write_line(f"{seconds:8.1f}  {','.join(sorted(workers)) or '-':8}  {name}")


def uses_the_session_cluster(item):
    """Whether a test asks for the `cluster` fixture below (not a module's own of that name), or for
    test_cli_cluster's `target`, which asks for it unless TORCHFLEET_TEST_INVENTORY names another."""
    fixtures = item._fixtureinfo.name2fixturedefs  # pylint: disable=protected-access
    # The last definition of a name is the one the test gets.
    return "target" in fixtures or any(not definition.baseid.endswith(".py")
                                       for definition in fixtures.get("cluster", ())[-1:])


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
