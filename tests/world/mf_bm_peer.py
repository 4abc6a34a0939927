"""One rank of hmc.mf's BM and SMEM over a world, for test_mf_bm.py.

    python3 mf_bm_peer.py <store> <size> <rank> <ucx_tls> <copies|kill> [CERTS]

Prints one "OK name" or "FAIL name: why" per check, then "DONE". copies: every host copy type with
every byte checked, a batch of 10,000 copies, refused addresses, SMEM. kill: the last rank exits
after a barrier and the others' copies to it must fail with PEER_LOST within operation_timeout.
CERTS (a folder of ranks.make_certs): the config store runs over TLS, with node.pem and the
encrypted node-enc.key, whose password comes from a decrypt function.
"""
import hashlib
import os
import sys
import time

import numpy as np

import hmc
import hmc.mf as mf
from hmc.mf import bm, shm

FAILS = 0
KiB, MiB = 1 << 10, 1 << 20
DRAM = 12 * MiB
SLOT = 16 * KiB
# Regions of every rank's contribution (offsets), each holding one SLOT per writing rank.
A, B, C, D, E, F = (i * 8 * SLOT for i in range(6))
BATCH = 1 * MiB      # 10,000 copies of 8 bytes into 16-byte slots
BIG = 2 * MiB        # one copy larger than the 4 MiB staging area
BIG_SIZE = 5 * MiB + 3
OP_TIMEOUT = 5


def say(*words):
    print(*words, flush=True)


def check(ok, name, why=""):
    global FAILS
    if ok:
        say("OK", name)
    else:
        FAILS += 1
        say("FAIL", name + (f": {why}" if why else ""))


def data(*key, n):
    out = bytearray()
    seed = repr(key).encode()
    while len(out) < n:
        seed = hashlib.sha256(seed).digest()
        out += seed
    return np.frombuffer(bytes(out[:n]), dtype=np.uint8).copy()


def size_of(writer):
    return SLOT - 7 * writer - 1  # odd sizes, none a multiple of 8


def ok_code(rc, name):
    check(rc == 0, name, f"rc={rc} {mf.get_and_clear_last_err_msg()}")


def copies(mem, rank, size):
    H2G, G2H, H2GH, GH2H, G2G = (bm.BmCopyType.H2G, bm.BmCopyType.G2H, bm.BmCopyType.H2GH,
                                 bm.BmCopyType.GH2H, bm.BmCopyType.G2G)
    ptr = [mem.peer_rank_ptr(r, bm.BmMemType.HOST) for r in range(size)]
    nxt, far, prev = (rank + 1) % size, (rank + 2) % size, (rank + size - 1) % size
    n = size_of(rank)
    keep = []

    def src(*key, n):
        a = data(*key, n=n)
        keep.append(a)
        return a.ctypes.data

    # H2G and H2GH into every rank, this one included (a local copy).
    for d in range(size):
        ok_code(mem.copy_data(src("A", rank, d, n=n), ptr[d] + A + rank * SLOT, n, H2G), f"H2G to {d}")
        ok_code(mem.copy_data(src("B", rank, d, n=n), ptr[d] + B + rank * SLOT, n, H2GH), f"H2GH to {d}")
    big = src("big", rank, n=BIG_SIZE)
    ok_code(mem.copy_data(big, ptr[nxt] + BIG, BIG_SIZE, H2G), "H2G larger than the staging area")
    mf.barrier()
    # G2G: remote to remote (staged here), local to remote, remote to local, local to local.
    ok_code(mem.copy_data(ptr[nxt] + A + rank * SLOT, ptr[far] + C + rank * SLOT, n, G2G), "G2G between two others")
    ok_code(mem.copy_data(ptr[rank] + A + rank * SLOT, ptr[nxt] + D + rank * SLOT, n, G2G), "G2G local to remote")
    ok_code(mem.copy_data(ptr[prev] + A + rank * SLOT, ptr[rank] + E + rank * SLOT, n, G2G), "G2G remote to local")
    ok_code(mem.copy_data(ptr[rank] + A + rank * SLOT, ptr[rank] + F + rank * SLOT, n, G2G), "G2G local to local")
    mf.barrier()
    # Read everything back from every rank, every byte (G2H and GH2H).
    for d in range(size):
        for w in range(size):
            m = size_of(w)
            for region, kind, expect in (
                    (A, G2H, data("A", w, d, n=m)), (B, GH2H, data("B", w, d, n=m)),
                    (C, G2H, data("A", w, (w + 1) % size, n=m) if d == (w + 2) % size else None),
                    (D, GH2H, data("A", w, w, n=m) if d == (w + 1) % size else None),
                    (E, G2H, data("A", w, (w + size - 1) % size, n=m) if d == w else None),
                    (F, G2H, data("A", w, w, n=m) if d == w else None)):
                if expect is None:
                    continue
                got = np.zeros(m, dtype=np.uint8)
                rc = mem.copy_data(ptr[d] + region + w * SLOT, got.ctypes.data, m, kind)
                check(rc == 0 and (got == expect).all(), f"{kind.name} rank {d} region {region} writer {w}",
                      f"rc={rc} {mf.get_and_clear_last_err_msg()}")
    got = np.zeros(BIG_SIZE, dtype=np.uint8)
    rc = mem.copy_data(ptr[rank] + BIG, got.ctypes.data, BIG_SIZE, G2H)
    check(rc == 0 and (got == data("big", prev, n=BIG_SIZE)).all(), "G2H larger than the staging area")


