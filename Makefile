# The README's two commands, `make demo` and `make test`; each does all of its own set-up.
PYTHON ?= python3
VENV ?= .venv
NODES ?= 3
# pytest workers of `make unit` and `make cluster`: each cluster test worker sets up a local
# cluster of its own and takes whole test files, so one file's tests never share nodes with
# another's running at the same time.
TEST_WORKERS ?= 2
BIN := $(abspath $(VENV))/bin
# Molecule, pytest and the playbooks find ansible-playbook, ansible and molecule in the venv.
export PATH := $(BIN):$(PATH)

.PHONY: demo check test lint sanity unit cluster molecule image down

# --no-compile: pip byte-compiles every file of the test tools (most of them the `ansible`
# package's collections) on one core; Python compiles the few that are imported, on first use.
$(BIN)/torchfleet: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile -e '.[test]'
	touch $@

# The main job on a local cluster of containers: nodes up, setup, then the example training.
demo: $(BIN)/torchfleet
	torchfleet cluster up --nodes $(NODES)
	ansible-playbook setup.yml -i inventory
	ansible-playbook launch.yml -e script=examples/train.py -e nproc_per_node=2

# The contributor's loop, without Docker (under 3 minutes): the unit tests, the files written from
# the launch option table, every role's argument spec against its defaults, and the type check.
check: unit
	$(BIN)/python tests/lint/role_defaults.py
	$(BIN)/python tools/write_launch_options.py --check
	$(BIN)/mypy -p ansible_collections.torchfleet.cluster.plugins.module_utils -p ansible_collections.torchfleet.cluster.plugins.plugin_utils -p torchfleet

# Every test: `make check` first (its unit tests start processes of runs on this machine, where
# test_torchrun_launch_local's launches would find them alive and refuse to start), then lint,
# ansible-test sanity and the Molecule scenario beside the cluster tests, three jobs at once. Their containers, names and networks are their own. The three beside
# give way to the cluster tests, whose first cluster's setup from scratch holds back every test
# after it: they run niced, Molecule's nodes with a quarter of Docker's CPU weight, and take the
# cores the cluster tests leave idle later (docs/performance.md). Lines of the jobs interleave,
# each line whole (-Oline).
test: check
	$(MAKE) --no-print-directory -j3 -Oline cluster lint sanity molecule BESIDE="nice -n 10" MOLECULE_CPU_SHARES=256

# ansible-lint (production profile). ANSIBLE_HOME: offline, ansible-lint looks for collections in its cache
# first (~/.ansible/collections by default), where a copy of this collection from elsewhere
# (a Molecule prerun, an install by hand) would hide the checkout's own modules.
lint: $(BIN)/torchfleet
	ANSIBLE_HOME=$(CURDIR)/.cache/ansible-lint $(BESIDE) ansible-lint

# ansible-test sanity on a copy laid out as ansible_collections/torchfleet/cluster, offline but for
# PyPI; what it ignores is in tests/sanity/ignore-2.19.txt. ARGS go to ansible-test (--test pylint).
sanity: $(BIN)/torchfleet
	$(BESIDE) $(BIN)/python tests/sanity/run.py $(ARGS)

# The node images (plain, and with Slurm for the tests' cluster), built once and cached (and the
# Docker engine, started or installed if needed).
image: $(BIN)/torchfleet
	torchfleet cluster image --slurm

# Pure logic and the parts of a launch that run on this machine alone: no Docker, no Open MPI.
unit: $(BIN)/torchfleet
	pytest -n $(TEST_WORKERS) tests/unit

# The tests on local clusters of containers (and test_torchrun_launch_local's mpirun on this machine).
cluster: image
	@command -v mpirun >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq openmpi-bin; } || { echo "install Open MPI (openmpi-bin) for the tests"; exit 1; }
	pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests/integration

# MOLECULE_CPU_SHARES: the CPU weight of the scenario's nodes (docker update --cpu-shares; Docker's
# default is 1024), set in its prepare step.
molecule: image
	TORCHFLEET_MOLECULE_CPU_SHARES=$(MOLECULE_CPU_SHARES) $(BESIDE) molecule test

# Remove the demo's local cluster.
down: $(BIN)/torchfleet
	torchfleet cluster down
