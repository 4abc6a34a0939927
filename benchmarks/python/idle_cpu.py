"""CPU used by an idle, connected pair of Sessions: both in this process, connected over loopback,
then nothing to do for --seconds. Reports the process's user+sys CPU time over that window as a
percentage of one core (both sessions together: each has its own loop thread).

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python/idle_cpu.py [--tls shm] [--mode event] [--seconds 5]

Prints one line of JSON: {"tls", "mode", "seconds", "cpu_seconds", "core_percent", "sessions": 2}.
"""
import argparse
import json
import resource
import time

import hmc


def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)  # all threads of the process: both sessions' loops
    return u.ru_utime + u.ru_stime


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tls", default="shm")
    p.add_argument("--mode", choices=("adaptive", "event", "poll"), default="adaptive")
    p.add_argument("--seconds", type=float, default=5.0)
    o = p.parse_args()
    kw = dict(buffer_size=1 << 20, progress_mode=o.mode, ucx_tls=o.tls or None, ucx_net_devices="lo")
    with hmc.create_session(**kw) as server, hmc.create_session(**kw) as client:
        server.init_server("127.0.0.1", 0, 0, 0, 0)
        client.connect(0, 1, "127.0.0.1", 0, server.ctrl_port)
        server.wait_peer(1, timeout=30)
        client.put_remote(0, None, 0, 0, 4096)  # the data path has been used once
        server.ctrl_send(1, 7)
        assert client.ctrl_recv(0, timeout=10) == 7
        time.sleep(0.5)  # let connection set-up settle
        cpu0, t0 = cpu_seconds(), time.monotonic()
        time.sleep(o.seconds)
        cpu, wall = cpu_seconds() - cpu0, time.monotonic() - t0
    print(json.dumps({"tls": o.tls, "mode": o.mode, "seconds": round(wall, 3), "cpu_seconds": round(cpu, 6),
                      "core_percent": round(100.0 * cpu / wall, 3), "sessions": 2}))


if __name__ == "__main__":
    main()
