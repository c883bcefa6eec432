"""The run ids the command takes: the launch's own rule, checked before Ansible starts."""

import pytest

from torchfleet.cli.usage import UsageError, check_run_id


@pytest.mark.parametrize("run_id", ["tf-20261127-051000-3a9f1c", "a", "x_y.z-1", "r" * 64])
def test_a_run_id_of_the_launchs_own_form_is_taken(run_id):
    check_run_id(run_id)


@pytest.mark.parametrize("run_id", ["", "a;b", "../etc", "a b", "r" * 65, "é"])
def test_any_other_run_id_is_a_usage_error_naming_the_rule(run_id):
    with pytest.raises(UsageError, match=r"is not valid \(letters, digits, '_', '.', '-'\)"):
        check_run_id(run_id)
