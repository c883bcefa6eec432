"""One row of the launch option table (module_utils/_launch_option_schema.py): the names and the
run.yml value it gives."""

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_option_schema import Option


def test_an_option_is_the_roles_as_launch_name_unless_it_says_otherwise():
    assert Option("master_port", "int", "").role_name == "launch_master_port"
    assert Option("launch_timeout", "int", "").role_name == "launch_timeout"  # its name is the role's
    assert Option("head_node", "str", "", role="launch_head").role_name == "launch_head"
    assert Option("nodes", "list", "", role=None).role_name is None


def test_run_yml_passes_the_roles_variable_a_computed_value_or_nothing():
    assert Option("detach", "bool", "").module_arg == "{{ launch_detach }}"
    assert Option("state", "str", "", role=None, module_value="started").module_arg == "started"
    assert Option("nodes", "list", "", role=None).module_arg is None  # the role has no such variable
    assert Option("nproc_per_node", "int", "", module_value=None).module_arg is None
    assert Option("files", "list", "", module=False).module_arg is None  # not the module's
