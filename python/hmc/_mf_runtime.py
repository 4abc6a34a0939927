"""What hmc.mf's parts share: memfabric's return-code convention, the global virtual address (GVA)
layout, the config store's TLS settings, and the one World that the top level, BM (hmc.mf.bm) and
SMEM (hmc.mf.shm) run over.

GVA layout (64 bits; every rank computes the same address for the same byte):

    bits 63..62  0b01             marks a GVA: above every user-space pointer, so never a host pointer
    bit  61      space            0 BM, 1 SMEM
    bits 60..55  object id        0..63 (memfabric's id range)
    bit  54      memory kind      0 host (DRAM), 1 device (HBM)
    bits 53..44  rank             0..1023 (memfabric's largest world)
    bits 43..0   offset           inside that rank's contribution (up to 16 TiB)

The session buffer of the World holds, from offset 0, a staging area (host pointers and G2G
between two other ranks pass through it) and then each BigMemory's DRAM contribution. World
collectives use the whole session buffer, except barriers and all_gathers whose every piece is
at most INLINE bytes: those travel inside control messages. So everything hmc.mf runs over this
World is a barrier or an equal-size all_gather of at most INLINE bytes per rank and call.
"""
import logging
import os
import threading

import numpy as np

from ._errors import HMCError, InvalidArgumentError
from .world import World

MAX_RANKS = 1024
MAX_ID = 63
HOST, DEVICE = 0, 1  # memory kinds in a GVA
BM, SMEM = 0, 1      # spaces in a GVA
_TAG_SHIFT, _SPACE_SHIFT, _ID_SHIFT, _KIND_SHIFT, _RANK_SHIFT = 62, 61, 55, 54, 44
OFFSET_LIMIT = 1 << _RANK_SHIFT
STAGING = 4 << 20                 # per-rank staging area at the start of the session buffer
DEFAULT_BUFFER = STAGING + (1 << 30)  # mmap'd without reserve: pages cost memory only once touched
INLINE = 8192                     # the World's kMaxInline: pieces this small never touch the session buffer
_ALIGN = 4096


def fail(e):
    """An HMCError as memfabric's return code; creating it recorded its message for get_last_err_msg()."""
    logging.getLogger("hmc.mf").error("%s", e)
    return -int(getattr(e, "status", 1)) or -1


def returns_code(fn):
    """fn as memfabric's int-returning call: 0, or the negative hmc.Status of the HMCError it raised."""
    def call(*args, **kwargs):
        try:
            fn(*args, **kwargs)
            return 0
        except HMCError as e:
            return fail(e)

    call.__name__, call.__qualname__, call.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return call


def gva(space, obj_id, kind, rank, offset=0):
    return ((1 << _TAG_SHIFT) | (space << _SPACE_SHIFT) | (obj_id << _ID_SHIFT) | (kind << _KIND_SHIFT)
            | (rank << _RANK_SHIFT) | offset)


def decode(addr):
    """(space, id, kind, rank, offset) of a GVA, or None for any other address."""
    if addr >> _TAG_SHIFT != 1:
        return None
    return ((addr >> _SPACE_SHIFT) & 1, (addr >> _ID_SHIFT) & 0x3F, (addr >> _KIND_SHIFT) & 1,
            (addr >> _RANK_SHIFT) & 0x3FF, addr & (OFFSET_LIMIT - 1))


def check_int(value, name, low, high):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(f"{name}={value!r} must be an integer in [{low}, {high}]")
    return value


def timeout_of(config, name):
    """A memfabric timeout attribute (seconds, at least 1)."""
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1:
        raise InvalidArgumentError(f"{name}={value!r} must be a number of seconds >= 1")
    return float(value)


