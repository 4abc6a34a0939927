"""Python overhead as a number: asyncio put latency (8 B, one in flight) and 1 MiB put bandwidth
(`depth` tasks in flight), two AsyncSessions on loopback in one process.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python/asyncio_put.py [transport=shm] [mode=adaptive]
Prints RESULT lines like hmc_loopback's.
"""
import asyncio
import statistics
import sys
import time

import hmc


async def main(tls, mode, small_iters=5000, big=1 << 20, big_iters=2000, depth=16):
    kw = dict(buffer_size=depth * big, ucx_tls=tls, ucx_net_devices="lo", progress_mode=mode)
    async with hmc.AsyncSession(**kw) as server, hmc.AsyncSession(**kw) as client:
        await server.init_server("127.0.0.1", 1, 0, 0, 0)
        await client.connect(0, 1, "127.0.0.1", 1, server.ctrl_port)
        for _ in range(200):  # warm-up
            await client.put_remote(0, None, 0, 0, 8)
        lat = []
        for _ in range(small_iters):
            t0 = time.perf_counter()
            await client.put_remote(0, None, 0, 0, 8)
            lat.append(time.perf_counter() - t0)
        lat.sort()
        p50, p99 = lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6
        print(f"[{tls}/{mode}] await put 8 B: mean {statistics.fmean(lat) * 1e6:.1f} us, p50 {p50:.1f} us, "
              f"p99 {p99:.1f} us")
        print(f"RESULT transport={tls} op=put_lat size=8 depth=1 p50_us={p50:.1f} p99_us={p99:.1f}")

        async def lane(i, n):
            for _ in range(n):
                await client.put_remote(0, None, i * big, i * big, big)

        await asyncio.gather(*(lane(i, 8) for i in range(depth)))  # warm-up
        t0 = time.perf_counter()
        await asyncio.gather(*(lane(i, big_iters // depth) for i in range(depth)))
        secs = time.perf_counter() - t0
        mbps = (big_iters // depth) * depth * big / secs / 1e6
        print(f"[{tls}/{mode}] await put 1 MiB x {big_iters}, depth {depth}: {mbps:.1f} MB/s")
        print(f"RESULT transport={tls} op=put size={big} depth={depth} mbps={mbps:.1f}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "shm", sys.argv[2] if len(sys.argv) > 2 else "adaptive"))
