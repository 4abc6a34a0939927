"""The impairment path itself, with a plain TCP stream: if these fail, the HMC fault tests prove nothing."""
import time

import pytest

from netns import IP_B
from procs import HERE, PYTHON, Child, fields

pytestmark = pytest.mark.netns

NBYTES = 2 << 20

# impairment -> the forwarder counter that shows it happened
IMPAIRMENTS = {
    "clean": ({}, "tx"),
    "drop": ({"drop": 0.05}, "dropped"),
    "corrupt": ({"corrupt": 0.05}, "corrupted"),
    "duplicate": ({"dup": 0.05}, "duplicated"),
    "reorder": ({"reorder": 0.05, "reorder_ms": 5}, "reordered"),
    "jitter": ({"delay_ms": 2, "jitter_ms": 2}, "tx"),
}


def stream(t, port, timeout=10):
    """NBYTES from A to B; returns (sent line fields, received line fields)."""
    sink = Child([PYTHON, HERE / "tcp_probe.py", "serve", IP_B, port], "tcp sink", netns=t.b, stdin=False)
    try:
        sink.expect("READY", 10)
        src = Child([PYTHON, HERE / "tcp_probe.py", "send", IP_B, port, NBYTES, port, timeout], "tcp source",
                    netns=t.a, stdin=False)
        sent = src.expect(("SENT", "ERR"), timeout + 20)
        src.stop()
        got = sink.expect("GOT", 30) if sent.startswith("SENT") else "GOT n=0"
        return sent, fields(got)
    finally:
        sink.stop(timeout=1)


@pytest.mark.parametrize("case", IMPAIRMENTS)
def test_tcp_stream_arrives_intact_through_each_impairment(topology, record, case):
    impairments, counter = IMPAIRMENTS[case]
    t = topology(**impairments)
    sent, got = stream(t, 5001)
    assert sent.startswith("SENT"), sent
    assert got["n"] == NBYTES and got["sha"] == fields(sent)["sha"]
    st = t.stop_forwarders()
    record(f"{NBYTES} bytes over TCP, forwarders {st}")
    assert st[counter] > 0, f"the forwarders never {counter} a frame: the impairment was not applied"
    assert st["send_errors"] == 0 and st["overflow"] == 0
    if case == "corrupt":
        # Checksums are computed in software (offloads off), so the receiving kernels catch the flips.
        assert t.checksum_errors() > 0


def test_delay_holds_every_frame(topology):
    t = topology(delay_ms=40)
    sent, _ = stream(t, 5002)
    # SYN and SYN-ACK each cross the forwarder once: the handshake cannot be shorter than two delays.
    assert fields(sent)["connect_ms"] >= 80, sent


@pytest.mark.parametrize("how", ["blackhole", "carrier", "nftables"])
def test_partition_stops_traffic_until_it_heals(topology, how):
    t = topology()
    cut = {"blackhole": t.blackhole, "carrier": lambda on: t.link(not on), "nftables": t.nft_partition}[how]
    cut(True)
    sent, _ = stream(t, 5003, timeout=2)
    assert sent.startswith("ERR"), f"traffic crossed a {how} partition: {sent}"
    cut(False)
    time.sleep(0.2)
    sent, got = stream(t, 5004)
    assert sent.startswith("SENT") and got["n"] == NBYTES, sent
    if how == "blackhole":
        assert t.stop_forwarders()["blackholed"] > 0
