"""torchfleet/devcluster/images.py: the recipe digest the node images are labelled with, and when and
how they are built. `docker` and `run` are stand-ins: nothing is pulled or built."""

import os
import re
from pathlib import Path

import pytest

from torchfleet.devcluster import images
from torchfleet.devcluster.engine import ClusterError

LABEL_FORMAT = '{{index .Config.Labels "org.torchfleet.recipe"}}'


def fake_build(monkeypatch):
    """`run` recording each command, its BuildKit setting and the build context's files as they were."""
    builds = []

    def run(argv, **kwargs):
        context = Path(argv[-1])
        files = {path.name: (path.read_bytes(), os.access(path, os.X_OK)) for path in context.iterdir()}
        builds.append((argv, kwargs["env"]["DOCKER_BUILDKIT"], files))
    monkeypatch.setattr(images, "run", run)
    return builds


def test_the_recipe_digest_changes_with_a_file_name_its_content_or_a_package_but_not_with_file_order(monkeypatch):
    def digest(files, packages=("python3", "sudo")):
        monkeypatch.setattr(images, "recipe_files", lambda names: dict(files))
        return images.recipe_digest(packages=packages)
    base = digest([("Dockerfile", b"FROM x\n"), ("node-init", b"#!/bin/sh\n")])
    assert re.fullmatch("[0-9a-f]{16}", base)
    assert digest([("node-init", b"#!/bin/sh\n"), ("Dockerfile", b"FROM x\n")]) == base
    assert digest([("Dockerfile", b"FROM y\n"), ("node-init", b"#!/bin/sh\n")]) != base
    assert digest([("Dockerfile", b"FROM x\n"), ("node-init", b"#!/bin/sh\n")], packages=("python3",)) != base
    assert digest([("a", b"bc")]) != digest([("ab", b"c")])


def test_the_recipe_files_of_both_images_are_read_from_node_beside_the_module():
    node = Path(images.__file__).parent / "node"
    assert images.recipe_files() == {name: (node / name).read_bytes() for name in ("Dockerfile", "node-init")}
    slurm = images.recipe_files(images.SLURM_RECIPE)
    assert sorted(slurm) == ["Dockerfile.slurm", "slurm-init"]
    assert slurm["slurm-init"].startswith(b"#!")


def test_an_image_labelled_with_the_current_recipe_is_used_without_pulling_or_building(monkeypatch, fake_docker):
    calls = fake_docker(images, {("image", "inspect", "--format", LABEL_FORMAT, images.IMAGE):
                                 (0, images.recipe_digest() + "\n")})
    monkeypatch.setattr(images, "run", lambda argv, **kwargs: pytest.fail(f"nothing is built: {argv}"))
    assert images.ensure_image() == "torchfleet/node:bookworm"
    assert calls == [("image", "inspect", "--format", LABEL_FORMAT, images.IMAGE)]


def test_a_stale_image_is_built_on_debian_bookworm_with_the_recipe_label_by_the_classic_builder(monkeypatch, fake_docker):
    calls = fake_docker(images, {("image", "inspect", "--format", LABEL_FORMAT, images.IMAGE): (0, "0123456789abcdef\n")})
    builds = fake_build(monkeypatch)
    assert images.ensure_image() == images.IMAGE
    assert ("pull", "-q", "debian:bookworm") in calls
    (argv, buildkit, files), = builds
    assert argv[:-1] == ["docker", "build", "-q", "--build-arg", "BASE=debian:bookworm",
                         "--build-arg", "PACKAGES=python3 openssh-server iproute2 sudo",
                         "--label", f"org.torchfleet.recipe={images.recipe_digest()}", "-t", "torchfleet/node:bookworm"]
    assert buildkit == "0"
    assert files == {"Dockerfile": (images.recipe_files()["Dockerfile"], False),
                     "node-init": (images.recipe_files()["node-init"], True)}
    assert not Path(argv[-1]).exists()  # the build context is removed afterwards


def test_without_a_registry_the_debootstrap_base_is_made_once_and_again_only_on_rebuild(monkeypatch, fake_docker):
    calls = fake_docker(images, {("pull", "-q", "debian:bookworm"): (1, ""),
                                 ("image", "inspect", "torchfleet/node-base:bookworm"): (0, "[]")})
    builds = fake_build(monkeypatch)
    made = []
    monkeypatch.setattr(images, "debootstrap_base", made.append)
    monkeypatch.setenv("TORCHFLEET_DEBIAN_MIRROR", "http://mirror.example/debian")
    images.ensure_image()
    assert made == []
    assert "BASE=torchfleet/node-base:bookworm" in builds[0][0]
    label_asks = [call for call in calls if call[:3] == ("image", "inspect", "--format")]
    images.ensure_image(rebuild=True)
    assert made == ["http://mirror.example/debian"]
    assert len(builds) == 2
    assert [call for call in calls if call[:3] == ("image", "inspect", "--format")] == label_asks  # rebuild asks no label


def test_debootstrap_without_root_says_no_registry_answered_and_how_to_go_on(monkeypatch):
    monkeypatch.setattr(images.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(images, "run", lambda argv, **kwargs: pytest.fail(f"nothing is run: {argv}"))
    with pytest.raises(ClusterError) as raised:
        images.debootstrap_base("http://deb.debian.org/debian")
    message = str(raised.value)
    assert message.startswith("no registry answers for `docker pull debian:bookworm`")
    assert "run `torchfleet cluster up` as root once" in message
    assert "load a Debian 12 image as debian:bookworm" in message


def test_the_slurm_image_is_built_on_the_node_image_and_labelled_with_both_recipes(monkeypatch, fake_docker):
    monkeypatch.setattr(images, "ensure_image", lambda rebuild: images.IMAGE)
    fake_docker(images, {("image", "inspect", "--format", LABEL_FORMAT, images.SLURM_IMAGE): (0, images.recipe_digest() + "\n")})
    builds = fake_build(monkeypatch)
    assert images.ensure_slurm_image() == "torchfleet/node-slurm:bookworm"
    (argv, buildkit, files), = builds
    digest = images.recipe_digest(("Dockerfile.slurm", "slurm-init"), ("slurmd", "slurmctld", "slurm-client", "munge"))
    context = argv[-1]
    assert argv == ["docker", "build", "-q", "-f", str(Path(context, "Dockerfile.slurm")),
                    "--build-arg", "BASE=torchfleet/node:bookworm",
                    "--build-arg", "PACKAGES=slurmd slurmctld slurm-client munge",
                    "--label", f"org.torchfleet.recipe={digest}-{images.recipe_digest()}",
                    "-t", "torchfleet/node-slurm:bookworm", context]
    assert buildkit == "0"
    assert files["slurm-init"][1] is True and sorted(files) == ["Dockerfile.slurm", "slurm-init"]
