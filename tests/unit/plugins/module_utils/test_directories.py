"""Directories made and given their attributes, several in one run: the directories module run as
Ansible runs it (a process, its arguments as JSON), on this machine's filesystem."""

import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[4]
MODULE = REPO / "plugins" / "modules" / "directories.py"


def directories(tmp_path, paths, check=False):
    """The module's result, its arguments `paths` (and check mode)."""
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"paths": paths, "_ansible_check_mode": check}}))
    env = dict(os.environ, PYTHONPATH=str(REPO / ".collections"))
    done = subprocess.run([sys.executable, str(MODULE), str(args)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    return json.loads(done.stdout)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_missing_directories_and_their_parents_are_made_with_their_modes_once(tmp_path):
    top, deep = tmp_path / "a", tmp_path / "a" / "b" / "c"
    paths = [{"path": str(top), "mode": "0750"}, {"path": str(deep), "mode": "0700"},
             {"path": str(tmp_path / "board"), "mode": "01777"}]
    result = directories(tmp_path, paths)
    assert result["changed"] and result["changed_paths"] == [str(top), str(deep), str(tmp_path / "board")], result
    assert mode(top) == 0o750 and mode(top / "b") == 0o700 and mode(deep) == 0o700  # a parent made gets the mode
    assert mode(tmp_path / "board") == 0o1777
    again = directories(tmp_path, paths)
    assert not again["changed"] and again["changed_paths"] == [], again


def test_a_symbolic_mode_changes_only_what_it_names(tmp_path):
    local = tmp_path / ".local"
    local.mkdir(mode=0o755)
    os.chmod(local, 0o500)
    result = directories(tmp_path, [{"path": str(local), "mode": "u+rwx"}])
    assert result["changed"] and mode(local) == 0o700, result
    assert not directories(tmp_path, [{"path": str(local), "mode": "u+rwx"}])["changed"]


def test_check_mode_says_what_would_change_and_changes_nothing(tmp_path):
    existing = tmp_path / "existing"
    existing.mkdir()
    os.chmod(existing, 0o755)
    result = directories(tmp_path, [{"path": str(tmp_path / "new"), "mode": "0700"},
                                    {"path": str(existing), "mode": "0700"}], check=True)
    assert result["changed_paths"] == [str(tmp_path / "new"), str(existing)], result
    assert not (tmp_path / "new").exists() and mode(existing) == 0o755


def test_the_owner_asked_for_is_given_to_the_directory_and_the_parents_made(tmp_path):
    # As root, as the tests run (Docker needs it): the owner is another account.
    nobody = pwd.getpwnam("nobody")
    deep = tmp_path / "home" / "work"
    result = directories(tmp_path, [{"path": str(deep), "owner": "nobody", "mode": "0750"}])
    assert result["changed"], result
    assert os.stat(deep).st_uid == nobody.pw_uid and os.stat(deep.parent).st_uid == nobody.pw_uid
    os.chown(deep, 0, 0)
    assert directories(tmp_path, [{"path": str(deep), "owner": "nobody"}])["changed_paths"] == [str(deep)]
    assert os.stat(deep).st_uid == nobody.pw_uid


def test_a_file_in_the_way_is_named_and_nothing_after_it_is_made(tmp_path):
    (tmp_path / "taken").write_text("a user's file\n")
    result = directories(tmp_path, [{"path": str(tmp_path / "taken")}, {"path": str(tmp_path / "after")}])
    assert result.get("failed") and f"{tmp_path / 'taken'} exists and is not a directory" in result["msg"], result
    assert (tmp_path / "taken").read_text() == "a user's file\n" and not (tmp_path / "after").exists()


def test_a_link_root_made_in_a_directory_of_roots_is_followed(tmp_path):
    # tmp_path: root's, 0700, as /home is: a link there only root could have made.
    target = tmp_path / "target"
    target.mkdir(mode=0o755)
    os.chmod(target, 0o755)
    (tmp_path / "link").symlink_to(target)
    result = directories(tmp_path, [{"path": str(tmp_path / "link"), "mode": "0700"}])
    assert result["changed"] and mode(target) == 0o700 and (tmp_path / "link").is_symlink(), result


def account_home(tmp_path):
    """A home of another account (nobody's), as the training account's is to root."""
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, pwd.getpwnam("nobody").pw_uid, -1)
    return home


def plant(link, target):
    """A link the account made: its owner the account's."""
    link.symlink_to(target)
    os.lchown(link, pwd.getpwnam("nobody").pw_uid, -1)


def test_a_link_an_account_planted_to_a_directory_of_roots_is_refused_and_left(tmp_path):
    home, roots = account_home(tmp_path), tmp_path / "roots"
    roots.mkdir(mode=0o755)
    os.chmod(roots, 0o755)
    plant(home / ".local", roots)
    result = directories(tmp_path, [{"path": str(home / ".local"), "owner": "nobody", "mode": "u+rwx"},
                                    {"path": str(home / ".local" / "state"), "owner": "nobody"},
                                    {"path": str(tmp_path / "after")}])
    assert result.get("failed"), result
    assert f"{home / '.local'} is a symbolic link (to {roots})" in result["msg"] and f"rm {home / '.local'}" in result["msg"]
    assert os.stat(roots).st_uid == 0 and mode(roots) == 0o755 and not (roots / "state").exists()
    assert not (tmp_path / "after").exists()


def test_a_dangling_link_an_account_planted_is_refused_and_nothing_made_where_it_points(tmp_path):
    home = account_home(tmp_path)
    (home / ".ansible").mkdir()
    os.chown(home / ".ansible", pwd.getpwnam("nobody").pw_uid, -1)
    plant(home / ".ansible" / "tmp", tmp_path / "etc" / "made" / "here")
    result = directories(tmp_path, [{"path": str(home / ".ansible" / "tmp"), "owner": "nobody", "mode": "0700"}])
    assert result.get("failed") and "is a symbolic link" in result["msg"], result
    assert not (tmp_path / "etc").exists()
    # Check mode refuses it too, before anything would change.
    assert "is a symbolic link" in directories(tmp_path, [{"path": str(home / ".ansible" / "tmp")}], check=True)["msg"]
