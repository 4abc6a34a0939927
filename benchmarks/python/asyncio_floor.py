"""What an asyncio round trip costs with no HMC in it: the floor under hmc_bench.py's notify_lat.
Two processes; each round the client writes 8 bytes and awaits a future, the other process answers,
and the future is resolved. Two ways to see the answer:

  sleeping: each side sleeps in asyncio's selector on a Unix socketpair (add_reader), as event mode does;
  spinning: each side polls a shared-memory byte from a call_soon chain and never sleeps, as a
            spinning HMC driver does (no system call per round at all).

    /usr/bin/python3 benchmarks/python/asyncio_floor.py [--rounds 5000] [--way sleeping,spinning]

Prints one line per way: p50 and p99 in microseconds. No HMC import: it runs anywhere.
"""
import argparse
import asyncio
import mmap
import os
import socket
import time

WARMUP = 500
STOP = 255


def percentiles(lat):
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)]


async def sleeping_answer(sock):
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def readable():
        data = sock.recv(8)
        if not data:
            loop.remove_reader(sock.fileno())
            done.set_result(None)
            return
        sock.send(data)

    loop.add_reader(sock.fileno(), readable)
    await done


async def sleeping_ask(sock, rounds):
    loop = asyncio.get_running_loop()
    pending = [None]

    def readable():
        sock.recv(8)
        pending[0].set_result(None)

    loop.add_reader(sock.fileno(), readable)
    lat = []
    for i in range(rounds + WARMUP):
        pending[0] = loop.create_future()
        t = time.perf_counter()
        sock.send(b"x" * 8)
        await pending[0]
        if i >= WARMUP:
            lat.append((time.perf_counter() - t) * 1e6)
    loop.remove_reader(sock.fileno())
    return lat


def sleeping(rounds):
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    pid = os.fork()
    if pid == 0:
        a.close()
        asyncio.run(sleeping_answer(b))
        os._exit(0)
    b.close()
    try:
        return asyncio.run(sleeping_ask(a, rounds))
    finally:
        a.close()  # the answering side sees end of file and ends
        os.waitpid(pid, 0)


async def spinning_answer(shm):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    seen = [0]

    def poll():
        v = shm[0]
        if v == STOP:
            done.set_result(None)
            return
        if v != seen[0]:
            seen[0] = v
            shm[8] = v
        loop.call_soon(poll)

    loop.call_soon(poll)
    await done


async def spinning_ask(shm, rounds):
    loop = asyncio.get_running_loop()
    state = {"future": None, "want": 0, "running": True}

    def poll():
        f = state["future"]
        if f is not None and not f.done() and shm[8] == state["want"]:
            f.set_result(None)
        if state["running"]:
            loop.call_soon(poll)

    loop.call_soon(poll)
    lat = []
    for i in range(rounds + WARMUP):
        state["want"] = i % (STOP - 1) + 1
        state["future"] = loop.create_future()
        t = time.perf_counter()
        shm[0] = state["want"]
        await state["future"]
        if i >= WARMUP:
            lat.append((time.perf_counter() - t) * 1e6)
    state["running"] = False
    return lat


def spinning(rounds):
    shm = mmap.mmap(-1, 16)
    pid = os.fork()
    if pid == 0:
        asyncio.run(spinning_answer(shm))
        os._exit(0)
    try:
        return asyncio.run(spinning_ask(shm, rounds))
    finally:
        shm[0] = STOP
        os.waitpid(pid, 0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5000)
    p.add_argument("--way", default="sleeping,spinning")
    o = p.parse_args()
    if o.rounds < 1:
        p.error("--rounds must be at least 1")
    ways = {"sleeping": sleeping, "spinning": spinning}
    for name in o.way.split(","):
        if name not in ways:
            p.error(f"unknown way '{name}' (sleeping, spinning)")
        p50, p99 = percentiles(ways[name](o.rounds))
        print(f"asyncio round trip, {name}: p50 {p50:.2f} us, p99 {p99:.2f} us", flush=True)


if __name__ == "__main__":
    main()
