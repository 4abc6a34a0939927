"""One server and many client processes on one host, each with its own region of the server's
buffer, every round verified; prints connect times and the server's RSS, threads and fds."""
import statistics

import pytest

from procs import fields
from scenario import LONG, serve, served, server_counts

CLIENTS = 64  # about 10 s for both transports on the 2-core CI machine
ROUNDS = 200 if LONG else 20
SLOT = 128 << 10


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_one_server_many_clients_all_verified(spawn, record, tls):
    opts = dict(tls=tls, net_devices="lo", slot=SLOT, timeout_ms=30000)
    server = spawn("server", "server", ranks=CLIENTS, **opts)
    idle = server.stats()
    clients = [spawn("client", f"client {r}", ready=False, **opts) for r in range(1, CLIENTS + 1)]
    for c in clients:
        c.ready()
    serve(server, 1, CLIENTS, 120000)
    for r, c in enumerate(clients, 1):
        c.send(f"connect 0 {r} 127.0.0.1 {server.ctrl_port} {server.data_port}")
    connect_ms = []
    for c in clients:
        line = c.expect(("CONNECTED", "ERR connect"), 120)
        assert line.startswith("CONNECTED"), line
        connect_ms.append(fields(line)["ms"])
    all_ms = served(server, 120)
    full = server.stats()
    for c in clients:
        c.send(f"rounds 0 {ROUNDS} 4096,{SLOT // 2}")
    for c in clients:
        line = c.expect(("OK rounds", "ERR rounds"), 120)
        assert line.startswith("OK rounds"), f"{c.name}: {line}"
    counted = server_counts(server)
    assert counted["rounds"] == CLIENTS * ROUNDS and counted["bad"] == 0
    client = clients[0].stats()
    for c in clients:
        c.stop()
    for _ in clients:
        server.expect("LOST ", 30)
    after = server.stats()
    record(f"{tls}: {CLIENTS} clients x {ROUNDS} rounds = {counted['bytes']} bytes verified; connect ms "
           f"min/median/max {min(connect_ms)}/{statistics.median(connect_ms):.0f}/{max(connect_ms)}, all served "
           f"after {all_ms} ms; server rss_kb/threads/fds idle {idle['rss_kb']}/{idle['threads']}/{idle['fds']}, "
           f"{CLIENTS} connected {full['rss_kb']}/{full['threads']}/{full['fds']}, all gone "
           f"{after['rss_kb']}/{after['threads']}/{after['fds']}; one client {client['rss_kb']}/{client['threads']}/"
           f"{client['fds']}")
    # Every client's sockets and endpoints go with it.
    assert after["fds"] <= idle["fds"] + 2, (idle, after)
