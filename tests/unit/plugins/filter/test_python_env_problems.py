"""The Python environment's checks (filter python_env_problems).

The playbook path of these messages is tested against containers in tests/integration
(test_playbooks.py and test_bad_input.py); these tests cover the combinations.
"""

import pytest

from ansible_collections.torchfleet.cluster.plugins.filter.python_env_problems import python_env_problems

SHA = "sha256:" + "ab" * 32


def spec(**changes):
    base = {"engine": "venv", "packages": ["torch==2.13.0", "numpy"], "extra_packages": ["nvidia-nccl-cu12==2.27.3"],
            "conda_file": "", "micromamba_file": "", "micromamba_url": "", "micromamba_checksum": ""}
    return {**base, **changes}


def test_a_good_venv_spec_has_no_problem():
    assert python_env_problems(spec()) == []


def test_an_unknown_engine_is_said_alone():
    problems = python_env_problems(spec(engine="pixi", packages=["numpy"]))
    assert problems == ["python_env_engine is 'pixi', which torchfleet does not know. Use venv (the node's "
                        "python3), conda (micromamba) or none (the node's own Python, nothing installed)."]


def test_engine_none_checks_only_that_nothing_is_to_be_installed():
    assert python_env_problems(spec(engine="none", packages=["not a requirement"], extra_packages=[])) == []
    problems = python_env_problems(spec(engine="none"))
    assert len(problems) == 1
    assert problems[0].startswith("python_env_engine=none installs no packages, but nvidia-nccl-cu12==2.27.3 ")


@pytest.mark.parametrize("packages, start", [
    (["numpy; rm -rf /", "torch==2.13.0"], "python_env_packages has entries that are not requirement strings: numpy; rm -rf /."),
    (["numpy"], "python_env_packages has no torch: add a pinned one"),
    (["torchvision==0.28.0", "numpy"], "python_env_packages has no torch"),  # torchvision is not torch
    (["torch==2.13.0", "Torch==2.12.0"], "python_env_packages names torch more than once (torch==2.13.0, Torch==2.12.0)"),
    (["torch>=2.13"], "torch must be pinned with == so every node gets the same build, but the spec says 'torch>=2.13'"),
    (["torch"], "torch must be pinned with =="),
])
def test_the_package_spec(packages, start):
    problems = python_env_problems(spec(packages=packages, extra_packages=[]))
    assert len(problems) == 1 and problems[0].startswith(start), problems


@pytest.mark.parametrize("requirement", ["numpy", "numpy==2.1.3", "scipy>=1.10, <2", "foo[bar,baz]~=1.0",
                                         "torch == 2.13.0+cpu"])
def test_requirement_strings_that_pass(requirement):
    assert python_env_problems(spec(packages=["torch==2.13.0", requirement] if "torch" not in requirement
                                    else [requirement])) == []


@pytest.mark.parametrize("conda, ok", [
    ({"conda_file": "env.yml", "micromamba_file": "mm"}, True),
    ({"conda_file": "env.yml", "micromamba_url": "https://x/mm", "micromamba_checksum": SHA}, True),
    ({"micromamba_file": "mm"}, False),  # no environment file
    ({"conda_file": "env.yml"}, False),  # no micromamba
    ({"conda_file": "env.yml", "micromamba_file": "mm", "micromamba_url": "https://x/mm",
      "micromamba_checksum": SHA}, False),  # both
    ({"conda_file": "env.yml", "micromamba_url": "https://x/mm"}, False),  # no checksum
    ({"conda_file": "env.yml", "micromamba_url": "https://x/mm", "micromamba_checksum": "md5:00"}, False),
])
def test_what_the_conda_engine_needs(conda, ok):
    problems = python_env_problems(spec(engine="conda", **conda))
    assert (problems == []) == ok, problems
    if not ok:
        assert problems[0].startswith("The conda engine needs python_env_conda_file")


def test_the_conda_engine_names_a_bad_spec_and_its_own_inputs_at_once():
    problems = python_env_problems(spec(engine="conda", packages=["numpy"]))
    assert len(problems) == 2
    assert problems[0].startswith("python_env_packages has no torch")
    assert problems[1].startswith("The conda engine needs python_env_conda_file")


def test_the_spread_s_seed_port_and_fanout_are_checked():
    nodes = ["node0", "node1"]
    assert python_env_problems(spec(wheelhouse_seed="node1", nodes=nodes, spread_port=29610, spread_fanout=2)) == []
    assert python_env_problems(spec(wheelhouse_seed="nodeX", nodes=nodes)) == [
        "python_env_wheelhouse_seed is 'nodeX', which is not a node of the cluster (node0, node1): name one "
        "of them, or leave it unset for the head."]
    assert python_env_problems(spec(spread_port=70000)) == [
        "python_env_spread_port is '70000': give a TCP port, 1 to 65535, free on the nodes."]
    assert python_env_problems(spec(spread_fanout=0)) == [
        "python_env_spread_fanout is '0': give how many nodes each node serves, 1 or more (2 by default)."]


@pytest.mark.parametrize("value", ["none", "torchft"])
def test_fault_tolerance_none_or_torchft_passes(value):
    assert python_env_problems(spec(fault_tolerance=value, extra_packages=["torchft==0.2.0"])) == []


def test_without_fault_tolerance_the_spec_is_judged_as_before():
    assert "fault_tolerance" not in spec() and python_env_problems(spec()) == []


@pytest.mark.parametrize("value", ["torchFT", "elastic", "", True])
def test_an_unknown_fault_tolerance_is_said_alone_with_the_fix(value):
    problems = python_env_problems(spec(fault_tolerance=value, packages=["numpy"]))
    assert problems == [f"fault_tolerance is '{value}', which setup does not know. Use -e fault_tolerance=torchft "
                        f"to put torchft in the Python environment on every node (for launches with "
                        f"--fault-tolerance torchft), or none (the default: no torchft)."]


def test_engine_none_cannot_take_torchft():
    problems = python_env_problems(spec(engine="none", fault_tolerance="torchft", extra_packages=["torchft==0.2.0"]))
    assert len(problems) == 1
    assert problems[0].startswith("python_env_engine=none installs no packages, but fault_tolerance=torchft")
    assert "choose the venv or conda engine" in problems[0]
    # With the NCCL wheel as well, both are said at once.
    problems = python_env_problems(spec(engine="none", fault_tolerance="torchft",
                                        extra_packages=["nvidia-nccl-cu12==2.27.3", "torchft==0.2.0"]))
    assert len(problems) == 2
    assert problems[1].startswith("python_env_engine=none installs no packages, but nvidia-nccl-cu12==2.27.3 would")


def test_torchft_in_the_spec_is_a_requirement_like_any_other():
    assert python_env_problems(spec(packages=["torch==2.13.0", "torchft==0.2.0"])) == []
    assert python_env_problems(spec(packages=["torch==2.13.0", "torchft"], fault_tolerance="torchft")) == []