class StoreTls:
    """The config store's TLS as set_conf_store_tls and set_conf_store_tls_key leave it: every store
    client and server hmc.mf starts afterwards (World, create_config_store, TransferEngine) uses it.
    The key's password is held here only, for OpenSSL; it is never logged nor put in a message."""

    FIELDS = {"tlsCaPath", "tlsCert", "tlsCrlPath", "tlsCrlFile", "tlsCaFile", "packagePath"}

    def __init__(self):
        self.files = None  # {"cert", "ca", "crl"} while enabled
        self._key = None   # (PEM text, password)

    def enable(self, tls_info):
        """Parses memfabric's "tlsCaPath: DIR; tlsCaFile: a.pem,b.pem; tlsCert: FILE; tlsCrlPath: DIR;
        tlsCrlFile: x.pem" (packagePath is accepted: hmc links its OpenSSL) and checks the files exist."""
        fields = {}
        for item in str(tls_info).split(";"):
            if item.strip():
                key, sep, value = item.partition(":")
                if not sep or key.strip() not in self.FIELDS:
                    raise InvalidArgumentError(f"tls_info item {key.strip()!r}: expected 'name: value' with a name "
                                               f"of {', '.join(sorted(self.FIELDS))}")
                fields[key.strip()] = value.strip()
        missing = {"tlsCaPath", "tlsCert", "tlsCaFile"} - set(fields)
        if missing:
            raise InvalidArgumentError(f"tls_info lacks {', '.join(sorted(missing))}")

        def under(folder, names):
            return [os.path.join(folder, n.strip()) for n in names.split(",") if n.strip()]

        files = {"cert": fields["tlsCert"], "ca": under(fields["tlsCaPath"], fields["tlsCaFile"]),
                 "crl": under(fields.get("tlsCrlPath", ""), fields.get("tlsCrlFile", ""))}
        for path in [files["cert"], *files["ca"], *files["crl"]]:
            if not os.path.isfile(path):
                raise InvalidArgumentError(f"tls_info names {path}, which is not a file")
        if not files["ca"]:
            raise InvalidArgumentError("tls_info: tlsCaFile names no CA file")
        self.files = files

    def disable(self):
        self.files = None

    def set_key(self, pem, password):
        self._key = (pem, password)

    def options(self):
        """The store_tls dict of hmc's store, or None while TLS is off."""
        if self.files is None:
            return None
        if self._key is None:
            raise InvalidArgumentError("config store TLS is on but has no private key: call "
                                       "set_conf_store_tls_key(tls_pk, tls_pk_pw, py_decrypt_func) first")
        return {**self.files, "key_pem": self._key[0], "key_password": self._key[1]}


store_tls = StoreTls()


class Runtime:
    """The World shared by the top level ("top"), BM ("bm") and SMEM ("shm"), closed when the last
    of them lets go, and the allocator of its session buffer."""

    def __init__(self):
        self.world = None
        self.users = set()
        self.lock = threading.RLock()  # one user of the staging area at a time
        self._used = []                # (offset, size) of live DRAM contributions

    def acquire(self, user, store_url, world_size, rank, options):
        if user in self.users:
            raise InvalidArgumentError("already initialized (call uninitialize first)")
        if self.world is None:
            tls = store_tls.options()
            if tls is not None:
                options = {"store_tls": tls, **options}
            self.world = World(store_url, world_size, rank, **options)
            self._used = []
        elif world_size != self.world.size or rank not in (None, self.world.rank):
            raise InvalidArgumentError(
                f"world_size={world_size}, rank={rank} differ from the world already joined here "
                f"(size {self.world.size}, rank {self.world.rank}): BM, SMEM and the top level share one")
        self.users.add(user)
        return self.world

    def release(self, user):
        self.users.discard(user)
        if not self.users and self.world is not None:
            world, self.world = self.world, None
            world.close()

    def require(self, user, what):
        if user not in self.users:
            raise InvalidArgumentError(f"not initialized: call {what} first")
        return self.world

    def allocate(self, size):
        """The session-buffer offset of a new DRAM contribution of size bytes (first fit after staging)."""
        limit = self.world.session.buffer_size
        at = STAGING
        for off, n in sorted(self._used):
            if at + size <= off:
                break
            at = max(at, -(-(off + n) // _ALIGN) * _ALIGN)
        if at + size > limit:
            free = limit - STAGING - sum(n for _, n in self._used)
            raise InvalidArgumentError(
                f"local_dram_size={size} does not fit: the world's session buffer has {free} bytes left for "
                f"contributions (raise world_options['buffer_size'] in the config)")
        self._used.append((at, size))
        return at

    def free(self, offset):
        self._used = [u for u in self._used if u[0] != offset]

    def all_gather_bytes(self, data, timeout):
        """Every rank's bytes, by rank, in all_gathers of at most INLINE bytes per rank (see above)."""
        world = self.world
        lengths = world.all_gather(np.array([len(data)], dtype=np.uint64), timeout)
        lengths = [int(a[0]) for a in lengths]
        longest = max(lengths)
        mine = np.frombuffer(bytes(data), dtype=np.uint8)
        parts = [[] for _ in lengths]
        for start in range(0, longest, INLINE):
            piece = np.zeros(min(INLINE, longest - start), dtype=np.uint8)
            chunk = mine[start:start + len(piece)]
            piece[:len(chunk)] = chunk
            for rank, got in enumerate(world.all_gather(piece, timeout)):
                parts[rank].append(got.tobytes())
        return [b"".join(p)[:n] for p, n in zip(parts, lengths)]


runtime = Runtime()