def batches(mem, rank, size):
    count = 10_000
    nxt = (rank + 1) % size
    base = mem.peer_rank_ptr(nxt, bm.BmMemType.HOST) + BATCH
    order = np.random.default_rng(rank).permutation(count)  # scattered destinations: nothing merges
    values = data("batch", rank, n=8 * count)
    srcs = [values.ctypes.data + 8 * i for i in range(count)]
    dsts = [base + 16 * int(order[i]) for i in range(count)]
    t = time.monotonic()
    ok_code(mem.copy_data_batch(srcs, dsts, [8] * count, count, bm.BmCopyType.H2G, 0), "H2G batch of 10,000")
    back = np.zeros(8 * count, dtype=np.uint8)
    outs = [back.ctypes.data + 8 * i for i in range(count)]
    ok_code(mem.copy_data_batch(dsts, outs, [8] * count, count, bm.BmCopyType.G2H, 0), "G2H batch of 10,000")
    check((back == values).all(), "batch bytes round trip")
    say("INFO batch seconds", round(time.monotonic() - t, 2))
    mf.barrier()
    # The owner checks its slots in one local read: each slot holds the previous rank's 8 bytes.
    prev = (rank + size - 1) % size
    mine = np.zeros(16 * count, dtype=np.uint8)
    ok_code(mem.copy_data(mem.peer_rank_ptr(rank, bm.BmMemType.HOST) + BATCH, mine.ctypes.data, 16 * count,
                          bm.BmCopyType.G2H), "local read of the batch area")
    expect = np.zeros(16 * count, dtype=np.uint8)
    their = data("batch", prev, n=8 * count).reshape(count, 8)
    order = np.random.default_rng(prev).permutation(count)
    expect.reshape(count, 16)[order, :8] = their
    check((mine == expect).all(), "batch landed at every scattered slot")


def refusals(mem, rank, size):
    nxt = (rank + 1) % size
    ptr = mem.peer_rank_ptr(nxt, bm.BmMemType.HOST)
    ones = np.full(100, 0xAB, dtype=np.uint8)
    invalid = -int(hmc.Status.INVALID_ARGUMENT)
    end = ptr + DRAM - 5
    rc = mem.copy_data(ones.ctypes.data, end, 100, bm.BmCopyType.H2G)
    msg = mf.get_and_clear_last_err_msg()
    check(rc == invalid and f"{end:#x}" in msg and "outside rank" in msg, "past the end refused", f"{rc} {msg}")
    good = mem.peer_rank_ptr(nxt, bm.BmMemType.HOST) + F + 7 * SLOT  # a slot nobody writes
    rc = mem.copy_data_batch([ones.ctypes.data] * 2, [good, end], [100, 100], 2, bm.BmCopyType.H2G, 0)
    check(rc == invalid, "a batch with one bad copy refused")
    cases = {"host pointer as destination GVA": (ones.ctypes.data, ones.ctypes.data + 1, bm.BmCopyType.H2G),
             "GVA as host source": (ptr, ptr, bm.BmCopyType.H2G),
             "rank outside the world": (ones.ctypes.data, ptr + ((size + 1) << 44), bm.BmCopyType.H2G),
             "device GVA for GH": (ones.ctypes.data, mem.peer_rank_ptr(nxt, bm.BmMemType.DEVICE), bm.BmCopyType.H2GH),
             "device GVA (no HBM)": (ones.ctypes.data, mem.peer_rank_ptr(nxt, bm.BmMemType.DEVICE), bm.BmCopyType.H2G)}
    for name, (s, d, kind) in cases.items():
        rc = mem.copy_data(s, d, 10, kind)
        check(rc == invalid and "0x" in mf.get_and_clear_last_err_msg(), name)
    mf.barrier()
    tail, slot = np.zeros(5, dtype=np.uint8), np.zeros(100, dtype=np.uint8)
    mine = mem.peer_rank_ptr(rank, bm.BmMemType.HOST)
    mem.copy_data(mine + DRAM - 5, tail.ctypes.data, 5, bm.BmCopyType.G2H)
    mem.copy_data(mine + F + 7 * SLOT, slot.ctypes.data, 100, bm.BmCopyType.G2H)
    check(not tail.any() and not slot.any(), "nothing of a refused copy arrived")


