"""board.py: the run board's entries, their owners and their liveness (real files and processes of
this machine), and the probe shipped with it as one program."""

import json
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import board, probe, source
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.ssh_to_nodes import probe_command

ENTRY = {"run_id": "tf-20261127-010203-abc123", "head": "node0", "nodes": ["node0", "node1"],
         "world_size": 2, "started": "2026-11-27T01:02:03Z"}


def _board(tmp_path):
    path = tmp_path / "board"
    path.mkdir()
    path.chmod(0o1777)  # as setup makes it (mkdir's mode passes through the umask)
    return str(path)


def test_an_entry_counts_while_it_starts_then_only_while_a_process_names_its_run(tmp_path):
    where = _board(tmp_path)
    assert board.announce(ENTRY, where)
    [entry] = board.read_entries(where)
    assert entry["state"] == "starting" and entry["uid"] == os.geteuid() and entry["world_size"] == 2
    later = time.time() + board.STARTING_FOR + 1
    assert board.read_entries(where, now=later) == []  # its start long past, no process: gone
    # A process of the entry's owner naming the run (as torchrun's --log-dir does): running.
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)",
                             f"--log-dir=/runs/{ENTRY['run_id']}/workers/node0"], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"up\n"  # its command line is its own by now (after exec)
        [entry] = board.read_entries(where, now=later)
        assert entry["state"] == "running"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert board.read_entries(where, now=later) == []


def test_only_other_accounts_entries_are_others(tmp_path):
    where = _board(tmp_path)
    board.announce(ENTRY, where)
    assert board.others_alive(where) == []
    assert [entry["run_id"] for entry in board.others_alive(where, uid=os.geteuid() + 1)] == [ENTRY["run_id"]]


def test_an_entry_that_speaks_for_another_account_is_ignored(tmp_path):
    where = _board(tmp_path)
    other = os.geteuid() + 1  # the name says another account; the file is ours
    with open(os.path.join(where, f"{other}.{ENTRY['run_id']}.json"), "w") as handle:
        json.dump(ENTRY, handle)
    os.symlink(os.path.join(where, f"{other}.{ENTRY['run_id']}.json"),
               os.path.join(where, f"{os.geteuid()}.tf-linked.json"))
    with open(os.path.join(where, f"{os.geteuid()}.tf-other-name.json"), "w") as handle:
        json.dump(ENTRY, handle)  # its content names another run than its file name
    assert board.read_entries(where) == []


def test_a_run_id_is_named_whole_never_as_part_of_a_longer_one():
    assert board.names_run("torchrun --rdzv-id=tf-1 x", "tf-1")
    assert board.names_run("python -m _on_node.supervisor /home/a/runs/tf-1", "tf-1")
    assert not board.names_run("torchrun --rdzv-id=tf-10 x", "tf-1")
    assert not board.names_run("vim notes-tf-1.txt", "tf-1")


def test_withdraw_and_the_sweep_remove_only_this_accounts_dead_entries(tmp_path):
    where = _board(tmp_path)
    board.announce(ENTRY, where)
    board.announce(dict(ENTRY, run_id="tf-old"), where)
    old = os.path.join(where, f"{os.geteuid()}.tf-old.json")
    past = time.time() - board.STARTING_FOR - 5
    os.utime(old, (past, past))
    board.sweep_own(where)  # dead, but not a day old: left
    assert len(os.listdir(where)) == 2
    past = time.time() - board.SWEPT_AFTER - 5
    os.utime(old, (past, past))
    board.sweep_own(where)
    assert sorted(os.listdir(where)) == [f"{os.geteuid()}.{ENTRY['run_id']}.json"]
    board.withdraw(ENTRY["run_id"], where)
    assert os.listdir(where) == []


def test_a_node_without_a_board_is_told_apart(tmp_path):
    assert board.announce(ENTRY, str(tmp_path / "missing")) is False
    assert board.read_entries(str(tmp_path / "missing")) == []


