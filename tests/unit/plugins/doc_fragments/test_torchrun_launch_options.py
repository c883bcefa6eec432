"""The torchrun_launch module's options as documented agree with its argument spec (the option
table's), and the module takes its options' documentation from the fragment."""

from __future__ import annotations

import yaml

from ansible_collections.torchfleet.cluster.plugins.doc_fragments.torchrun_launch_options import ModuleDocFragment
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
