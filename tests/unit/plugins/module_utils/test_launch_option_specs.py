"""What follows from the launch option table (module_utils/_launch_option_specs.py): the module's
spec and documentation, run.yml's arguments, the role's spec and launch.yml's names."""

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_option_specs as specs, _launch_options as lr
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import DEFAULT_PORT


def test_the_module_spec_and_the_role_take_their_defaults_from_the_table():
    spec = specs.argument_spec()
    assert spec["master_port"] == {"type": "int", "default": DEFAULT_PORT}
    assert spec["env_secrets"]["no_log"] is True and spec["env_pass"]["no_log"] is False
    assert "files" not in spec  # the role's alone: the module gets file_contents
    role = specs.role_options()
    assert role["launch_master_port"] == ({"type": "raw", "default": DEFAULT_PORT,
                                           "description": lr.BY_NAME["master_port"].doc}, DEFAULT_PORT)
    # A computed default is the role's alone: the spec declares none.
    entry, default = role["launch_log_dir"]
    assert "default" not in entry and default == "{{ launch_workdir }}/runs"
    assert specs.short_names()["cluster_user_name"] == ["launch_user"]


def test_run_yml_passes_each_option_its_role_variable_unless_the_table_says_otherwise():
    passed = specs.module_arguments()
    assert passed["detach"] == ("{{ launch_detach }}", "")
    assert passed["launch_timeout"] == ("{{ launch_timeout }}", "")  # its name is the role's
    assert passed["head"] == ("{{ launch_head }}", "") and passed["state"] == ("started", "")
    assert passed["env_secrets"][1].startswith("Read from the controller's")  # a computed value keeps its comment
    assert passed["check_nodes"] == ("{{ _launch_resolved.check_nodes }}", "")  # resolved in one place
    # nproc_per_node travels inside nodes; network, the module's alone, is not given by the role.
    assert "nproc_per_node" not in passed and "network" not in passed
    assert not {option.name for option in lr.OPTIONS if not option.module} & set(passed)


def test_the_module_documentation_and_spec_come_from_the_same_entries():
    documented, spec = specs.module_documentation(), specs.argument_spec()
    assert list(documented) == list(spec)
    assert spec["nodes"]["options"]["slots"] == {"type": "int", "required": True}
    assert documented["nodes"]["suboptions"]["slots"] == {"description": "Workers (GPUs) on the node.", "type": "int",
                                                          "required": True}
    # The role's description is its own where the module's option is another thing.
    assert documented["env_secrets"]["description"] == lr.BY_NAME["env_secrets"].module_doc
    assert specs.role_options()["launch_env_secrets"][0]["description"] == lr.BY_NAME["env_secrets"].doc
