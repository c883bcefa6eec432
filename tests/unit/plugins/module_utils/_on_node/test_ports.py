"""ports.py: which sockets hold a port, read from real /proc/net/tcp text."""

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import ports


# Lines of a real /proc/net/tcp: a listener on 0.0.0.0:29577 (0x7389), one on :2024, and
# established connections to port 22.
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:7389 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 668753 1 000000008c3dc9a8 100 0 0 10 0
   1: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 84 1 0000000029d78d20 100 0 0 10 0
   2: 010012AC:920E 020012AC:0016 01 00000000:00000000 02:000A5FB7 00000000     0        0 576392 2 00000000d2b25a05 21 4 27 996 -1
"""


PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:7389 0000000000000000FFFF00000100007F:B2BF 06 00000000:00000000 03:00000865 00000000     0        0 0 3 00000000a3cdebde
"""


def test_listening_inodes():
    assert ports.listening_inodes(PROC_NET_TCP, 29577) == {668753}
    assert ports.listening_inodes(PROC_NET_TCP, 2024) == {84}
    assert ports.listening_inodes(PROC_NET_TCP, 37390) == set()  # 0x920E: a connection, not a bind
    assert ports.listening_inodes(PROC_NET_TCP6, 29577) == set()  # TIME_WAIT does not hold it
