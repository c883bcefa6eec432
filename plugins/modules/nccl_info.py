#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_info
short_description: The version of the NCCL library PyTorch would load
version_added: "1.0.0"
description:
  - Loads NCCL with ctypes and asks it its version through C(ncclGetVersion), as PyTorch's own
    loading would find it, without a GPU. Changes nothing.
  - With O(source=wheel) the library is the one of the C(nvidia-nccl-*) wheel in the environment of
    the interpreter that runs the module, so run it with that environment's Python
    (C(ansible_python_interpreter)); with O(source=system), the system's C(libnccl.so.2).
options:
  source:
    description: Where NCCL comes from, as the C(nccl) role's C(nccl_source) says.
    type: str
    choices: [wheel, system]
    default: wheel
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads only.
  diff_mode:
    support: none
  platform:
    platforms: posix
author:
  - torchfleet developers (@torchfleet)
"""

EXAMPLES = r"""
- name: Read the NCCL version of the Python environment
  torchfleet.cluster.nccl_info:
    source: wheel
  vars:
    ansible_python_interpreter: /opt/torchfleet/envs/torchfleet/bin/python
  register: nccl
"""

RETURN = r"""
version:
  description: NCCL's version, MAJOR.MINOR.PATCH.
  returned: success
  type: str
  sample: 2.29.7
library:
  description: The library that was loaded.
  returned: success
  type: str
  sample: /opt/torchfleet/envs/torchfleet/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2
"""

import sys

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._nccl import read_version


def main():
    module = AnsibleModule(
        argument_spec={"source": {"type": "str", "choices": ["wheel", "system"], "default": "wheel"}},
        supports_check_mode=True,
    )
    source = module.params["source"]
    try:
        version, library = read_version(source)
    except ImportError:
        module.fail_json(msg=f"no NCCL wheel (nvidia-nccl-*) in the environment of {sys.executable}")
    except (OSError, RuntimeError) as err:
        module.fail_json(msg=f"NCCL could not be loaded ({source}): {err}")
    module.exit_json(changed=False, version=version, library=library)


if __name__ == "__main__":
    main()
