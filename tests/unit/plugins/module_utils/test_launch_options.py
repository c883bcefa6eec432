"""The launch option table (module_utils/_launch_options.py); what follows from it:
test_launch_option_specs.py."""

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_options as lr


def test_every_option_is_named_once_and_typed():
    names = [option.name for option in lr.OPTIONS]
    assert len(names) == len(set(names))
    roles = [option.role_name for option in lr.OPTIONS if option.role_name]
    assert len(roles) == len(set(roles)) and all(name.startswith("launch_") for name in roles)
    assert all(option.type in ("str", "int", "bool", "list", "dict", "path", "raw") for option in lr.OPTIONS)
