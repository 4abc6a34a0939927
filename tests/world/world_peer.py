"""One rank of a Python world in its own process, for test_world.py.

    python3 world_peer.py <store> <size> <rank|auto> <blocking|asyncio> <tls> <scenario> [job] [torch]

store: a URL, or "torch:HOST:PORT[:master]" for a torch.distributed.TCPStore. Prints "RANK r", one
"OK name" or "FAIL name: why" per check, then "DONE"; an HMC error prints "ERROR <Class> <message>"
and exits 3. Scenarios: collectives, barriers (until an error), join.
"""
import asyncio
import hashlib
import sys

import numpy as np

import hmc

FAILS = 0


def say(*words):
    print(*words, flush=True)


def check(ok, name):
    global FAILS
    if ok:
        say("OK", name)
    else:
        FAILS += 1
        say("FAIL", name)


def data(src, dst, n):
    """Bytes that differ for every (source, destination, index)."""
    out = bytearray()
    seed = f"{src}:{dst}:{n}".encode()
    while len(out) < n:
        seed = hashlib.sha256(seed).digest()
        out += seed
    return bytes(out[:n])


class Blocking:
    """Gives the blocking World the awaitable shape the scenario is written in."""

    def __init__(self, world):
        self.w = world
        self.rank, self.size = world.rank, world.size

    def __getattr__(self, name):
        fn = getattr(self.w, name)

        async def call(*args, **kwargs):
            return fn(*args, **kwargs)

        return call


async def collectives(w, use_torch):
    r, n = w.rank, w.size
    await w.barrier()
    check(True, "barrier")
    for size in (0, 5, 777777):
        root = size % n
        got = await w.broadcast(data(root, 0, size) if r == root else None, root)
        check(got == data(root, 0, size), f"broadcast bytes {size}")
    arr = await w.broadcast(np.arange(1001, dtype=np.float32).reshape(7, 143) if r == n - 1 else None, n - 1)
    check(arr.shape == (7, 143) and (arr.ravel() == np.arange(1001)).all(), "broadcast array")

    got = await w.all_gather(data(r, 1, r * 9973 + (0 if r == 1 else 1)))
    check(got == [data(p, 1, p * 9973 + (0 if p == 1 else 1)) for p in range(n)], "all_gather bytes odd sizes")
    a = np.arange(100003, dtype=np.int16) + r
    got = await w.all_gather(a)
    check(len(got) == n and all((got[p] == np.arange(100003, dtype=np.int16) + p).all() for p in range(n)),
          "all_gather array")

    buf = np.empty((n, 100003), dtype=np.int16)  # a caller's output array, written in place
    got = await w.all_gather(a, out=buf)
    check(all(np.shares_memory(got[p], buf) for p in range(n)) and (buf[n - 1] == a - r + n - 1).all(),
          "all_gather into out")

    got = await w.gather(data(r, 2, r * 7919 + 5), root=2 % n)
    check(got == [data(p, 2, p * 7919 + 5) for p in range(n)] if r == 2 % n else got is None, "gather")
    root = n - 1
    got = await w.scatter([data(root, d, d * 50021 + 3) for d in range(n)] if r == root else None, root)
    check(got == data(root, r, r * 50021 + 3), "scatter")

    def pair(s, d):
        return 0 if (s + d) % 5 == 0 else (s + 1) * (d + 3) * 977 % 190001

    got = await w.all_to_all([data(r, d, pair(r, d)) for d in range(n)])
    check(got == [data(s, r, pair(s, r)) for s in range(n)], "all_to_all bytes odd sizes")
    got = await w.all_to_all([np.full(4099, r * 100 + d, dtype=np.int64) for d in range(n)])
    check(all((got[s] == s * 100 + r).all() and got[s].shape == (4099,) for s in range(n)), "all_to_all arrays")

    send = np.arange(n * 3001, dtype=np.int32) + r * 1_000_000  # split by views: the zero-copy input path
    got = await w.all_to_all([send[d * 3001:(d + 1) * 3001] for d in range(n)])
    check(all((got[s] == np.arange(r * 3001, (r + 1) * 3001) + s * 1_000_000).all() for s in range(n)),
          "all_to_all views of one array")

    for count in (1001, 300001):
        v = np.arange(count, dtype=np.int64) * (r + 1) - r
        total = await w.all_reduce(v)
        ranks = n * (n - 1) // 2
        check((total == np.arange(count) * (ranks + n) - ranks).all(), f"all_reduce sum {count}")
        f = (np.arange(count) + r * 37) % n - 0.5 * r
        mx = await w.all_reduce(f, op="max")
        expect = np.max([(np.arange(count) + p * 37) % n - 0.5 * p for p in range(n)], axis=0)
        check((mx == expect).all(), f"all_reduce max {count}")

    if use_torch:
        import torch

        t = await w.all_gather(torch.full((3, 2), float(r)))
        check(all(torch.equal(t[p], torch.full((3, 2), float(p))) for p in range(n)), "all_gather tensor")
        m = await w.all_reduce(torch.tensor([r, -r], dtype=torch.int32), op="min")
        check(torch.equal(m, torch.tensor([0, -(n - 1)], dtype=torch.int32)), "all_reduce tensor")
        b = await w.broadcast(torch.arange(6).reshape(2, 3) if r == 0 else None)
        check(torch.equal(b, torch.arange(6).reshape(2, 3)), "broadcast tensor")


def store_of(spec, size, rank):
    if not spec.startswith("torch:"):
        return spec
    import datetime

    import torch.distributed as dist

    _, host, port, *master = spec.split(":")
    return dist.TCPStore(host, int(port), size, bool(master), timeout=datetime.timedelta(seconds=30))


async def main():
    store, size, rank, style, tls, scenario = sys.argv[1:7]
    job = sys.argv[7] if len(sys.argv) > 7 else None
    use_torch = len(sys.argv) > 8 and sys.argv[8] == "torch"
    size = int(size)
    rank = None if rank == "auto" else int(rank)
    opts = dict(ucx_tls=tls, ucx_net_devices="lo", buffer_size=1 << 20, timeout=20, job_id=job)
    if store.startswith("tcp://") and rank is None:
        opts["start_store"] = False
    try:
        store = store_of(store, size, rank)
        if style == "mf":  # memfabric's names
            import hmc.mf as mf

            assert mf.initialize(store, size, rank, 0, opts) == 0, mf.get_last_err_msg()
            say("RANK", mf.rank_id())
            mf.barrier()
            got = mf.all_gather(data(mf.rank_id(), 5, 1000))
            check(got == b"".join(data(p, 5, 1000) for p in range(size)), "mf all_gather")
            mf.barrier()
            say("DONE")
            mf.uninitialize()
            sys.exit(1 if FAILS else 0)
        if style == "asyncio":
            w = await hmc.init_async_world(store, size, rank, **opts)
        else:
            w = Blocking(hmc.init_world(store, size, rank, **opts))
        say("RANK", w.rank)
        if scenario == "collectives":
            await collectives(w, use_torch)
        elif scenario == "barriers":
            while True:
                await w.barrier()
        await w.barrier()
        say("DONE")
        await w.close()
    except hmc.HMCError as e:
        say("ERROR", type(e).__name__, e)
        sys.exit(3)
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    asyncio.run(main())
