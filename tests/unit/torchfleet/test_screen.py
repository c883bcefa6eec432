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
