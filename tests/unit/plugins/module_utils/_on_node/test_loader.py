"""loader.py: several files made one `python3 -S -c` program, run as the head runs it."""

import subprocess
import sys

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import loader


def test_a_program_keeps_its_files_relative_imports_and_exits_as_its_main_returns():
    sources = [("first", "WORD = 'hello'\n"),
               ("second", "import sys\nfrom .first import WORD\n\n\ndef main():\n    print(WORD, sys.argv[1:])\n"
                          "    return 3\n")]
    done = subprocess.run([sys.executable, "-S", "-c", loader.program_of(sources, "second"), "an", "argument"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (3, "hello ['an', 'argument']\n"), done.stderr
