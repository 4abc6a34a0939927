"""Building blocks the net tests share: a server in B and a client in A, connected across M."""
import os
import time

from netns import IP_A, IP_B
from procs import counts, fields

# HMC_NET_LONG=1 (scripts/test --long): 60 s soak, more rounds, clients, kills and outages.
LONG = os.environ.get("HMC_NET_LONG") == "1"

# CPU a peer burns in IDLE_WINDOW_MS with nothing to do: ~0 ms when idle (measured), the whole
# window when it spins. A survivor of a peer loss must idle under 1% of a core (IDLE_CPU_LIMIT_MS); tests
# that are not about idling after a loss only rule out a spinning or timer-storming loop (SPIN_LIMIT_MS).
IDLE_WINDOW_MS = 2000
IDLE_CPU_LIMIT_MS = 20
SPIN_LIMIT_MS = 300
# Errors a peer may see when the other side dies or goes silent: typed, never ERROR or untyped.
LOSS_STATUSES = {"PEER_LOST", "NOT_CONNECTED", "TIMEOUT"}


def now_ms():
    """CLOCK_MONOTONIC in ms, the clock the peers stamp their "at=" fields with."""
    return time.monotonic() * 1000


def server_in_b(t, spawn, tls="tcp", ranks=4, name="server", **opts):
    net = {"net_devices": "vb"} if tls == "tcp" else {"net_devices": "default"}
    opts.setdefault("ctrl", "tcp")
    return spawn("server", name, netns=t.b, tls=tls, local_ip=IP_B, bind=IP_B, ranks=ranks, **net, **opts)


def client_in_a(t, spawn, tls="tcp", name="client", **opts):
    net = {"net_devices": "va"} if tls == "tcp" else {"net_devices": "default"}
    opts.setdefault("ctrl", "tcp")
    return spawn("client", name, netns=t.a, tls=tls, local_ip=IP_A, **net, **opts)


def connect(client, server, server_rank, self_rank, ip, timeout=60):
    """Connects client to server (which must be serving self_rank); returns connect ms and transports."""
    line = client.ask(f"connect {server_rank} {self_rank} {ip} {server.ctrl_port} {server.data_port}",
                      ("CONNECTED", "ERR connect"), timeout)
    assert line.startswith("CONNECTED"), line
    f = fields(line)
    return f["ms"], f["tls"]


def serve(server, first, last, timeout_ms=60000):
    server.send(f"serve {first} {last} {timeout_ms}")


def served(server, timeout=60):
    line = server.expect(("SERVING", "ERR serve"), timeout)
    assert line.startswith("SERVING"), line
    return fields(line)["ms"]


def pair(t, spawn, tls="tcp", server_opts=None, **opts):
    """A server in B serving rank 1 and a client in A connected to it."""
    server = server_in_b(t, spawn, tls, **opts, **(server_opts or {}))
    client = client_in_a(t, spawn, tls, **opts)
    serve(server, 1, 1)
    connect(client, server, 0, 1, IP_B)
    served(server)
    return server, client


def rounds(client, peer, n, sizes, timeout):
    """n verified rounds; returns the OK line's fields (AssertionError with the peer's error otherwise)."""
    line = client.ask(f"rounds {peer} {n} {sizes}", ("OK rounds", "ERR rounds"), timeout)
    assert line.startswith("OK rounds"), line
    return fields(line)


def server_counts(server):
    return fields(server.ask("counts", "COUNTS", 10))


def flood_result(line):
    f = fields(line)
    f["statuses"] = counts(f["statuses"])
    return f
