"""A world's session counts its collectives' traffic (world.session.stats()), and world.stats() gives every rank's and their sum."""
import socket
import threading

import numpy as np

import hmc


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_ranks_stats_hold_its_collectives_bytes():
    url = f"tcp://127.0.0.1:{free_port()}"
    results, world_stats, errors = {}, {}, []

    def rank(r):
        try:
            with hmc.init_world(url, world_size=2, rank=r, ucx_tls="shm", timeout=20) as w:
                parts = w.all_gather(np.full(1000, r, dtype=np.int64))
                assert [int(p[0]) for p in parts] == [0, 1]
                w.barrier()
                results[r] = w.session.stats()
                w.barrier()
                world_stats[r] = w.stats()
        except Exception as e:  # reported below, from the test's thread
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for r in (0, 1):
        s = results[r]
        assert s["peers_connected"] == 1 and list(s["peers"]) == [1 - r]
        moved = sum(k["bytes"] for k in s["ops"].values())
        assert moved >= 8000, s  # its 1000 int64 went to the other rank, or the other's came here
        peer = s["peers"][1 - r]
        assert peer["put_bytes"] + peer["get_bytes"] + peer["message_bytes"] >= 8000, s
    # The world's view is one collective: every rank gets the same, and its total adds up the ranks.
    assert world_stats[0] == world_stats[1]
    w = world_stats[0]
    assert [sorted(rank["peers"]) for rank in w["ranks"]] == [[1], [0]]
    for r in (0, 1):
        assert w["ranks"][r]["ops"]["put"]["bytes"] >= results[r]["ops"]["put"]["bytes"]
    put = w["total"]["ops"]["put"]
    assert put["bytes"] == sum(rank["ops"]["put"]["bytes"] for rank in w["ranks"])
    assert put["latency_us"]["p50"] <= put["latency_us"]["p99"] <= put["latency_us"]["p999"]
    assert w["total"]["peers_connected"] == 2 and "peers" not in w["total"]
