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
    shared.chmod(0o1777)  # sticky, as /tmp: others cannot swap root's directory in it...
    (shared / "made").mkdir()
    assert nf.refusals([], [], [str(shared / "made" / "env")]) == []


def test_a_missing_path_in_a_directory_others_write_is_refused_even_sticky(tmp_path):
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    # ...but what is not there yet, anyone may make first: setup would then run what they put there.
    [refused] = nf.refusals([], [], [str(shared / "env" / "bin")])
    assert refused.path == str(shared / "env")
    assert refused.why == (f"does not exist yet, in {shared}, which other accounts can write (mode 1777): "
                           f"one of them could make it first")
    assert f"mkdir -m 0755 {shared / 'env'}" in refused.fix and "/opt/torchfleet" in refused.fix
    # Made first by another account: its owner is named.
    (shared / "env").mkdir()
    os.chown(shared / "env", NOBODY, -1)
    [refused] = nf.refusals([], [], [str(shared / "env" / "bin")])
    assert refused.path == str(shared / "env") and "owner UID 65534" in refused.why
    # Made by root, as the fix says: fine, and what is missing below it is root's to make.
    os.chown(shared / "env", 0, -1)
    (shared / "env").chmod(0o755)
    assert nf.refusals([], [], [str(shared / "env" / "bin")]) == []
    # Group-writable, not sticky, is no better.
    group = tmp_path / "group"
    group.mkdir()
    group.chmod(0o775)
    [refused] = nf.refusals([], [], [str(group / "env")])
    assert refused.path == str(group) and "mode 0775" in refused.why


def test_a_link_to_a_missing_path_in_a_shared_directory_is_refused(tmp_path):
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    roots = tmp_path / "roots"
    roots.mkdir()
    (roots / "env").symlink_to(shared / "env")  # root's link, in root's directory: followed
    [refused] = nf.refusals([], [], [str(roots / "env" / "bin")])
    assert refused.path == str(shared / "env") and "could make it first" in refused.why
    # Dangling into a directory only root writes: root makes the target and what is below it.
    (roots / "later").symlink_to(roots / "missing")
    assert nf.refusals([], [], [str(roots / "later" / "bin" / "python")]) == []


def test_a_relative_path_is_refused_for_root_to_run():
    [refused] = nf.refusals([], [], ["opt/openmpi/bin/mpirun"])
    assert refused.path == "opt/openmpi/bin/mpirun" and refused.why == "is not an absolute path"


def test_a_prefix_root_runs_from_must_be_root_s_down_to_the_program(tmp_path):
    prefix = tmp_path / "opt" / "openmpi"
    (prefix / "bin").mkdir(parents=True)
    mpirun = prefix / "bin" / "mpirun"
    mpirun.write_text("#!/bin/sh\n")
    mpirun.chmod(0o755)
    assert nf.refusals([], [], [str(mpirun)]) == []
    # Another account's bin, or a program it can write, in a prefix of root's: refused, named.
    os.chown(prefix / "bin", NOBODY, -1)
    [refused] = nf.refusals([], [], [str(mpirun)])
    assert refused.path == str(prefix / "bin") and "owner UID 65534" in refused.why
    assert f"chown root:root {prefix / 'bin'}" in refused.fix
    os.chown(prefix / "bin", 0, -1)
    mpirun.chmod(0o775)
    [refused] = nf.refusals([], [], [str(mpirun)])
    assert refused.path == str(mpirun) and "mode 0775" in refused.why
    # mpirun as Open MPI installs it: a link of root's, in root's bin, to orterun.
    mpirun.unlink()
    (prefix / "bin" / "orterun").write_text("#!/bin/sh\n")
    mpirun.symlink_to("orterun")
    assert nf.refusals([], [], [str(mpirun)]) == []
    (prefix / "bin" / "orterun").chmod(0o666)
    [refused] = nf.refusals([], [], [str(mpirun)])
    assert refused.path == str(prefix / "bin" / "orterun")


def test_a_build_directory_planted_by_another_account_is_refused_before_the_build(tmp_path):
    """The openmpi role's source build (roles/openmpi: validate.yml checks _openmpi_build_dir with
    link_check's root_only before anything is built; the role itself is not run by the tests, a
    build takes longer than the whole suite)."""
    lib = tmp_path / "var" / "lib"
    lib.mkdir(parents=True)
    build = lib / "torchfleet" / "build" / "openmpi-4.1.6"
    assert nf.refusals([], [], [str(build)]) == []  # a fresh node: root makes it all
    build.mkdir(parents=True)
    assert nf.refusals([], [], [str(build)]) == []  # root's: the next build may use it
    for planted in (build, build.parent, build.parent.parent):
        os.chown(planted, NOBODY, -1)
        [refused] = nf.refusals([], [], [str(build)])
        assert refused.path == str(planted) and "owner UID 65534" in refused.why
        os.chown(planted, 0, -1)
    # Under a shared directory, not made yet: another account could make it first.
    lib.chmod(0o1777)
    build.parent.parent.rename(tmp_path / "gone")
    [refused] = nf.refusals([], [], [str(build)])
    assert refused.path == str(lib / "torchfleet") and "could make it first" in refused.why
