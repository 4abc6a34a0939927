"""Disaggregated prefill -> decode: a prefill process computes a request's KV cache and puts its
blocks into the decode process's free blocks with one put_blocks; the decode process waits for the
request's notification and checks every block.

    export PYTHONPATH=build/python HMC_AUTH_KEY=change-me-to-a-secret
    /usr/bin/python3 examples/python/kv_prefill_decode.py        # a store and both roles, this host

or one store (python -m hmc.store --port 29400) and each role on its own host:

    /usr/bin/python3 examples/python/kv_prefill_decode.py --role decode --store tcp://HOST:29400 --ip DECODE_IP
    /usr/bin/python3 examples/python/kv_prefill_decode.py --role prefill --store tcp://HOST:29400

The model is Llama-3-8B's KV shape cut to 4 layers (8 KV heads, head dim 128, bf16, 16-token
blocks: 32 KiB per block per layer, for K and for V). Prefill keeps its paged cache in one torch
tensor, [layer, K/V, block, token, head, dim], registered with its session and sent zero-copy
(put_blocks(memory=...)); cache[l, 0] and cache[l, 1] are layer l's K and V. Decode's cache is its
session buffer, where a put lands, in the same shape. Both publish what the other needs in the
store: decode its control address, its layout and, per request, its block table.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
import torch

import hmc

LAYERS, KV_HEADS, HEAD_DIM, TOKENS_PER_BLOCK = 4, 8, 128, 16
POOL = 256                                                            # blocks per layer, each side
BLOCK_BYTES = TOKENS_PER_BLOCK * KV_HEADS * HEAD_DIM * 2              # bf16
REQUESTS = (1000, 3000, 700)                                          # tokens of each request
TIMEOUT = 60


def layout():
    """Regions in [layer, K/V] order, each POOL blocks: offsets into the cache tensor or buffer."""
    return hmc.KvLayout([(r * POOL * BLOCK_BYTES, BLOCK_BYTES, POOL) for r in range(2 * LAYERS)])


def blocks_of(tokens):
    return (tokens + TOKENS_PER_BLOCK - 1) // TOKENS_PER_BLOCK


def expected(request, region, block):
    """What prefill computes for one logical block of one layer's K or V (seeded: decode recomputes it)."""
    g = torch.Generator().manual_seed(request * 1_000_003 + region * 10_007 + block)
    shape = (TOKENS_PER_BLOCK, KV_HEADS, HEAD_DIM)
    return torch.randint(-(1 << 15), 1 << 15, shape, dtype=torch.int16, generator=g).view(torch.bfloat16)


def prefill(store):
    cache = torch.empty((LAYERS, 2, POOL, TOKENS_PER_BLOCK, KV_HEADS, HEAD_DIM), dtype=torch.bfloat16)
    with hmc.create_session(buffer_size=1 << 20) as sess:
        reg = sess.register(cache)
        store.wait(["decode/address", "decode/layout"], timeout=TIMEOUT)
        ip, port = store.get("decode/address").decode().rsplit(":", 1)
        decode = sess.connect(ip, int(port), timeout=TIMEOUT)
        theirs = hmc.KvLayout.from_bytes(store.get("decode/layout"))
        rng = np.random.default_rng(1)
        for request, tokens in enumerate(REQUESTS):
            n = blocks_of(tokens)
            table = rng.choice(POOL, n, replace=False)                 # prefill's own free blocks
            for layer in range(LAYERS):
                for kv in range(2):
                    for logical, physical in enumerate(table):
                        cache[layer, kv, physical] = expected(request, 2 * layer + kv, logical)
            key = f"request/{request}/decode_table"
            store.wait([key], timeout=TIMEOUT)
            their_table = np.frombuffer(store.get(key), dtype=np.int64)
            start = time.perf_counter()
            sess.put_blocks(decode, layout(), table, their_table, remote_layout=theirs, memory=reg, notify=request)
            ms = (time.perf_counter() - start) * 1e3
            mib = n * 2 * LAYERS * BLOCK_BYTES / (1 << 20)
            print(f"prefill: request {request}: {tokens} tokens, {n} blocks x {2 * LAYERS} regions, "
                  f"{mib:.1f} MiB in {ms:.2f} ms", flush=True)
        store.wait(["decode/done"], timeout=TIMEOUT)


def decode(store, ip):
    mine = layout()
    with hmc.create_session(buffer_size=mine.end) as sess:
        sess.init_server(ip, 0)
        store.set("decode/layout", mine.to_bytes())
        store.set("decode/address", f"{ip}:{sess.ctrl_port}")
        rng = np.random.default_rng(2)
        prefill_rank = None
        for request, tokens in enumerate(REQUESTS):
            n = blocks_of(tokens)
            table = rng.choice(POOL, n, replace=False).astype(np.int64)  # decode's own free blocks
            store.set(f"request/{request}/decode_table", table.tobytes())
            if prefill_rank is None:
                sess.wait_peer(1, timeout=TIMEOUT)
                prefill_rank = 1
            sess.wait_notify(prefill_rank, request, timeout=TIMEOUT)  # every block of the request is here
            bad = 0
            for region in range(2 * LAYERS):
                offset, _, _, stride = mine.regions[region]
                for logical, physical in enumerate(table):
                    got = sess.buf.get_bytes(offset + int(physical) * stride, BLOCK_BYTES)
                    if got != expected(request, region, logical).view(torch.int16).numpy().tobytes():
                        bad += 1
            print(f"decode: request {request}: {n * 2 * LAYERS} blocks checked, {bad} wrong", flush=True)
            if bad:
                raise SystemExit(f"decode: request {request} has {bad} wrong blocks")
        store.set("decode/done", b"1")


def both():
    """A store and the two roles as processes on this host; exits non-zero if either fails."""
    store = subprocess.Popen([sys.executable, "-m", "hmc.store", "--host", "127.0.0.1", "--port", "0"],
                             stdout=subprocess.PIPE, text=True)
    try:
        ready = store.stdout.readline().split()
        if len(ready) != 2 or ready[0] != "READY":
            raise SystemExit(f"the store did not start: {ready}")
        url = "tcp://" + ready[1]
        me = [sys.executable, os.path.abspath(__file__), "--store", url]
        roles = [subprocess.Popen(me + ["--role", role]) for role in ("decode", "prefill")]
        deadline = time.monotonic() + 3 * TIMEOUT
        codes = [r.wait(timeout=max(1.0, deadline - time.monotonic())) for r in roles]
        if any(codes):
            raise SystemExit(f"decode exited {codes[0]}, prefill {codes[1]}")
        print("kv_prefill_decode: every block of every request arrived intact")
    finally:
        store.terminate()
        store.wait(timeout=10)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=("both", "prefill", "decode"), default="both")
    p.add_argument("--store", help="the store's URL (tcp://HOST:PORT); --role both starts one")
    p.add_argument("--ip", default="127.0.0.1", help="the address decode serves on")
    a = p.parse_args()
    if a.role == "both":
        return both()
    if not a.store:
        p.error("--role prefill/decode needs --store")
    with hmc.Store(a.store, job_id="kv-example", timeout=TIMEOUT) as store:
        prefill(store) if a.role == "prefill" else decode(store, a.ip)


if __name__ == "__main__":
    main()
