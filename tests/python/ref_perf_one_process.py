"""The reference's perf.py, unchanged, with its server and client in one process: its run_server in a
thread and its run_client here, so that its RDMA case reaches the server over the emulated fabric
(HMC_VERBS_EMULATION=1, which reaches only within one process). Usage: PERF_PY PORT_BASE UDS_DIR."""
import importlib.util
import socket
import sys
import threading
import time


def main(path, base, uds):
    spec = importlib.util.spec_from_file_location("perf", path)
    perf = importlib.util.module_from_spec(spec)
    sys.modules["perf"] = perf  # its dataclasses look their module up
    spec.loader.exec_module(perf)
    ports = dict(ucx_port=base, rdma_port=base + 1, ctrl_port=base + 2, ctrl_tcp_port=base + 3, ctrl_uds_dir=uds,
                 buffer_size=16 << 20, gpu=False, device=0)
    failed = []

    def serve():
        try:
            perf.run_server(bind_ip="127.0.0.1", local_ip="127.0.0.1", ctrl_bind_ip="127.0.0.1", verify=True,
                            self_rank=0, **ports)
        except BaseException as e:  # the client's own error says more; this one is printed too
            failed.append(e)
            raise

    threading.Thread(target=serve, daemon=True).start()
    end = time.monotonic() + 30
    while True:  # the server's own perf socket is its last step before it serves
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", base + 2))
            time.sleep(0.05)
        except OSError:
            break
        if time.monotonic() > end:
            print("perf.py's server did not start listening", flush=True)
            return 1
    results = perf.run_client(server_ip="127.0.0.1", local_ip="127.0.0.1", ctrl_ip="127.0.0.1",
                              sizes=perf.parse_sizes("64,4k,1m"), iters=5, warmup=1, gpu_conn="both",
                              self_rank=1, peer_rank=0, **ports)
    perf.print_results(results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
