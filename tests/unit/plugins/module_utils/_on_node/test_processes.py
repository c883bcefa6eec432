"""processes.py: a run's processes known by their marks (the environment, an Open MPI daemon's
command line), and what the supervisor starts besides the run carries none."""

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import processes


def test_run_id_from_proc_environ_bytes():
    raw = b"PATH=/bin\0TORCHFLEET_RUN_ID=tf-1\0HOME=/root\0"
    assert processes.env_value(raw) == "tf-1"
    assert processes.env_value(b"PATH=/bin\0XTORCHFLEET_RUN_ID=no\0") is None
    assert processes.env_value(b"") is None  # a zombie's environ


def test_an_open_mpi_daemon_is_known_by_its_runs_log_directory():
    argv = [b"/usr/bin/orted", b"--daemonize", b"-mca", b"ess", b"env", b"-mca", b"orte_output_filename",
            b"/home/torchfleet/torchfleet/runs/tf-20261125-164309-2f2f29/ranks", b"-mca", b"orte_tag_output", b"1"]
    assert processes.daemon_run_id(b"\0".join(argv) + b"\0") == "tf-20261125-164309-2f2f29"
    assert processes.daemon_run_id(b"/usr/bin/python3\0-c\0orte_output_filename\0/x/tf-1/ranks\0") is None
    assert processes.daemon_run_id(b"/usr/bin/orted\0--daemonize\0") is None


def test_what_the_supervisor_starts_besides_the_run_carries_none_of_its_marks(monkeypatch):
    pr = processes
    monkeypatch.setenv(pr.RUN_ID_VAR, "tf-1")
    monkeypatch.setenv(pr.SUPERVISOR_VAR, "tf-1")
    monkeypatch.setenv("PATH_KEPT", "yes")
    env = pr.unmarked_env()
    assert pr.RUN_ID_VAR not in env and pr.SUPERVISOR_VAR not in env and env["PATH_KEPT"] == "yes"
