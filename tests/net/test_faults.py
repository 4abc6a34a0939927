"""HMC between two namespaces through an impairing forwarder: every byte of every round is checked
(put, put_batch and put_pipeline to the server, get and get_pipeline back), nothing may be lost,
corrupted or fail, and the forwarder's counters prove the fault was really injected."""
import pytest

from scenario import IDLE_CPU_LIMIT_MS, IDLE_WINDOW_MS, LONG, pair, rounds, server_counts

pytestmark = pytest.mark.netns

ROUNDS = 600 if LONG else 24
SIZES = "1,4096,65536,200000"
SLOT = 512 << 10

# fault -> (forwarder impairments, the counter that must be > 0)
FAULTS = {
    "delay_jitter": ({"delay_ms": 5, "jitter_ms": 4}, "tx"),
    "loss_1pct": ({"drop": 0.01}, "dropped"),
    "loss_5pct": ({"drop": 0.05}, "dropped"),
    "reorder": ({"reorder": 0.05, "reorder_ms": 8, "delay_ms": 1}, "reordered"),
    "duplicate": ({"dup": 0.05}, "duplicated"),
    "corrupt": ({"corrupt": 0.02}, "corrupted"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_rounds_through_impaired_link_lose_and_corrupt_nothing(topology, spawn, record, fault):
    impairments, counter = FAULTS[fault]
    t = topology(**impairments)
    server, client = pair(t, spawn, "tcp", slot=SLOT, timeout_ms=20000)
    done = rounds(client, 0, ROUNDS, SIZES, timeout=600)
    c = server_counts(server)
    st = t.stop_forwarders()
    record(f"{fault}: {done['n']} rounds, {done['bytes']} bytes verified in {done['ms']} ms; "
           f"server rounds={c['rounds']} bad={c['bad']}; forwarders rx={st['rx']} dropped={st['dropped']} "
           f"corrupted={st['corrupted']} duplicated={st['duplicated']} reordered={st['reordered']}")
    assert done["n"] == ROUNDS and c["rounds"] == ROUNDS and c["bad"] == 0
    assert st[counter] > 0, f"the forwarders never {counter} a frame: {fault} was not injected"
    if fault == "corrupt":
        assert t.checksum_errors() > 0, "no corrupted frame reached a kernel's checksum check"


def test_default_transports_between_namespaces_move_verified_data(topology, spawn, record):
    """No UCX_TLS, no device list, automatic control transport: what a user gets by default. On one
    kernel UCX may pick shared memory here; whatever it picks must work and must not spin."""
    t = topology()
    server, client = pair(t, spawn, "default", slot=SLOT, timeout_ms=10000, ctrl="auto")
    done = rounds(client, 0, 12, SIZES, timeout=120)
    assert server_counts(server)["bad"] == 0
    cpu = client.idle_cpu_ms(IDLE_WINDOW_MS)
    record(f"default transports: {done['n']} rounds verified, client idle {cpu} ms CPU in {IDLE_WINDOW_MS} ms")
    assert cpu <= IDLE_CPU_LIMIT_MS
