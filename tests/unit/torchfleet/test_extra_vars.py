"""-e as the command reads it itself."""

import pytest


@pytest.mark.parametrize("values", [
    ["script=train.py", "nproc_per_node=2", "launch_mode=rank", "empty=", "path=/a/b-c.d:e", "n=-3", "x=1", "x=2"],
    ["a=1 b=2"], ["a='x y'"], ['{"run_id": "r1", "n": 2}'], ["n: 3"], ["a=b=c"], ['a="q"'], ["x=1", '{"x": 2}']])
def test_extra_vars_without_ansibles_loader_read_as_with_it(values):
    """Plain KEY=VALUE values are read without Ansible's loader (its imports cost every launch
    time, docs/performance.md): the same variables (or error) as Ansible's splitter and loader give; anything else
    goes to them."""
    from torchfleet import extra_vars

    def outcome(parse):
        try:
            return parse(values)
        except extra_vars.RenderError as error:
            return str(error)
    assert outcome(extra_vars.parse_extra_vars) == outcome(extra_vars._parsed_by_ansible)
    plain = all(extra_vars._PLAIN_KEY_VALUE.match(value) for value in values)
    assert plain == (values[0] == "script=train.py")