def smem(rank, size):
    obj = shm.create(5, size, rank, 2 * MiB, shm.ShmDataOpType.MTE, 0)
    obj.barrier()
    got = obj.all_gather(f"rank{rank}:".encode() * 3000)  # 18 KB each: more than one inline piece
    check(got == b"".join(f"rank{r}:".encode() * 3000 for r in range(size)), "SMEM all_gather")
    check(obj.local_rank == rank and obj.rank_size == size, "SMEM local_rank and rank_size")
    gvas = obj.all_gather(obj.gva.to_bytes(8, "little"))
    check(len(set(gvas[i:i + 8] for i in range(0, len(gvas), 8))) == 1, "SMEM gva agrees on every rank")
    check(obj.set_context(b"ctx") == 0 and obj.context == b"ctx", "SMEM set_context")
    check(obj.query_support_data_operation() == 0 and obj.topology_can_reach((rank + 1) % size, 0) == 0
          and obj.topology_can_reach(size, 0) == -int(hmc.Status.INVALID_ARGUMENT), "SMEM queries")
    obj.barrier()
    check(obj.destroy() == 0, "SMEM destroy")


def main():
    url, size, rank, tls, scenario = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    check(mf.initialize() == 0, "initialize")
    if len(sys.argv) > 6:
        certs = sys.argv[6]
        ok_code(mf.set_conf_store_tls(True, f"tlsCaPath: {certs}; tlsCaFile: ca.pem; tlsCert: {certs}/node.pem"),
                "set_conf_store_tls")
        decrypted = []
        with open(os.path.join(certs, "node-enc.key")) as f:
            ok_code(mf.set_conf_store_tls_key(f.read(), "ciphertext", lambda c: decrypted.append(c) or "node-password"),
                    "set_conf_store_tls_key")
        check(decrypted == ["ciphertext"], "the decrypt function is called once, with the ciphertext")
    config = bm.BmConfig()
    config.rank_id = rank
    config.operation_timeout = OP_TIMEOUT
    config.init_timeout = config.create_timeout = 30
    config.world_options = {"ucx_tls": tls, "buffer_size": 4 * MiB + DRAM}
    ok_code(bm.initialize(url, size, 0, config), "bm.initialize")
    if len(sys.argv) > 6:
        try:
            hmc.Store(url, timeout=5).close()
            check(False, "the world's store refuses a client without TLS", "a plain client got in")
        except hmc.AuthenticationError as e:
            check("requires TLS" in str(e), "the world's store refuses a client without TLS", str(e))
    check(bm.bm_rank_id() == rank, "bm_rank_id")
    sconfig = shm.ShmConfig()
    sconfig.operation_timeout = OP_TIMEOUT
    ok_code(shm.initialize(url, size, rank, 0, sconfig), "shm.initialize shares the world")
    mem = bm.create(0, DRAM, 0, bm.BmDataOpType.DEVICE_RDMA, 0)
    ok_code(mem.join(), "join")
    check(mem.local_mem_size(bm.BmMemType.HOST) == DRAM and mem.local_mem_size(bm.BmMemType.DEVICE) == 0,
          "local_mem_size")
    ptrs = np.array([mem.peer_rank_ptr(r, bm.BmMemType.HOST) for r in range(size)], dtype=np.uint64)
    everyone = mf.all_gather(ptrs.tobytes())
    check(everyone == ptrs.tobytes() * size and len(set(ptrs.tolist())) == size, "peer_rank_ptr agrees on every rank")
    if scenario == "kill":
        victim = size - 1
        mf.barrier()
        if rank == victim:
            os._exit(0)
        target = mem.peer_rank_ptr(victim, bm.BmMemType.HOST)
        buf = np.ones(4096, dtype=np.uint8)
        start = time.monotonic()
        rc = 0
        while rc == 0 and time.monotonic() - start < OP_TIMEOUT + 5:
            rc = mem.copy_data(buf.ctypes.data, target + rank * 4096, 4096, bm.BmCopyType.H2G)
        msg = mf.get_and_clear_last_err_msg()
        took = time.monotonic() - start
        check(rc == -int(hmc.Status.PEER_LOST) and f"rank {victim}" in msg and took < OP_TIMEOUT + 1,
              "copies to a killed rank fail with PEER_LOST in time", f"rc={rc} after {took:.1f}s: {msg}")
    else:
        copies(mem, rank, size)
        batches(mem, rank, size)
        refusals(mem, rank, size)
        smem(rank, size)
        ok_code(mem.leave(), "leave")
    mem.destroy()
    bm.uninitialize()
    shm.uninitialize()
    mf.uninitialize()
    say("DONE" if FAILS == 0 else f"FAILED {FAILS}")
    return 0 if FAILS == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
