"""python -m hmc: the command line a user reaches for first.

    python -m hmc doctor [--json]      what this host offers HMC, a loopback self-test, every fallback seen
    python -m hmc bench [--tls shm]    put/get bandwidth and latency between two processes on this host
    python -m hmc version              the package's version and the UCX it runs on
    python -m hmc store --port P       the standalone store (as python -m hmc.store)

`python -m hmc COMMAND --help` lists a command's flags.
"""
import argparse
import sys

COMMANDS = {
    "doctor": "what this host offers HMC, a loopback self-test of what UCX picks, and every fallback it sees",
    "bench": "put/get bandwidth and latency between two processes: a table with p50/p99/p99.9, GB/s, CPU s/GB",
    "version": "the package's version and the UCX it runs on",
    "store": "the standalone key-value store that ranks bootstrap through (as python -m hmc.store)",
}


def parser():
    listing = "\n".join(f"  {name:<9} {what}" for name, what in COMMANDS.items())
    p = argparse.ArgumentParser(
        prog="python -m hmc", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="HMC's command line: check a host, measure it, run the store.\n\ncommands:\n" + listing,
        epilog="examples:\n  python -m hmc doctor\n  python -m hmc bench --tls shm --json bench.json\n"
               "  python -m hmc bench --help")
    p.add_argument("command", metavar="COMMAND", help="one of the commands above")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the command's flags (python -m hmc COMMAND --help)")
    return p


def version(argv):
    argparse.ArgumentParser(prog="python -m hmc version", description=COMMANDS["version"]).parse_args(argv)
    from . import doctor
    from importlib import metadata
    try:
        number = metadata.version("hmc")
    except metadata.PackageNotFoundError:
        number = "(from the build tree)"
    ucx, why = doctor._ucx_version()
    print(f"hmc {number}, UCX {ucx or 'not loadable: ' + why}")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    if not argv:
        p.print_help(sys.stderr)
        return 2
    a = p.parse_args(argv)
    if a.command == "help":
        p.print_help()
        return 0
    if a.command == "version":
        return version(a.args)
    if a.command == "doctor":
        from . import doctor
        return doctor.main(a.args)
    if a.command == "bench":
        from . import bench
        return bench.main(a.args)
    if a.command == "store":
        from . import store
        return store.main(a.args)
    p.error(f"unknown command '{a.command}' (one of {', '.join(COMMANDS)})")


if __name__ == "__main__":
    sys.exit(main())
