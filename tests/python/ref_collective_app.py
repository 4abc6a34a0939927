"""The reference package's collective app (apps/python_app/collective.py: one rank of an all-to-all
under torchrun, gloo for torch.distributed) as a driver: the same hmc calls with the same arguments.
Differences: every byte of every block is checked (the app checks one per block); ALGO lists the
calls made in a row on one group (comma-separated "direct", the app's, and "ring");
HMC_DRIVER_TIMEOUT sets the session timeout; HMC_DRIVER_MISSING_RANK names a rank that exits
before alltoall (HMC_DRIVER_MISSING_HOW=idle: stays, in a torch barrier), and the others then print
the typed error and exit 3."""
import os
import sys

import hmc
import torch
import torch.distributed as dist


def main():
    dist.init_process_group(backend="gloo")
    rank = int(dist.get_rank())
    local_rank = int(os.environ.get("LOCAL_RANK", -1))
    world = int(dist.get_world_size())

    ip = os.environ.get("HMC_IP", "192.168.2.244")
    base = int(os.environ.get("HMC_BASE_PORT", "25000"))
    port_ucx = base + local_rank
    port_rdma = base + 1000 + local_rank
    ctrl_tcp_port = int(os.environ.get("HMC_CTRL_TCP_PORT", str(base + 2000))) + local_rank

    options = {"timeout": float(os.environ["HMC_DRIVER_TIMEOUT"])} if "HMC_DRIVER_TIMEOUT" in os.environ else {}
    sess = hmc.create_session(device_id=local_rank, buffer_size=64 * 1024 * 1024, mem_type=hmc.MemoryType.CPU,
                              **options)
    try:
        g = hmc.collective.init_group(session=sess, my_ip=ip, port_ucx=port_ucx, port_rdma=port_rdma,
                                      port_ctrl=ctrl_tcp_port, group_id="ut")
    except hmc.HMCError as e:
        print(f"[rank {rank}] typed error {type(e).__name__}: {e}", flush=True)
        os._exit(3)

    dist.barrier()
    if rank == 0:
        print("members:", [(m.rank, m.ip, m.port_ucx, m.port_rdma, m.port_ctrl, int(m.mem_type)) for m in g.members])
    if int(os.environ.get("HMC_DRIVER_MISSING_RANK", -1)) == rank:
        print(f"[rank {rank}] missing from alltoall", flush=True)
        if os.environ.get("HMC_DRIVER_MISSING_HOW") == "idle":
            dist.barrier()  # alive, serving, but elsewhere: ends when the others give up and exit
        os._exit(0)

    ok = True
    for algo in os.environ.get("ALGO", "direct").split(","):  # one group, several calls in a row
        bytes_per_peer = 1 * 1024 * 1024
        send = torch.empty(bytes_per_peer * world, dtype=torch.uint8)
        recv = torch.empty_like(send)
        for peer in range(world):
            send[peer * bytes_per_peer:(peer + 1) * bytes_per_peer].fill_((rank * 10 + peer + len(algo)) & 0xFF)

        try:
            hmc.collective.alltoall(g, send, recv, algo=algo, conn="auto", chunk_bytes=4 * 1024 * 1024,
                                    do_self_copy=True)
        except hmc.HMCError as e:
            print(f"[rank {rank}] typed error {type(e).__name__}: {e}", flush=True)
            os._exit(3)

        for peer in range(world):
            block = recv[peer * bytes_per_peer:(peer + 1) * bytes_per_peer]
            expect = (peer * 10 + rank + len(algo)) & 0xFF
            if not bool((block == expect).all()):
                ok = False
                print(f"[rank {rank}] {algo} MISMATCH peer={peer} expect={expect} got={int(block[0])}", flush=True)

        dist.barrier()
        if ok:
            print(f"[rank {rank}] {algo} alltoall OK", flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