def test_the_probe_runs_with_the_board_as_one_program_the_way_ssh_hands_it_to_a_node():
    # What a node runs: `python -S -c PROGRAM`, the request on stdin (ssh_to_nodes.probe_command).
    argv = ["sh", "-c", probe_command(sys.executable)]
    done = subprocess.run(argv, input=json.dumps({"interfaces": True}), capture_output=True, text=True,
                          timeout=60, check=True)
    assert "lo" in json.loads(done.stdout)["interfaces"], done.stderr


def test_an_entry_dated_ten_years_ahead_counts_only_for_its_start(tmp_path):
    # Its owner sets the mtime freely; the birth time, which counts, is when it was written.
    where = _board(tmp_path)
    board.announce(ENTRY, where)
    path = os.path.join(where, f"{os.geteuid()}.{ENTRY['run_id']}.json")
    ahead = time.time() + 10 * 365 * 86400
    os.utime(path, (ahead, ahead))
    assert [entry["state"] for entry in board.read_entries(where)] == ["starting"]
    assert board.read_entries(where, now=time.time() + board.STARTING_FOR + 1) == []
    # A clock that stepped back (the ctime ahead of now) counts as no time at all.
    assert board.read_entries(where, now=time.time() - board.SKEW - 60) == []


def test_of_two_launches_announced_at_once_the_later_yields(tmp_path):
    where = _board(tmp_path)
    board.announce(ENTRY, where)
    time.sleep(0.01)
    board.announce(dict(ENTRY, run_id="tf-later"), where)
    first = board.own_entry(ENTRY["run_id"], where)
    later = board.own_entry("tf-later", where)
    entries = board.read_entries(where)
    by_id = {entry["run_id"]: entry for entry in entries}
    assert [e["run_id"] for e in board.in_the_way([by_id["tf-later"]], first)] == []
    assert [e["run_id"] for e in board.in_the_way([by_id[ENTRY["run_id"]]], later)] == [ENTRY["run_id"]]


def test_a_flood_of_entries_is_read_no_further_and_refuses_its_own_accounts_launch(tmp_path):
    where = _board(tmp_path)
    for number in range(board.PER_ACCOUNT):
        board.announce(dict(ENTRY, run_id=f"tf-flood-{number:03d}"), where)
    assert len(board.read_entries(where)) == board.PER_ACCOUNT
    with open(os.path.join(where, f"{os.geteuid()}.tf-flood-999.json"), "w") as handle:
        json.dump(dict(ENTRY, run_id="tf-flood-999"), handle)
    assert len(board.read_entries(where)) == board.PER_ACCOUNT  # the one beyond is not read
    try:
        board.announce(dict(ENTRY, run_id="tf-one-more"), where)
        raise AssertionError("announced beyond the bound")
    except board.BoardFull as full:
        assert "the most one account may have" in str(full) and "this account's own" in str(full)


NOBODY = pwd.getpwnam("nobody").pw_uid


def _plant(where, name, content, uid=NOBODY):
    """A file another account wrote on the board."""
    path = os.path.join(where, name)
    with open(path, "w") as handle:
        handle.write(content)
    os.chown(path, uid, -1)
    return path


def test_a_nested_or_long_entry_is_skipped_and_named_never_a_crash(tmp_path, monkeypatch):
    where = _board(tmp_path)
    _plant(where, f"{NOBODY}.tf-deep.json", "[" * 60000)
    _plant(where, f"{NOBODY}.tf-big.json", " " * (board.ENTRY_BYTES + 10))
    board.announce(ENTRY, where)
    skipped = []
    assert [entry["run_id"] for entry in board.read_entries(where, skipped=skipped)] == [ENTRY["run_id"]]
    assert board.skipped_phrases(skipped) == [
        f"1 of nobody (not an entry: JSON nested deeper than {board.DEPTH}: {NOBODY}.tf-deep.json)",
        f"1 of nobody (not an entry: longer than {board.ENTRY_BYTES} bytes: {NOBODY}.tf-big.json)"]
    # The probe's answer to another account's launch: nothing in the way, the entries named.
    monkeypatch.setattr(board, "BOARD", where)
    answer = probe.board_answer(dict(ENTRY, run_id="tf-next"), share=False)
    assert answer["announced"] is True and answer["others"] == []
    assert [phrase.split(" (")[0] for phrase in answer["board_skipped"]] == ["1 of nobody", "1 of nobody"]


