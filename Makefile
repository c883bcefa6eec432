# The README's two commands, `make demo` and `make test`; each does all of its own set-up.
PYTHON ?= python3
VENV ?= .venv
NODES ?= 3
BIN := $(abspath $(VENV))/bin
# Molecule, pytest and the playbooks find ansible-playbook, ansible and molecule in the venv.
export PATH := $(BIN):$(PATH)

.PHONY: demo test lint unit molecule image down

$(BIN)/torchfleet: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# The main job on a local cluster of containers: nodes up, setup, then the example training.
demo: $(BIN)/torchfleet
	torchfleet cluster up --nodes $(NODES)
	ansible-playbook setup.yml -i inventory
	ansible-playbook launch.yml -e script=examples/train.py -e nproc_per_node=2

# Every test: lint, unit and cluster tests, then the Molecule scenario.
test: lint unit molecule

lint: $(BIN)/torchfleet
	ansible-lint

# The node images (plain, and with Slurm for the tests' cluster), built once and cached (and the
# Docker engine, started or installed if needed).
image: $(BIN)/torchfleet
	torchfleet cluster image --slurm

unit: image
	@command -v mpirun >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq openmpi-bin; } || { echo "install Open MPI (openmpi-bin) for the tests"; exit 1; }
	pytest

molecule: image
	molecule test

# Remove the demo's local cluster.
down: $(BIN)/torchfleet
	torchfleet cluster down
