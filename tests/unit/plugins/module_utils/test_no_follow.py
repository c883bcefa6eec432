"""_no_follow.py: paths walked from / without following a link another account than root could
have planted, on this machine's filesystem (the tests run as root; `nobody` plays the account)."""

import os
import pwd

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _no_follow as nf

NOBODY = pwd.getpwnam("nobody").pw_uid


def home_of_nobody(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, NOBODY, -1)
    return home


def plant(link, target):
    link.symlink_to(target)
    os.lchown(link, NOBODY, -1)


def test_missing_paths_are_fine_to_check_and_made_where_asked(tmp_path):
    assert nf.refusals([str(tmp_path / "no" / "such")], [str(tmp_path / "no" / "such" / "file")]) == []
    made = []
    fd = nf.open_directory(str(tmp_path / "a" / "b"), lambda parent, name, where: (os.mkdir(name, dir_fd=parent),
                                                                                   made.append(where)))
    os.close(fd)
    assert made == [str(tmp_path / "a"), str(tmp_path / "a" / "b")]


def test_every_kind_of_planted_file_is_refused_and_named(tmp_path):
    home = home_of_nobody(tmp_path)
    ssh = home / ".ssh"
    ssh.mkdir()
    os.chown(ssh, NOBODY, -1)
    roots = tmp_path / "roots_file"
    roots.write_text("root's\n")
    plant(ssh / "authorized_keys", roots)
    plant(ssh / "torchfleet_cluster_ed25519", tmp_path / "missing")
    os.link(roots, ssh / "config")  # a hard link (root made it here: the kernel refuses nobody)
    (ssh / "known_hosts").mkdir()
    plant(home / ".local", tmp_path)
    found = nf.refusals([str(home / ".local" / "state")],
                        [str(ssh / "authorized_keys"), str(ssh / "config"), str(ssh / "torchfleet_*"),
                         str(ssh / "known_hosts")])
    said = {item.path: item.why for item in found}
    assert said[str(home / ".local")].startswith(f"is a symbolic link (to {tmp_path})")
    assert said[str(ssh / "authorized_keys")].startswith(f"is a symbolic link (to {roots})")
    assert said[str(ssh / "torchfleet_cluster_ed25519")].startswith("is a symbolic link")
    assert "hard links" in said[str(ssh / "config")]
    assert said[str(ssh / "known_hosts")] == "is not a regular file"
    assert roots.read_text() == "root's\n"


def test_a_link_root_made_where_only_root_writes_is_followed_and_dot_dot_stays_in_the_walk(tmp_path):
    (tmp_path / "real" / "inner").mkdir(parents=True)
    (tmp_path / "alias").symlink_to("real/inner/..")
    fd = nf.open_directory(str(tmp_path / "alias" / "inner"))
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "real" / "inner"))
    finally:
        os.close(fd)
    # The same link made by root in a directory another account writes is not followed.
    home = home_of_nobody(tmp_path)
    (home / "alias").symlink_to(tmp_path / "real")
    with pytest.raises(nf.LinkRefused, match="is a symbolic link"):
        nf.open_directory(str(home / "alias" / "inner"))


def test_an_environment_root_runs_must_be_where_only_root_writes(tmp_path):
    assert nf.refusals([], [], [str(tmp_path / "envs" / "torchfleet")]) == []  # root's, 0700; missing below
    home = home_of_nobody(tmp_path)
    [refused] = nf.refusals([], [], [str(home / "envs" / "torchfleet")])
    assert refused.path == str(home) and "owner UID 65534" in refused.why and "/opt/torchfleet" in refused.fix
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    [refused] = nf.refusals([], [], [str(shared / "env")])
    assert "mode 0777" in refused.why
    shared.chmod(0o1777)  # sticky, as /tmp: others cannot swap root's directory in it
    assert nf.refusals([], [], [str(shared / "env")]) == []
