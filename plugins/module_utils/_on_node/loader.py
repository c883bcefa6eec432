"""Several of the package's files made one program, the text of one `python3 -S -c` argument:
the probe the head sends to the other nodes (ssh_to_nodes.probe_command), the follower the controller
sends to the head, and the line server the follower sends to the other nodes. Standard library
only, and nothing of its package: the follower carries it to build the line server's program.
"""

from __future__ import annotations

# Each file's text made a module of a package `_on_node` (so their relative imports hold), in order,
# then MAIN's main().
LOADER = """
import sys, types
package = types.ModuleType("_on_node")
package.__path__ = []
sys.modules["_on_node"] = package
for name, text in SOURCES:
    module = types.ModuleType("_on_node." + name)
    module.__package__ = "_on_node"
    sys.modules[module.__name__] = module
    exec(compile(text, name + ".py", "exec"), module.__dict__)
sys.exit(sys.modules["_on_node." + MAIN].main())
"""


def program_of(sources, main: str) -> str:
    """The text of a program made of `sources`, (name, text) of the package's files, each before
    those importing it, that runs `main`'s main()."""
    return f"SOURCES = {list(sources)!r}\nMAIN = {main!r}\n" + LOADER
