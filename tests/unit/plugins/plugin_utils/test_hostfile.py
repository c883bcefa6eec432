"""The hostfile parsers: MPI hostfiles, PBS nodefiles, Slurm nodelists, and the bad ones."""

import os

import pytest

from ansible_collections.torchfleet.cluster.plugins.plugin_utils._hostfile import (
    Host,
    HostfileError,
    detect_format,
    expand_nodelist,
    host_vars,
    is_hostfile,
    parse_hostfile,
    read_hostfile,
    to_inventory,
)


def names(hosts):
    return [host.name for host in hosts]


def slots(hosts):
    return {host.name: host.slots for host in hosts}


# --- MPI hostfiles -------------------------------------------------------------------------------

def test_mpi_every_form_with_comments_and_blank_lines():
    text = (
        "# my-hosts\n"
        "\n"
        "gpu01 slots=8            # head\n"
        "gpu02 slots=8 max_slots=16\n"
        "gpu03:4\n"
        "  10.10.10.14\t\n"
        "fe80::1\n"
        "[fe80::2]:2\n"
        "[2001:db8::5]\n"
        "node-a.example.org slots=1\n"
    )
    hosts = parse_hostfile(text, "my-hosts")
    assert names(hosts) == ["gpu01", "gpu02", "gpu03", "10.10.10.14", "fe80::1", "fe80::2",
                            "2001:db8::5", "node-a.example.org"]
    assert slots(hosts) == {"gpu01": 8, "gpu02": 8, "gpu03": 4, "10.10.10.14": None,
                            "fe80::1": None, "fe80::2": 2, "2001:db8::5": None,
                            "node-a.example.org": 1}
    assert [host.line for host in hosts] == [3, 4, 5, 6, 7, 8, 9, 10]


def test_the_seed_hostfile_of_bare_addresses():
    text = "# my-hosts file\n192.10.40.41\n192.10.40.42\n192.10.40.43\n192.10.40.44\n"
    hosts = parse_hostfile(text)
    assert names(hosts) == ["192.10.40.41", "192.10.40.42", "192.10.40.43", "192.10.40.44"]
    assert all(host.slots is None for host in hosts)


def test_slots_per_node_fills_only_the_hosts_without_a_count():
    hosts = parse_hostfile("a slots=2\nb\nc:3\n", slots_per_node=8)
    assert slots(hosts) == {"a": 2, "b": 8, "c": 3}


def test_mpi_accepts_large_counts_and_leading_zeros_in_counts():
    assert slots(parse_hostfile("a slots=128\nb:08\n")) == {"a": 128, "b": 8}


# --- PBS nodefiles -------------------------------------------------------------------------------

def test_pbs_counts_repeats_in_order_of_first_appearance():
    text = "gpu02\ngpu02\ngpu01\ngpu02\ngpu01\ngpu03\n"
    hosts = parse_hostfile(text, fmt="pbs")
    assert [(h.name, h.slots, h.line) for h in hosts] == [("gpu02", 3, 1), ("gpu01", 2, 3),
                                                          ("gpu03", 1, 6)]


def test_pbs_is_detected_when_bare_hosts_repeat():
    text = "# PBS_NODEFILE\nr1i0n0\nr1i0n0\nr1i0n0\nr1i0n0\nr1i0n1\nr1i0n1\nr1i0n1\nr1i0n1\n"
    assert detect_format(text) == "pbs"
    assert slots(parse_hostfile(text)) == {"r1i0n0": 4, "r1i0n1": 4}


def test_pbs_repeats_are_the_same_host_whatever_the_case():
    assert slots(parse_hostfile("Gpu01\ngpu01\n", fmt="pbs")) == {"Gpu01": 2}


# --- Slurm nodelists -----------------------------------------------------------------------------

