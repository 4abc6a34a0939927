"""all_to_all across a world of ranks, started by a plain loop of processes or by torchrun.

    for r in 0 1 2 3; do
        MASTER_ADDR=127.0.0.1 MASTER_PORT=29400 WORLD_SIZE=4 RANK=$r \\
            /usr/bin/python3 examples/python/world_all_to_all.py &
    done; wait

or, where torchrun works, with the same variables set by it:

    torchrun --nproc_per_node=4 examples/python/world_all_to_all.py

(Debian's torchrun 1.13 crashes on Python 3.11 before it starts a worker, whatever its flags:
use the loop there.)
"""
import numpy as np

import hmc

world = hmc.init_world("env://", ucx_tls="shm")  # rank and size from torchrun's variables
rank, size = world.rank, world.size

# Rank r sends rank d the numbers 100 * r + d; it receives 100 * s + r from every rank s.
received = world.all_to_all([np.full(3, 100 * rank + d) for d in range(size)])
assert all((received[s] == 100 * s + rank).all() for s in range(size))

total = world.all_reduce(np.array([rank], dtype=np.int64))  # a new array: sum over ranks
world.barrier()
print(f"rank {rank}/{size}: received {[int(x[0]) for x in received]}, sum of ranks {int(total[0])}", flush=True)
world.close()
