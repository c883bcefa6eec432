"""Filter `torchfleet.cluster.python_env_problems`: what is wrong with a Python environment's spec."""

from __future__ import annotations

import re

DOCUMENTATION = r"""
name: python_env_problems
short_description: What is wrong with the Python environment's engine and spec, each problem with its fix
version_added: 1.0.0
description:
  - Checks the python_env role's engine, package spec and conda inputs on the controller, before
    anything on a node changes, and returns one message per problem. An empty list means the spec
    is good.
  - One filter call instead of one assert task per concern, because each task costs the controller
    a worker per node, even when it passes or is skipped.
options:
  _input:
    description:
      - The spec, with keys engine, packages, extra_packages, conda_file, micromamba_file,
        micromamba_url and micromamba_checksum (the python_env_ variables of the same names).
      - Optionally, how the wheels spread, with wheelhouse_seed, spread_port and spread_fanout (the
        python_env_ variables of the same names), and nodes, the group's nodes the seed must be one of.
      - Optionally, fault_tolerance, setup's variable of that name (none or torchft; torchft puts
        torchft in the environment).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Check the spec and the engine
  vars:
    _problems: >-
      {{ {'engine': python_env_engine, 'packages': python_env_packages, 'extra_packages': [],
          'conda_file': '', 'micromamba_file': '', 'micromamba_url': '', 'micromamba_checksum': ''}
         | torchfleet.cluster.python_env_problems }}
  ansible.builtin.fail:
    msg: "{{ _problems | join(' ') }}"
  when: _problems | length > 0
"""

RETURN = r"""
_value:
  description: One message per problem; empty when there is none. An unknown engine or fault_tolerance is said alone.
  type: list
  elements: str
"""

ENGINES = ("venv", "conda", "none")
FAULT_TOLERANCE = ("none", "torchft")
# NAME, NAME[extras], then optional comma-separated version clauses (PEP 508 without markers).
_CLAUSE = r"\s*(==|>=|<=|~=|!=|<|>)\s*[A-Za-z0-9_.*+!-]+"
REQUIREMENT = re.compile(rf"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9_,.-]+\])?({_CLAUSE}(\s*,{_CLAUSE})*)?$")
TORCH = re.compile(r"^[Tt]orch\b(?![-_.])")  # torch, not torchvision or torch-foo
TORCHFT = re.compile(r"^torchft\b(?![-_.])", re.IGNORECASE)  # what setup.yml adds for fault_tolerance=torchft
PINNED_TORCH = re.compile(r"^[Tt]orch\s*==\s*[0-9][A-Za-z0-9_.+!-]*$")
SHA256 = re.compile(r"^sha256:[0-9a-fA-F]{64}$")


def _spec_problem(requirements: list[str]) -> str | None:
    bad = [item for item in requirements if not REQUIREMENT.match(item)]
    torch = [item for item in requirements if TORCH.match(item)]
    if bad:
        return (f"python_env_packages has entries that are not requirement strings: {', '.join(bad)}. "
                f"Write each as NAME or NAME==VERSION (for example numpy==2.1.3).")
    if not torch:
        return "python_env_packages has no torch: add a pinned one, for example torch==2.13.0."
    if len(torch) > 1:
        return f"python_env_packages names torch more than once ({', '.join(torch)}): keep one."
    if not PINNED_TORCH.match(torch[0]):
        return (f"torch must be pinned with == so every node gets the same build, but the spec says "
                f"'{torch[0]}': write for example torch==2.13.0.")
    return None


def _conda_problem(spec: dict) -> str | None:
    url, checksum = spec["micromamba_url"], spec["micromamba_checksum"]
    if spec["conda_file"] and bool(spec["micromamba_file"]) != bool(url) and (not url or SHA256.match(checksum)):
        return None
    return (f"The conda engine needs python_env_conda_file (an environment.yml or an explicit lock file "
            f"on the controller) and micromamba from exactly one of python_env_micromamba_file (a file "
            f"on the controller) or python_env_micromamba_url with python_env_micromamba_checksum "
            f"(\"sha256:HEX\"). Now: conda_file='{spec['conda_file']}', "
            f"micromamba_file='{spec['micromamba_file']}', micromamba_url='{url}', checksum='{checksum}'.")


def _spread_problem(spec: dict) -> str | None:
    seed, nodes = spec.get("wheelhouse_seed") or "", spec.get("nodes")
    if seed and nodes is not None and seed not in nodes:
        return (f"python_env_wheelhouse_seed is '{seed}', which is not a node of the cluster "
                f"({', '.join(nodes) or 'none'}): name one of them, or leave it unset for the head.")
    port, fanout = spec.get("spread_port", 29610), spec.get("spread_fanout", 2)
    if not str(port).isdigit() or not 1 <= int(port) <= 65535:
        return f"python_env_spread_port is '{port}': give a TCP port, 1 to 65535, free on the nodes."
    if not str(fanout).isdigit() or int(fanout) < 1:
        return f"python_env_spread_fanout is '{fanout}': give how many nodes each node serves, 1 or more (2 by default)."
    return None


def _fault_tolerance_problem(spec: dict) -> str | None:
    value = spec.get("fault_tolerance", "none")
    if value in FAULT_TOLERANCE:
        return None
    return (f"fault_tolerance is '{value}', which setup does not know. Use -e fault_tolerance=torchft "
            f"to put torchft in the Python environment on every node (for launches with "
            f"--fault-tolerance torchft), or none (the default: no torchft).")


def python_env_problems(spec: dict) -> list[str]:
    engine = spec["engine"]
    if engine not in ENGINES:
        return [f"python_env_engine is '{engine}', which torchfleet does not know. Use venv (the node's "
                f"python3), conda (micromamba) or none (the node's own Python, nothing installed)."]
    fault_tolerance = _fault_tolerance_problem(spec)
    if fault_tolerance:
        return [fault_tolerance]
    if engine == "none":
        said = []
        if spec.get("fault_tolerance") == "torchft":
            said.append("python_env_engine=none installs no packages, but fault_tolerance=torchft puts "
                        "torchft in the environment: choose the venv or conda engine, or leave "
                        "fault_tolerance at none and install torchft in the nodes' own Python yourself.")
        nccl = [item for item in spec["extra_packages"] if not TORCHFT.match(item)]
        if nccl:
            said.append(f"python_env_engine=none installs no packages, but {', '.join(nccl)} "
                        f"would go into the environment (the NCCL wheel, with nccl_source=wheel): set "
                        f"nccl_source=none (or system), or choose the venv or conda engine.")
        return said
    problems = [_spec_problem([*spec["packages"], *spec["extra_packages"]]), _spread_problem(spec)]
    if engine == "conda":
        problems.append(_conda_problem(spec))
    return [problem for problem in problems if problem]


class FilterModule:
    def filters(self):
        return {"python_env_problems": python_env_problems}
