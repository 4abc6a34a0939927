"""The host-memory half of memfabric's BM Python example (smem_bm_example.py), for test_mf_bm.py:
the same calls in the same order with `import hmc.mf as memfabric_hybrid`. What differs and why:
torch/torch_npu (NPU device, stream, npu tensors) and the L2G/G2L copies need an NPU, so the host
tensors are NumPy int32 arrays; `from memfabric_hybrid import bm` cannot follow an `import ... as`
alias, so bm and set_log_level are taken from the module object; each child prints "OK rank r" when
its G2H check passes.

    python3 mf_bm_example_host.py --world_size 4 --local_ranks 4 --url tcp://127.0.0.1:PORT
"""
import argparse
import logging
import multiprocessing
import sys

import numpy as np

import hmc.mf as memfabric_hybrid

bm = memfabric_hybrid.bm
set_log_level = memfabric_hybrid.set_log_level

COPY_SIZE = 4096
GVA_SIZE = 1024 * 1024 * 1024
BARRIER_TIMEOUT = 60


def generate_host_tensor(seed):
    count = COPY_SIZE // 4
    t = np.empty(count, dtype=np.int32)
    base = seed
    for i in range(count):
        base = (base * 23 + 17) % 32767
        t[i] = -base if (i + seed) % 3 == 0 else base
    return t


def child_init(device_id, rank_id, rank_size, url, auto_ranking):
    ret = memfabric_hybrid.initialize()
    if ret != 0:
        return ret
    config = bm.BmConfig()
    config.auto_ranking = auto_ranking
    if not auto_ranking:
        config.rank_id = rank_id
    config.set_nic("tcp://127.0.0.1:1234")
    return bm.initialize(store_url=url, world_size=rank_size, device_id=device_id, config=config)


def child_process(device_id, rank_id, rank_size, url, auto_ranking, barriers, results):
    ret = child_init(device_id, rank_id, rank_size, url, auto_ranking)
    if ret != 0:
        results.put(f"FAIL rank {rank_id}: initialize {ret} {memfabric_hybrid.get_last_err_msg()}")
        return
    bm_handle = bm.create(id=0, local_dram_size=GVA_SIZE, local_hbm_size=0, data_op_type=bm.BmDataOpType.DEVICE_RDMA)
    bm_handle.join()
    barriers[0].wait(BARRIER_TIMEOUT)
    address = bm_handle.peer_rank_ptr(peer_rank=rank_id, mem_type=bm.BmMemType.HOST)
    remote = bm_handle.peer_rank_ptr(peer_rank=((rank_id + 1) % rank_size), mem_type=bm.BmMemType.HOST)
    cpu_src_tensor = generate_host_tensor(rank_id)
    rc = bm_handle.copy_data(src_ptr=cpu_src_tensor.ctypes.data, dst_ptr=remote, size=COPY_SIZE, type=bm.BmCopyType.H2G)
    barriers[1].wait(BARRIER_TIMEOUT)
    cpu_dst_tensor = generate_host_tensor((rank_id + rank_size - 1) % rank_size)
    rc2 = bm_handle.copy_data(src_ptr=address, dst_ptr=cpu_src_tensor.ctypes.data, size=COPY_SIZE,
                              type=bm.BmCopyType.G2H)
    ok = rc == 0 and rc2 == 0 and np.array_equal(cpu_src_tensor, cpu_dst_tensor)
    results.put(f"OK rank {rank_id}" if ok else f"FAIL rank {rank_id}: check G2H data failed ({rc}, {rc2})")
    del bm_handle
    barriers[2].wait(BARRIER_TIMEOUT)


def main_process():
    parser = argparse.ArgumentParser(description="host half of memfabric's BM example")
    parser.add_argument("--world_size", type=int, required=True)
    parser.add_argument("--local_ranks", type=int, required=True)
    parser.add_argument("--rank_start", type=int, default=0)
    parser.add_argument("--url", type=str, required=True)
    parser.add_argument("--auto_ranking", action="store_true")
    args = parser.parse_args()
    barriers = [multiprocessing.Barrier(args.local_ranks) for _ in range(3)]
    results = multiprocessing.Queue()
    children = []
    for i in range(args.local_ranks):
        p = multiprocessing.Process(target=child_process, args=(i, i + args.rank_start, args.world_size, args.url,
                                                                 args.auto_ranking, barriers, results))
        p.start()
        children.append(p)
    lines = [results.get(timeout=BARRIER_TIMEOUT) for _ in children]
    for p in children:
        p.join(BARRIER_TIMEOUT)
    for line in sorted(lines):
        print(line, flush=True)
    return 0 if all(line.startswith("OK") for line in lines) and all(p.exitcode == 0 for p in children) else 1


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    set_log_level(2)
    sys.exit(main_process())
