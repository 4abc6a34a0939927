"""all_to_all across a world of ranks, started by a plain loop of processes, torchrun, mpirun or srun.

    for r in 0 1 2 3; do
        MASTER_ADDR=127.0.0.1 MASTER_PORT=29400 WORLD_SIZE=4 RANK=$r \\
            /usr/bin/python3 examples/python/world_all_to_all.py &
    done; wait

or, where torchrun works, with the same variables set by it:

    torchrun --nproc_per_node=4 examples/python/world_all_to_all.py

(Debian's torchrun 1.13 crashes on Python 3.11 before it starts a worker, whatever its flags:
use the loop there.) Open MPI's mpirun and Slurm's srun give the rank and size; the store's address
is MASTER_ADDR (rank 0's host) and MASTER_PORT, which mpirun passes on with -x and srun with the
environment:

    mpirun -np 4 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29400 -x PYTHONPATH -x HMC_AUTH_KEY \\
        /usr/bin/python3 examples/python/world_all_to_all.py
    export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) MASTER_PORT=29400
    srun -n 4 /usr/bin/python3 examples/python/world_all_to_all.py
"""
import numpy as np

import hmc

world = hmc.init_world("env://", ucx_tls="shm")  # rank and size from torchrun's, mpirun's or srun's variables
rank, size = world.rank, world.size

# Rank r sends rank d the numbers 100 * r + d; it receives 100 * s + r from every rank s.
received = world.all_to_all([np.full(3, 100 * rank + d) for d in range(size)])
assert all((received[s] == 100 * s + rank).all() for s in range(size))

total = world.all_reduce(np.array([rank], dtype=np.int64))  # a new array: sum over ranks
world.barrier()
print(f"rank {rank}/{size}: received {[int(x[0]) for x in received]}, sum of ranks {int(total[0])}", flush=True)
world.close()
