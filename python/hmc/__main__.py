"""python -m hmc: the command line a user reaches for first.

    python -m hmc version            the package's version and the UCX it runs on
    python -m hmc doctor [--json]    what this host offers, a loopback self-test, every fallback seen
    python -m hmc store --port P     the standalone store (as python -m hmc.store)
"""
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__.strip())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "version":
        from . import doctor
        from importlib import metadata
        try:
            version = metadata.version("hmc")
        except metadata.PackageNotFoundError:
            version = "(from the build tree)"
        ucx, why = doctor._ucx_version()
        print(f"hmc {version}, UCX {ucx or 'not loadable: ' + why}")
        return 0
    if command == "doctor":
        from . import doctor
        return doctor.main(rest)
    if command == "store":
        from . import store
        return store.main(rest)
    print(f"python -m hmc: unknown command '{command}'\n\n{__doc__.strip()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