def test_entries_are_counted_for_the_owner_of_their_file_never_the_uid_of_their_name(tmp_path):
    # Another account names 71 files for this one: they refuse nothing of its, and are named once.
    where = _board(tmp_path)
    for number in range(71):
        _plant(where, f"{os.geteuid()}.-{number}.json", json.dumps(dict(ENTRY, run_id=f"-{number}")))
    assert board.announce(ENTRY, where)
    skipped = []
    assert [entry["run_id"] for entry in board.read_entries(where, skipped=skipped)] == [ENTRY["run_id"]]
    phrases = board.skipped_phrases(skipped)
    assert phrases == ["1 of nobody (beyond the 64 read of one account: 7 more)",
                       f"64 of nobody (its name speaks for another account: {os.geteuid()}.-0.json, "
                       f"{os.geteuid()}.-1.json, ...)"]


def test_a_chmod_refreshes_nothing(tmp_path, monkeypatch):
    # chmod moves the ctime to now; the birth time stays when the entry was written.
    monkeypatch.setattr(board, "STARTING_FOR", 1)
    where = _board(tmp_path)
    board.announce(ENTRY, where)
    time.sleep(1.2)
    os.chmod(os.path.join(where, f"{os.geteuid()}.{ENTRY['run_id']}.json"), 0o600)
    os.chmod(os.path.join(where, f"{os.geteuid()}.{ENTRY['run_id']}.json"), 0o644)
    assert board.read_entries(where) == []


def _as_nobody(code, where, tmp_path):
    """Run board.py's code as nobody (the sticky bit binds it, not root), with the system's Python
    (the venv's lies under root's home), the file alone as a node has it."""
    package = tmp_path / "package"
    package.mkdir(mode=0o755, exist_ok=True)
    (package / "board.py").write_text(source("board"))
    program = f"import sys; sys.path.insert(0, {str(package)!r}); import board; where = {where!r}; " + code
    done = subprocess.run(["/usr/bin/python3", "-S", "-c", program], capture_output=True, text=True, timeout=60,
                          user=NOBODY, group=NOBODY, check=False, cwd="/", env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def open_tmp():
    """A directory every account can reach (tmp_path's parents are root's, 0700)."""
    base = tempfile.mkdtemp(prefix="tf-board-", dir="/tmp")
    os.chmod(base, 0o755)
    yield pathlib.Path(base)
    shutil.rmtree(base)


def test_names_another_account_took_first_never_stop_an_announce(open_tmp):
    assert os.geteuid() == 0, "the tests run as root (Docker needs it), to act as two accounts"
    tmp_path = open_tmp
    where = _board(tmp_path)
    daemon = pwd.getpwnam("daemon").pw_uid
    # The old names of the entry written beside, and the entry itself, taken by another account.
    _plant(where, f"{NOBODY}.{ENTRY['run_id']}.json", "{}", uid=daemon)
    said = _as_nobody(f"print(board.announce({ENTRY!r}, where)); print(board.own_entry({ENTRY['run_id']!r}, where)"
                      f" is not None)", where, tmp_path)
    assert said.split() == ["True", "True"]
    mine = [name for name in os.listdir(where) if os.lstat(os.path.join(where, name)).st_uid == NOBODY]
    assert len(mine) == 1 and mine[0].startswith(f"{NOBODY}.{ENTRY['run_id']}~")
    _as_nobody(f"board.withdraw({ENTRY['run_id']!r}, where)", where, tmp_path)
    assert [name for name in os.listdir(where) if os.lstat(os.path.join(where, name)).st_uid == NOBODY] == []


def test_the_name_an_entry_is_written_under_first_cannot_be_guessed(tmp_path, monkeypatch):
    where = _board(tmp_path)
    # The name a pid-based scheme would use, taken first by another account.
    _plant(where, f"{os.geteuid()}.{ENTRY['run_id']}.json.{os.getpid()}.new", "")
    made = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: (made.append(path), real_open(path, *a, **k))[1])
    assert board.announce(ENTRY, where)
    board.announce(ENTRY, where)
    partials = [path for path in made if path.endswith(".new")]
    assert len(partials) == 2 and partials[0] != partials[1]
