"""python -m hmc.store: the standalone embedded store, for jobs whose ranks all come and go.

    python -m hmc.store --port 29400            # prints "READY 0.0.0.0:29400", serves until SIGINT/SIGTERM

Clients connect with tcp://HOST:29400 and the shared key (HMC_AUTH_KEY or the key file); with
--tls-cert/--tls-key/--tls-ca, over TLS (clients pass hmc.Store(tls=...) or World store_tls=...).
hmc.Store and wrap_store live in hmc._store; they are re-exported here and from hmc.
"""
import argparse
import signal
import sys
import threading

from . import _hmc
from ._store import Store, wrap_store  # noqa: F401 - the public names of this module


def main(argv=None):
    """python -m hmc.store --port P [--host IP] [--no-auth]: serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m hmc.store", description=main.__doc__)
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: all)")
    parser.add_argument("--port", type=int, required=True, help="TCP port (0: any free port)")
    parser.add_argument("--no-auth", action="store_true", help="serve clients without the shared key (trusted networks)")
    parser.add_argument("--max-connections", type=int, default=4096)
    parser.add_argument("--tls-cert", help="TLS: this store's PEM certificate (with --tls-key and --tls-ca)")
    parser.add_argument("--tls-key", help="TLS: its PEM private key (unencrypted; hmc.StoreServer(tls=) takes a password)")
    parser.add_argument("--tls-ca", action="append", help="TLS: a PEM CA clients' certificates must chain to (repeatable)")
    parser.add_argument("--tls-crl", action="append", help="TLS: a PEM revocation list of that CA (repeatable)")
    args = parser.parse_args(argv)
    tls = {k: v for k, v in (("cert", args.tls_cert), ("key", args.tls_key), ("ca", args.tls_ca),
                             ("crl", args.tls_crl)) if v}
    server = _hmc.StoreServer(authenticate=not args.no_auth, max_connections=args.max_connections, tls=tls or None)
    port = server.listen(args.host, args.port)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"READY {args.host}:{port}", flush=True)
    while not stop.wait(3600):
        pass
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
