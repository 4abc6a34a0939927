"""Partitions between two namespaces: a link that drops for a few seconds mid-transfer and comes back
(nothing lost), and a silent black hole longer than the liveness limit (TimeoutError within the op
timeout, then PeerLostError at the liveness limit on both sides, an idle CPU, and a fresh connect
that moves verified data once the path heals)."""
import time

import pytest

from netns import IP_B
from procs import fields
from scenario import (IDLE_CPU_LIMIT_MS, IDLE_WINDOW_MS, LONG, connect, now_ms, pair, rounds, serve, served,
                      server_counts)

pytestmark = pytest.mark.netns

SIZES = "4096,65536,200000"
SLOT = 512 << 10
OP_TIMEOUT_MS = 1500
HEARTBEAT_MS, HEARTBEAT_MISSES = 500, 6  # liveness limit: 3 s of silence
LIVENESS_MS = HEARTBEAT_MS * HEARTBEAT_MISSES
SLACK_MS = 1500  # scheduling on a loaded 2-core CI machine


@pytest.mark.parametrize("how", ["carrier", "blackhole"])
def test_link_down_mid_transfer_and_back_loses_nothing(topology, spawn, record, how):
    t = topology()
    server, client = pair(t, spawn, "tcp", slot=SLOT, timeout_ms=20000)
    cut = {"carrier": lambda on: t.link(not on), "blackhole": t.blackhole}[how]
    outages = 3 if LONG else 1
    client.send(f"soak 0 {2000 + outages * 4000} {SIZES}")
    for _ in range(outages):
        time.sleep(1.5)
        cut(True)
        time.sleep(2.0)
        cut(False)
    line = client.expect(("OK rounds", "ERR rounds"), 60)
    assert line.startswith("OK rounds"), line
    done, c = fields(line), server_counts(server)
    record(f"{how}: {outages} outage(s) of 2 s; {done['n']} rounds, {done['bytes']} bytes verified; "
           f"forwarders {t.stop_forwarders()}")
    assert c["rounds"] == done["n"] and c["bad"] == 0


@pytest.mark.parametrize("how", ["blackhole", "nftables"])
def test_black_hole_times_out_then_peer_lost_then_reconnects(topology, spawn, record, how):
    t = topology()
    liveness = dict(heartbeat_ms=HEARTBEAT_MS, heartbeat_misses=HEARTBEAT_MISSES)
    server, client = pair(t, spawn, "tcp", slot=SLOT, timeout_ms=OP_TIMEOUT_MS, **liveness)
    cut = {"blackhole": t.blackhole, "nftables": t.nft_partition}[how]
    client.send(f"soak 0 600000 {SIZES}")
    time.sleep(1.0)
    t_asked = now_ms()
    cut(True)
    # The path is cut once cut() returns: nft (loading its kernel modules on first use) took 2.5 s
    # on a busy machine, and the operation in flight then had that long to finish.
    t_cut = now_ms()

    # 1. The operation in flight fails with a typed TimeoutError within the op timeout.
    err = fields(client.expect(("ERR rounds", "OK rounds"), 30))
    assert err.get("status") == "TIMEOUT", err
    assert err["at"] - t_cut <= OP_TIMEOUT_MS + SLACK_MS, f"{err['at'] - t_cut:.0f} ms after the cut"

    # 2. Both sides declare the silent peer lost at the liveness limit.
    lost = fields(client.ask("until_lost 0 30000", ("LOSTAT", "ERR until_lost"), 40))
    assert lost.get("status") in ("PEER_LOST", "NOT_CONNECTED"), lost
    assert lost["at"] - t_cut <= LIVENESS_MS + OP_TIMEOUT_MS + SLACK_MS, f"{lost['at'] - t_cut:.0f} ms"
    server_lost = fields(server.expect("LOST 1 ", 30))
    assert server_lost["status"] == "PEER_LOST", server_lost
    assert server_lost["at"] - t_cut <= LIVENESS_MS + SLACK_MS, f"{server_lost['at'] - t_cut:.0f} ms"

    # 3. Nobody spins afterwards.
    cpu_client, cpu_server = client.idle_cpu_ms(IDLE_WINDOW_MS), server.idle_cpu_ms(IDLE_WINDOW_MS)
    assert cpu_client <= IDLE_CPU_LIMIT_MS and cpu_server <= IDLE_CPU_LIMIT_MS, (cpu_client, cpu_server)

    # 4. The path heals: a fresh session connects and moves verified data.
    cut(False)
    serve(server, 1, 1)
    client.send("reset")
    client.ready()
    connect(client, server, 0, 1, IP_B)
    served(server)
    done = rounds(client, 0, 10, SIZES, timeout=60)
    assert server_counts(server)["bad"] == 0
    record(f"{how}: cut in {t_cut - t_asked:.0f} ms; TimeoutError {err['at'] - t_cut:.0f} ms after the cut, client lost ({lost['status']}) at "
           f"{lost['at'] - t_cut:.0f} ms, server at {server_lost['at'] - t_cut:.0f} ms; idle CPU client "
           f"{cpu_client} ms, server {cpu_server} ms per {IDLE_WINDOW_MS} ms; {done['n']} rounds after reconnect")
