"""tail.py's reading of a rank's output: lines redrawn with "\\r" (progress bars) and lines of
any length, in pieces, with the memory a reader holds bounded (real files of this machine)."""

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import tail as tl


def _pieces(tail, final=False):
    found, _more = tail.pieces(final)
    return [(kind.decode(), text.decode()) for kind, text in found]


def test_a_redrawn_line_comes_as_each_redraw_and_its_end(tmp_path):
    log = tmp_path / "stderr.log"
    tail = tl.Tail(str(log))
    with open(log, "w") as out:
        out.write("epoch 1\n\r  0%|  | 0/3")
        out.flush()
        # What the line reads now, while it is open: drawn on a terminal, never a line of its own.
        assert _pieces(tail) == [("L", "epoch 1"), ("R", "  0%|  | 0/3")]
        assert _pieces(tail) == []  # nothing new: nothing said, nothing re-read
        out.write("\r 33%|# | 1/3\r 67%|##| 2/3")
        out.flush()
        assert _pieces(tail) == [("P", "  0%|  | 0/3"), ("P", " 33%|# | 1/3"), ("R", " 67%|##| 2/3")]
        out.write("\r100%|##| 3/3\nafter\n")
        out.flush()
        assert _pieces(tail) == [("P", " 67%|##| 2/3"), ("D", "100%|##| 3/3"), ("L", "after")]


def test_a_crlf_split_between_two_looks_is_one_lines_end(tmp_path):
    log = tmp_path / "stdout.log"
    tail = tl.Tail(str(log))
    log.write_bytes(b"windows line\r")
    assert _pieces(tail) == [("R", "windows line")]
    with open(log, "ab") as out:
        out.write(b"\nnext\r\n")
    assert _pieces(tail) == [("D", "windows line"), ("L", "next")]


def test_a_line_of_any_length_is_passed_on_in_pieces_with_the_memory_held_bounded(tmp_path):
    log = tmp_path / "stdout.log"
    tail = tl.Tail(str(log))
    written = b"".join(b"%07d" % n for n in range(1_500_000))  # 10.5 MB, no newline, while it is written
    pieces = []
    with open(log, "wb") as out:
        for start in range(0, len(written), 3 << 20):
            out.write(written[start:start + (3 << 20)])
            out.flush()
            while True:
                found, more = tail.pieces()
                pieces += found
                assert len(tail.partial) <= tl.LINE_CAP
                if not more:
                    break
    found, _more = tail.pieces(final=True)
    pieces += found
    kinds = [kind for kind, _text in pieces]
    assert kinds.count(b"C") == len(written) // tl.LINE_CAP and kinds[-1] == b"D"
    assert b"".join(text for kind, text in pieces if kind in (b"C", b"D")) == written
    assert all(len(text) <= tl.DRAWING_CAP for kind, text in pieces if kind == b"R")


def test_a_cut_never_splits_a_character(tmp_path):
    log = tmp_path / "stdout.log"
    text = ("é" * tl.LINE_CAP).encode()  # two bytes each
    log.write_bytes(text + b"\n")
    tail = tl.Tail(str(log))
    pieces = []
    while True:
        found, more = tail.pieces()
        pieces += found
        if not more:
            break
    for kind, piece in pieces:
        if kind in (b"C", b"D"):
            piece.decode()  # raises where a character was cut in two
    assert b"".join(piece for kind, piece in pieces if kind in (b"C", b"D")) == text
