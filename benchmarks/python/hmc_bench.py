"""hmc_bench for Python: hmc_bench's put_bw, get_bw, put_lat, get_lat, tag_lat and notify_lat
through hmc.AsyncSession (asyncio) or, with --api blocking, the blocking hmc.Session from this
thread, so that the Python layer's overhead is a number next to the C++ one (docs/benchmarks.md).

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python/hmc_bench.py \
        [--api asyncio|blocking] [--progress-thread default|own|shared|caller] \
        [--tls shm] [--mode event] [--sizes 8,64K,1M | 8:16M] [--depth 16] [--iters N] [--warmup N] \
        [--test put_bw,get_bw,put_lat,get_lat,tag_lat,notify_lat] [--json FILE] [--csv FILE] [--quiet]

The code is the package's `python -m hmc bench` (python/hmc/bench.py: the tests, the server and
client processes, the protocol); this script runs it with every test at every size by default.
Output: a table on stdout (GB/s, msg/s, p50 / p99 / p99.9 / max latency, CPU s/GB), a progress line
on stderr, and with --json hmc_bench's schema with "impl": "hmc-python" and "lat_p999_us".
"""
import os
import sys

from hmc import bench

if __name__ == "__main__":
    sys.exit(bench.main(prog=os.path.basename(__file__), full=True, description=__doc__.split("\n\n")[0]))