@pytest.mark.parametrize("nodelist, expected", [
    ("gpu[01-04,07],login-a[1-2]",
     ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login-a1", "login-a2"]),
    ("node1,node2", ["node1", "node2"]),
    ("gpu[08-11]", ["gpu08", "gpu09", "gpu10", "gpu11"]),
    ("gpu[8-11]", ["gpu8", "gpu9", "gpu10", "gpu11"]),
    ("gpu[098-101]", ["gpu098", "gpu099", "gpu100", "gpu101"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("a[1-2]b[3,5]c", ["a1b3c", "a1b5c", "a2b3c", "a2b5c"]),
    ("n[3]", ["n3"]),
    ("single", ["single"]),
    ("gpu[1-2].cluster.example", ["gpu1.cluster.example", "gpu2.cluster.example"]),
])
def test_slurm_nodelists_expand_as_slurm_does(nodelist, expected):
    assert expand_nodelist(nodelist) == expected


def test_slurm_gets_slots_from_slots_per_node_only():
    assert slots(parse_hostfile("gpu[01-02]", fmt="slurm")) == {"gpu01": None, "gpu02": None}
    assert slots(parse_hostfile("gpu[01-02]", fmt="slurm", slots_per_node=4)) == {"gpu01": 4,
                                                                                  "gpu02": 4}


def test_slurm_file_over_several_lines_with_comments():
    text = "# from scontrol\ngpu[01-02]\n\ngpu05,gpu07 # spares\n"
    hosts = parse_hostfile(text)
    assert [(h.name, h.line) for h in hosts] == [("gpu01", 2), ("gpu02", 2), ("gpu05", 4),
                                                 ("gpu07", 4)]


@pytest.mark.parametrize("text, fmt", [
    ("gpu[01-04]\n", "slurm"),
    ("node1,node2\n", "slurm"),
    ("a\nb\na\n", "pbs"),
    ("a\nb\n", "mpi"),
    ("a slots=2\na slots=2\n", "mpi"),  # not bare: an MPI file with a repeat, which is an error
    ("a:2\nb\nb\n", "mpi"),
    ("fe80::1\nfe80::1\n", "pbs"),
    ("[fe80::1]:2\n", "mpi"),
    ("# nothing\n", "mpi"),
])
def test_format_detection(text, fmt):
    assert detect_format(text) == fmt


# --- malformed input: every message names the file, the line, the problem and the fix ------------

BAD = [
    # (id, format, text, line, words the message must hold)
    ("mpi duplicate host", "mpi", "gpu01 slots=4\ngpu02\ngpu01 slots=4\n", 3,
     ["'gpu01' is listed again (first on line 1)", "slots=N"]),
    ("mpi duplicate under auto", "auto", "gpu01 slots=4\ngpu01 slots=4\n", 2,
     ["'gpu01' is listed again (first on line 1)"]),
    ("mpi duplicate in another case", "mpi", "GPU01\n#\ngpu01 slots=2\n", 3,
     ["'gpu01' is listed again (first on line 1)"]),
    ("mpi duplicate IPv6 written twice", "mpi", "fe80::1 slots=2\nFE80:0::1 slots=2\n", 2,
     ["listed again (first on line 1)"]),
    ("slots=0", "mpi", "a\nb slots=0\n", 2, ["bad slot count in 'slots=0'", "1 or more"]),
    ("slots=-1", "mpi", "b slots=-1\n", 1, ["bad slot count in 'slots=-1'", "slots=N"]),
    ("slots=x", "mpi", "b slots=x\n", 1, ["bad slot count in 'slots=x'", "'x' is not a whole number"]),
    ("slots=1.5", "mpi", "b slots=1.5\n", 1, ["bad slot count in 'slots=1.5'"]),
    ("slots= empty", "mpi", "b slots=\n", 1, ["no slot count in 'slots='", "slots=N"]),
    ("host: empty", "mpi", "a\ngpu01:\n", 2, ["no slot count in 'gpu01:'", "gpu01:N"]),
    ("host:0", "auto", "gpu01:0\n", 1, ["bad slot count in 'gpu01:0'", "gpu01:N"]),
    ("host:x", "auto", "gpu01:x\n", 1, ["bad slot count in 'gpu01:x'"]),
    ("[v6]:0", "auto", "[fe80::1]:0\n", 1, ["bad slot count in '[fe80::1]:0'", "[fe80::1]:N"]),
    ("unknown keyword", "mpi", "gpu01 gpus=4\n", 1,
     ["unknown keyword 'gpus'", "'host slots=N'", "'host:N'"]),
    ("slots twice, both styles", "mpi", "gpu01:4 slots=4\n", 1,
     ["gives the slot count twice", "gpu01:N and slots=N"]),
    ("slots twice", "mpi", "gpu01 slots=4 slots=8\n", 1, ["gives the slot count twice"]),
    ("max_slots below slots", "mpi", "gpu01 slots=8 max_slots=4\n", 1,
     ["max_slots=4 is less than slots=8"]),
    ("max_slots=0", "mpi", "gpu01 slots=8 max_slots=0\n", 1, ["bad slot count in 'max_slots=0'"]),
    ("max_slots twice", "mpi", "gpu01 max_slots=8 max_slots=8\n", 1, ["gives max_slots twice"]),
    ("spaces around =", "mpi", "a\ngpu01 slots = 4\n", 2, ["slots=N as one word", "no spaces"]),
    ("keyword without value", "mpi", "gpu01 slots 4\n", 1, ["slots=N as one word"]),
    ("two hosts on a line", "mpi", "gpu01 gpu02\n", 1,
     ["unexpected 'gpu02' after the host 'gpu01'", "one host per"]),
    ("keyword first", "mpi", "slots=4 gpu01\n", 1,
     ["'slots=4' is not a valid host name", "the host name comes first"]),
    ("bad character in name", "mpi", "gpu01\ngpu_02!\n", 2,
     ["'gpu_02!' is not a valid host name or IP address", "letters, digits"]),
    ("name starts with -", "mpi", "-gpu01 slots=2\n", 1, ["'-gpu01' is not a valid host name"]),
    ("label too long", "mpi", "a" * 64 + ".example\n", 1, ["at most 63 characters"]),
    ("bad IPv4", "mpi", "10.0.0.1\n10.0.0.256 slots=2\n", 2,
     ["'10.0.0.256' is not a valid IPv4 address", "0 to 255"]),
    ("IPv4 with three parts", "mpi", "10.0.1\n", 1, ["'10.0.1' is not a valid IPv4 address"]),
    ("bad IPv6", "mpi", "fe80::zz slots=2\n", 1, ["is neither 'host:N' nor an IPv6 address"]),
    ("two colons", "mpi", "gpu01:4:5\n", 1, ["'gpu01:4:5' is neither 'host:N' nor an IPv6"]),
    ("bracketed IPv4", "mpi", "[10.0.0.1]:4\n", 1, ["brackets are only for IPv6 addresses"]),
    ("unclosed IPv6 bracket", "mpi", "[fe80::1:4\n", 1, ["write an IPv6 address in brackets"]),
    ("bad IPv6 in brackets", "mpi", "[fe80::zz]:4\n", 1, ["'fe80::zz' is not a valid IPv6 address"]),
    ("no host before colon", "mpi", ":4\n", 1, ["no host before ':'"]),
    ("nodelist in an MPI file", "mpi", "gpu[01-02] slots=4\n", 1,
     ["not a valid host name", "looks like a Slurm nodelist", "format: slurm"]),
    ("empty file", "auto", "", 1, ["the file is empty", "one host per line"]),
    ("only blank lines", "mpi", "\n\n", 2, ["end of file and no host listed", "all 2 lines"]),
    ("only comments", "auto", "# hosts\n\n   # none yet\n", 3,
     ["end of file and no host listed", "all 3 lines are blank or comments"]),
    # PBS
    ("pbs two words", "pbs", "gpu01\ngpu01 slots=2\n", 2,
     ["has 2 words", "one host name", "format: mpi"]),
    ("pbs host:N", "pbs", "gpu01\ngpu01:2\n", 2, ["a PBS nodefile has no slot counts"]),
    ("pbs bad name", "pbs", "gpu01\ngpu 01\n", 2, ["has 2 words"]),
    ("pbs bad character", "pbs", "gpu01\ngpu01\ngpu$02\n", 3, ["'gpu$02' is not a valid host name"]),
    ("pbs empty", "pbs", "# nothing\n", 1, ["end of file and no host listed", "once per slot"]),
    # Slurm
    ("slurm unclosed", "slurm", "gpu[01-\n", 1, ["unclosed '['", "character 4", "gpu[01-04]"]),
    ("slurm backwards", "slurm", "gpu[5-2]\n", 1, ["range '5-2' in 'gpu[5-2]' runs backwards",
                                                   "(2-5)"]),
    ("slurm empty brackets", "slurm", "gpu[]\n", 1, ["empty brackets in 'gpu[]'"]),
    ("slurm letters", "slurm", "gpu[a-c]\n", 1,
     ["'a-c' in the brackets of 'gpu[a-c]' is not a number or a range"]),
    ("slurm half range", "slurm", "gpu[1-]\n", 1, ["'1-' in the brackets", "not a number"]),
    ("slurm step", "slurm", "gpu[1-8:2]\n", 1, ["'1-8:2' in the brackets"]),
    ("slurm nested", "slurm", "gpu[1-[2-3]]\n", 1, ["nested '['", "character 7"]),
    ("slurm empty item", "auto", "a,,b\n", 1, ["empty item in Slurm nodelist 'a,,b' at character 3",
                                               "extra ','"]),
    ("slurm leading comma", "slurm", ",a\n", 1, ["empty item", "at character 1"]),
    ("slurm trailing comma", "slurm", "# list\na,\n", 2, ["empty item", "at the end"]),
    ("slurm empty entry in brackets", "slurm", "gpu[1,,2]\n", 1, ["an empty entry in the brackets"]),
    ("slurm stray ]", "slurm", "gpu]1\n", 1, ["']' without '['", "character 4"]),
    ("slurm space", "slurm", "gpu[1-2] gpu5\n", 1, ["space in Slurm nodelist", "character 9"]),
    ("slurm repeat", "slurm", "gpu[01-03],gpu02\n", 1,
     ["'gpu02' is in the Slurm nodelist twice (earlier on this line)"]),
    ("slurm repeat across lines", "slurm", "gpu[01-03]\n\ngpu03\n", 3,
     ["'gpu03' is in the Slurm nodelist twice (first on line 1)"]),
    ("slurm huge range", "slurm", "gpu[1-9999999]\n", 1, ["names 9999999 hosts", "65536"]),
    ("slurm huge product", "slurm", "a[1-1000]b[1-1000]\n", 1, ["more than the 65536 hosts"]),
    ("slurm bad name", "slurm", "gpu![1-2]\n", 1, ["'gpu!1' is not a valid host name"]),
    ("slurm empty", "slurm", "\n# none\n", 2, ["no host listed", "gpu[01-04]"]),
]


@pytest.mark.parametrize("fmt, text, line, words", [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_malformed_input_names_file_line_problem_and_fix(fmt, text, line, words):
    with pytest.raises(HostfileError) as caught:
        parse_hostfile(text, "hosts.txt", fmt)
    error = caught.value
    message = str(error)
    assert (error.path, error.line) == ("hosts.txt", line)
    assert message.startswith(f"hosts.txt, line {line}: "), message
    for word in words:
        assert word in message, message
    assert isinstance(error, ValueError)


def test_malformed_input_has_many_cases():
    assert len(BAD) >= 30


def test_unknown_format_and_bad_slots_per_node():
    with pytest.raises(HostfileError, match=r"hosts.txt: unknown format 'lsf'; use one of auto, mpi"):
        parse_hostfile("a\n", "hosts.txt", "lsf")
    for bad in (0, -2, True, "4"):
        with pytest.raises(HostfileError, match=r"^option slots_per_node: .* is not a slot count"):
            parse_hostfile("a\n", "hosts.txt", "mpi", slots_per_node=bad)


# --- the CLI's helpers ---------------------------------------------------------------------------

def test_read_hostfile_reads_a_path(tmp_path):
    hostfile = tmp_path / "my-hosts"
    hostfile.write_text("gpu01 slots=4\ngpu02 slots=4\n")
    assert read_hostfile(hostfile) == [Host("gpu01", 4, 1), Host("gpu02", 4, 2)]
    assert read_hostfile(str(hostfile), fmt="mpi", slots_per_node=2)[0].slots == 4


def test_read_hostfile_errors_name_the_path(tmp_path):
    hostfile = tmp_path / "my-hosts"
    hostfile.write_bytes(b"gpu01\n\xff\xfe\n")
    with pytest.raises(HostfileError, match=r"my-hosts, line 2: not UTF-8 text"):
        read_hostfile(hostfile)
    with pytest.raises(HostfileError, match=r"missing: cannot read it: No such file"):
        read_hostfile(tmp_path / "missing")


@pytest.mark.parametrize("name, text, expected", [
    ("my-hosts", "gpu01 slots=4\ngpu02 slots=4\n", True),
    ("nodefile", "gpu01\ngpu01\ngpu02\ngpu02\n", True),
    ("nodelist", "gpu[01-04]\n", True),
    ("bare-names", "gpu01\ngpu02\n", True),
    ("hosts.yml", "all:\n  children:\n    cluster:\n      hosts:\n        gpu01:\n", False),
    ("hosts-yaml-no-suffix", "all:\n  hosts:\n    gpu01:\n", False),
    ("hosts.ini", "gpu01\ngpu02\n", False),  # named as Ansible's: Ansible reads it
    ("ini-with-groups", "[cluster]\ngpu01\n", False),
    ("ini-with-vars", "gpu01 ansible_host=10.0.0.1\n", False),
    ("json", '{"all": {"hosts": ["gpu01"]}}\n', False),
    ("cfg.hostfile.yml", "plugin: torchfleet.cluster.hostfile\npath: my-hosts\n", False),
    ("empty", "", False),
    ("broken", "gpu01 slots=0\n", False),
])
def test_is_hostfile(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    assert is_hostfile(path) is expected


def test_is_hostfile_leaves_scripts_directories_and_missing_paths_to_ansible(tmp_path):
    script = tmp_path / "inventory-script"
    script.write_text("gpu01\n")
    os.chmod(script, 0o755)
    assert not is_hostfile(script)
    assert not is_hostfile(tmp_path)
    assert not is_hostfile(tmp_path / "missing")


def test_host_vars_and_inventory_shape():
    hosts = parse_hostfile("gpu01 slots=4\n10.0.0.2\n")
    assert host_vars(hosts[0]) == {"ansible_host": "gpu01", "nproc_per_node": 4}
    assert host_vars(hosts[1]) == {"ansible_host": "10.0.0.2"}  # playbooks' auto applies
    assert to_inventory(hosts, "gpus") == {"all": {"children": {"gpus": {
        "hosts": {"gpu01": {"ansible_host": "gpu01", "nproc_per_node": 4},
                  "10.0.0.2": {"ansible_host": "10.0.0.2"}},
        "vars": {"torchfleet_head": "gpu01"},
    }}}}
