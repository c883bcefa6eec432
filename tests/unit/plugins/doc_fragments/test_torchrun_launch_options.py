"""The torchrun_launch module's options as documented agree with its argument spec (both the option
table's: tools/write_launch_options.py writes the fragment from it), and the module takes its options'
documentation from the fragment."""

from __future__ import annotations

from pathlib import Path

import yaml

from ansible_collections.torchfleet.cluster.plugins.doc_fragments import torchrun_launch_options as fragment
from ansible_collections.torchfleet.cluster.plugins.doc_fragments.torchrun_launch_options import ModuleDocFragment
from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_option_specs as specs, _launch_options as lo
from ansible_collections.torchfleet.cluster.plugins.modules import torchrun_launch as tl


def test_argument_spec_matches_documentation():
    options = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    assert set(options) == set(tl.ARGUMENT_SPEC)
    for name, spec in tl.ARGUMENT_SPEC.items():
        doc = options[name]
        assert doc["type"] == spec["type"], name
        assert doc.get("default") == spec.get("default"), name
        assert doc.get("choices") == spec.get("choices"), name
        assert doc.get("elements") == spec.get("elements"), name
    suboptions = options["nodes"]["suboptions"]
    assert {name: (doc["type"], doc.get("required", False)) for name, doc in suboptions.items()} \
        == {name: (spec["type"], spec.get("required", False))
            for name, spec in tl.ARGUMENT_SPEC["nodes"]["options"].items()}
    assert tl.ARGUMENT_SPEC["env_secrets"]["no_log"] is True


def test_the_module_takes_its_options_from_the_fragment():
    documentation = yaml.safe_load(tl.DOCUMENTATION)
    assert "options" not in documentation
    assert "torchfleet.cluster.torchrun_launch_options" in documentation["extends_documentation_fragment"]


def test_the_fragment_is_the_tables_documentation():
    assert yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"] == specs.module_documentation()
    # Paragraphs keep their markup; a module option the role computes is documented by its doc.
    documented = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    assert documented["state"]["description"] == list(lo.BY_NAME["state"].doc)
    assert documented["env_secrets"]["description"] == lo.BY_NAME["env_secrets"].module_doc
    assert documented["nodes"]["suboptions"]["interface"]["description"].startswith(
        "The network interface holding O(nodes[].address).")


def test_the_fragment_says_it_is_written_and_from_what():
    head = Path(fragment.__file__).read_text().splitlines()[:5]
    assert "# Written by tools/write_launch_options.py from the option table in" in head
    assert "# plugins/module_utils/_launch_options.py: change the table and run that, never this file." in head
