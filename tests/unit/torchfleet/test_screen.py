"""screen.py: lines redrawn in place on a terminal, told from the escapes it writes."""

import io

from torchfleet import screen

UP = screen.UP_AND_CLEAR


def test_open_lines_are_drawn_in_place_below_the_lines_that_ended():
    out, err = io.StringIO(), io.StringIO()
    live = screen.Live(out, err)
    live.piece("R", "n0/0e", " 10%")
    live.piece("R", "n0/0e", " 50%")
    live.line("a line of stdout")
    live.piece("R", "n1/0e", "[rank 1 n1]  5%")
    live.piece("D", "n0/0e", "100%")
    live.piece("S", "", "torchfleet: job 7 running")
    live.close()
    assert out.getvalue() == (
        " 10%\n" + UP.format(1) + " 50%\n"  # redrawn on its row
        + UP.format(1) + "a line of stdout\n 50%\n"  # a line above it, the bar below again
        + UP.format(1) + " 50%\n[rank 1 n1]  5%\n"  # a second bar, a row of its own
        + UP.format(2) + "100%\n[rank 1 n1]  5%\n"  # the first ends: its last state stays above
        + UP.format(1) + "[rank 1 n1]  5%\n"  # torchfleet's word went to stderr meanwhile
        + UP.format(1) + "[rank 1 n1]  5%\n")  # the end: an open line stays as it read
    assert err.getvalue() == "torchfleet: job 7 running\n"


def test_a_row_is_cut_to_the_terminals_width(monkeypatch):
    monkeypatch.setattr(screen.shutil, "get_terminal_size", lambda: screen.os.terminal_size((20, 5)))
    out = io.StringIO()
    live = screen.Live(out, io.StringIO())
    live.piece("R", "k", "x" * 50)
    assert out.getvalue() == "x" * 19 + "\n"
    live.piece("D", "k", "x" * 50)
    assert out.getvalue().endswith("x" * 50 + "\n")  # an ended line is printed whole


# A rank's line with what a terminal would run: the window title (OSC 0), the clipboard (OSC 52),
# a link (OSC 8), the screen cleared and the cursor moved (CSI), a C1 CSI, and a bell.
HOSTILE = ("\x1b]0;pwned\x07 \x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07 \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ "
           "\x1b[2J\x1b[H \x9b31m \x07 tab\there cr\rend")


def test_controls_are_shown_as_text_tab_and_carriage_return_kept():
    shown = screen.inert(HOSTILE)
    assert not screen.CONTROLS.search(shown) and "\x1b" not in shown and "\x9b" not in shown
    assert shown.startswith("\\x1b]0;pwned\\x07 \\x1b]52;c;") and "\\x1b[2J\\x1b[H \\x9b31m" in shown
    assert "tab\there cr\rend" in shown and screen.inert(shown) == shown  # kept; the same twice
    # A logger's colours pass as they are; a colour's look-alike that is a command does not.
    assert screen.inert("\x1b[1;32mINFO\x1b[0m ok") == "\x1b[1;32mINFO\x1b[0m ok"
    assert screen.inert("\x1b[2Jx\x1b[31;1H") == "\\x1b[2Jx\\x1b[31;1H"


def test_live_shows_a_ranks_lines_and_bars_as_text_and_draws_with_its_own_escapes(monkeypatch):
    monkeypatch.setattr(screen.shutil, "get_terminal_size", lambda: screen.os.terminal_size((200, 5)))
    out = io.StringIO()
    live = screen.Live(screen.Inert(out), io.StringIO())
    live.piece("R", "k", HOSTILE)
    live.line(HOSTILE)
    live.close()
    written = out.getvalue()
    # torchfleet's own escapes are the only ones: each redraw's, none of the rank's.
    assert written.replace(UP.format(1), "").count("\x1b") == 0 and UP.format(1) in written
    assert screen.inert(HOSTILE).expandtabs() in written


def test_only_a_terminal_gets_its_output_made_inert(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    terminal, file = Terminal(), io.StringIO()
    monkeypatch.setattr(screen.sys, "stdout", terminal)
    monkeypatch.setattr(screen.sys, "stderr", file)
    screen.guard_terminals()
    print(HOSTILE, file=screen.sys.stdout)
    print(HOSTILE, file=screen.sys.stderr)
    assert terminal.getvalue() == screen.inert(HOSTILE) + "\n"
    assert file.getvalue() == HOSTILE + "\n"  # a file or a pipe: the bytes as written, the user's to read
    assert screen.sys.stdout.isatty() and screen.drawing(screen.sys.stdout) is terminal
