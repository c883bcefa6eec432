"""The node images, built from node/ beside this file once per recipe: from `debian:bookworm`
where a registry answers, else from a Debian root made with debootstrap and `docker import`."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from torchfleet.devcluster.engine import ClusterError, docker, log, run

IMAGE = "torchfleet/node:bookworm"
BASE_IMAGE = "torchfleet/node-base:bookworm"
PULL_BASE = "debian:bookworm"
NODE_PACKAGES = ("python3", "openssh-server", "iproute2", "sudo")
SLURM_IMAGE = "torchfleet/node-slurm:bookworm"
SLURM_PACKAGES = ("slurmd", "slurmctld", "slurm-client", "munge")
RECIPE_LABEL = "org.torchfleet.recipe"


def recipe_files(names=("Dockerfile", "node-init")) -> dict[str, bytes]:
    node = resources.files("torchfleet.devcluster") / "node"
    return {name: (node / name).read_bytes() for name in names}


def recipe_digest(names=("Dockerfile", "node-init"), packages=NODE_PACKAGES) -> str:
    digest = hashlib.sha256()
    for name, data in sorted(recipe_files(names).items()):
        digest.update(name.encode() + b"\0" + data + b"\0")
    digest.update(" ".join(packages).encode())
    return digest.hexdigest()[:16]


def image_exists(image: str) -> bool:
    return docker("image", "inspect", image, check=False).returncode == 0


def image_label(image: str, label: str) -> str | None:
    result = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', image, check=False)
    return result.stdout.strip() if result.returncode == 0 else None


def debootstrap_base(mirror: str) -> None:
    if os.geteuid() != 0:
        raise ClusterError(
            f"no registry answers for `docker pull {PULL_BASE}` and building the node image from "
            "debootstrap needs root: run `torchfleet cluster up` as root once, or load a Debian 12 image "
            f"as {PULL_BASE}."
        )
    if shutil.which("debootstrap") is None:
        log("installing debootstrap")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "install", "-y", "-qq", "debootstrap"], env=env)
    with tempfile.TemporaryDirectory(prefix="torchfleet-rootfs-") as root:
        log(f"no registry answers: building a Debian 12 root with debootstrap from {mirror}")
        run([
            "debootstrap", "--variant=minbase", "--include=" + ",".join(NODE_PACKAGES),
            "bookworm", root, mirror,
        ])
        shutil.rmtree(Path(root, "var/cache/apt/archives"), ignore_errors=True)
        shutil.rmtree(Path(root, "var/lib/apt/lists"), ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        run(["docker", "import", "-", BASE_IMAGE], stdin=tar.stdout)
        if tar.wait() != 0:
            raise ClusterError("packing the debootstrap root with tar failed")


def ensure_image(rebuild: bool = False) -> str:
    """Build the node image unless one made from the same recipe is already there."""
    digest = recipe_digest()
    if not rebuild and image_label(IMAGE, RECIPE_LABEL) == digest:
        return IMAGE
    if docker("pull", "-q", PULL_BASE, check=False).returncode == 0:
        base = PULL_BASE
    else:
        if rebuild or not image_exists(BASE_IMAGE):
            debootstrap_base(os.environ.get("TORCHFLEET_DEBIAN_MIRROR", "http://deb.debian.org/debian"))
        base = BASE_IMAGE
    log(f"building {IMAGE} from {base}")
    with tempfile.TemporaryDirectory(prefix="torchfleet-image-") as context:
        for name, data in recipe_files().items():
            Path(context, name).write_bytes(data)
        Path(context, "node-init").chmod(0o755)
        # The classic builder works against every engine version, BuildKit or not.
        run(
            ["docker", "build", "-q", "--build-arg", f"BASE={base}",
             "--build-arg", f"PACKAGES={' '.join(NODE_PACKAGES)}", "--label", f"{RECIPE_LABEL}={digest}",
             "-t", IMAGE, context],
            env=dict(os.environ, DOCKER_BUILDKIT="0"),
        )
    return IMAGE


SLURM_RECIPE = ("Dockerfile.slurm", "slurm-init")


def ensure_slurm_image(rebuild: bool = False) -> str:
    """The Slurm node image, built on the node image unless one from the same recipes is there."""
    base = ensure_image(rebuild)
    digest = recipe_digest(SLURM_RECIPE, SLURM_PACKAGES) + "-" + recipe_digest()
    if not rebuild and image_label(SLURM_IMAGE, RECIPE_LABEL) == digest:
        return SLURM_IMAGE
    log(f"building {SLURM_IMAGE} from {base} (Debian's slurm-wlm and munge)")
    with tempfile.TemporaryDirectory(prefix="torchfleet-image-") as context:
        for name, data in recipe_files(SLURM_RECIPE).items():
            Path(context, name).write_bytes(data)
        Path(context, "slurm-init").chmod(0o755)
        run(["docker", "build", "-q", "-f", str(Path(context, "Dockerfile.slurm")), "--build-arg", f"BASE={base}",
             "--build-arg", f"PACKAGES={' '.join(SLURM_PACKAGES)}", "--label", f"{RECIPE_LABEL}={digest}",
             "-t", SLURM_IMAGE, context],
            env=dict(os.environ, DOCKER_BUILDKIT="0"))
    return SLURM_IMAGE
