"""hmc.mf.bm: memfabric's BM ("big memory") over hmc's World and its one-sided put/get.

    bm.initialize("tcp://10.0.0.1:29400", world_size=4, device_id=0, config=bm.BmConfig())
    mem = bm.create(0, local_dram_size=1 << 20, local_hbm_size=0)
    mem.join()
    peer = mem.peer_rank_ptr(1, bm.BmMemType.HOST)                    # a GVA, the same on every rank
    mem.copy_data(array.ctypes.data, peer, 4096, bm.BmCopyType.H2G)   # 0, or a negative hmc.Status
    mem.leave(); bm.uninitialize()

Each rank contributes DRAM from its World session buffer; a GVA names (BM id, memory kind, rank,
offset), see hmc._mf_runtime. Copies to or from another rank are World puts and gets (a GVA this
rank owns is a local copy); a host pointer passes through this rank's staging area; G2G between
two other ranks gets into the staging area and puts from there (no help from either owner). Every
address is checked against its rank's contribution before anything is sent. Device memory (HBM,
the L* copy types) raises hmc.UnsupportedError: the session buffer is host memory.
"""
import ctypes
import enum

from . import _hmc
from ._enums import MemoryType
from ._errors import InvalidArgumentError, UnsupportedError
from ._mf_runtime import (DEFAULT_BUFFER, DEVICE, HOST, MAX_ID, MAX_RANKS, OFFSET_LIMIT, STAGING, BM,
                          check_int, decode, gva, returns_code, runtime, timeout_of)

_NO_RANK = 0xFFFFFFFF  # memfabric's bm_rank_id() before initialize (u32 max)


class BmCopyType(enum.IntEnum):
    """memfabric's copy directions: L local device (HBM) pointer, H host pointer, G any GVA, GH a
    host-memory GVA."""
    L2G = 0
    G2L = 1
    G2H = 2
    H2G = 3
    L2GH = 4
    GH2L = 5
    GH2H = 6
    H2GH = 7
    G2G = 8


class BmMemType(enum.IntEnum):
    LOCAL_DEVICE = 0
    LOCAL_HOST = 1
    DEVICE = 2
    HOST = 3


class BmDataOpType(enum.IntEnum):
    """memfabric's data paths. Every one is accepted and runs on hmc's UCX transport (world_options'
    ucx_tls chooses shm, tcp, rc...); ROCE is the guide's name of HOST_RDMA."""
    SDMA = 1
    HOST_RDMA = 2
    ROCE = 2
    HOST_TCP = 4
    DEVICE_RDMA = 8
    HOST_URMA = 16


# (source side, destination side) of each copy type.
_SIDES = {BmCopyType.L2G: ("L", "G"), BmCopyType.G2L: ("G", "L"), BmCopyType.G2H: ("G", "H"),
          BmCopyType.H2G: ("H", "G"), BmCopyType.L2GH: ("L", "GH"), BmCopyType.GH2L: ("GH", "L"),
          BmCopyType.GH2H: ("GH", "H"), BmCopyType.H2GH: ("H", "GH"), BmCopyType.G2G: ("G", "G")}


class BmConfig:
    """memfabric's BM configuration. Timeouts in seconds (>= 1): init_timeout bounds joining the
    world, create_timeout join(), operation_timeout every transfer and barrier. start_store=False:
    this rank never starts the store (by default rank 0, or with auto_ranking whichever rank binds
    the port first). auto_ranking: the store assigns ranks, else rank_id is this rank.
    world_options: hmc.World options (ucx_tls, ucx_net_devices, buffer_size, local_ip, ...);
    buffer_size bounds the sum of this rank's DRAM contributions plus 4 MiB of staging (default:
    1 GiB of contributions). start_store_only, dynamic_world_size, unified_address_space and flags
    are kept and have no effect: hmc's world has a fixed size and no SVM."""

    def __init__(self):
        self.init_timeout = 120
        self.create_timeout = 120
        self.operation_timeout = 120
        self.start_store = True
        self.start_store_only = False
        self.dynamic_world_size = False
        self.unified_address_space = False
        self.auto_ranking = False
        self.rank_id = 0
        self.flags = 0
        self.nic = ""
        self.world_options = {}

    def set_nic(self, nic):
        """Records memfabric's device-RDMA NIC URL; hmc's data plane picks its own ports (pass
        local_ip or ucx_net_devices in world_options to choose an interface)."""
        self.nic = str(nic)
        return 0


def _hbm_unsupported(what):
    """An UnsupportedError saying why device memory cannot take part here."""
    reasons = []
    for kind in (MemoryType.NVIDIA_GPU, MemoryType.AMD_GPU, MemoryType.HUAWEI_ASCEND_NPU):
        mem = _hmc.memory_available(int(kind), 0)
        if mem[0]:
            return UnsupportedError(f"{what}: hmc.mf.bm contributes and moves host memory only (the world's "
                                    "session buffer is host memory and the World has no device copy)")
        reasons.append(mem[1])
    return UnsupportedError(f"{what}: no GPU or NPU on this host ({'; '.join(reasons)})")


@returns_code
def initialize(store_url, world_size, device_id=0, config=None):
    """Joins the world at store_url (tcp://ip:port) as one of world_size ranks (at most 1024)."""
    config = BmConfig() if config is None else config
    check_int(world_size, "world_size", 1, MAX_RANKS)
    check_int(device_id, "device_id", 0, (1 << 31) - 1)
    rank = None if config.auto_ranking else check_int(config.rank_id, "rank_id", 0, world_size - 1)
    options = {"buffer_size": DEFAULT_BUFFER, **dict(config.world_options)}
    options["timeout"] = timeout_of(config, "operation_timeout")
    options["store_timeout"] = timeout_of(config, "init_timeout")
    timeout_of(config, "create_timeout")
    if not config.start_store:
        options["start_store"] = False
    if options["buffer_size"] < STAGING:
        raise InvalidArgumentError(f"world_options['buffer_size'] must be at least {STAGING} (the staging area)")
    runtime.acquire("bm", store_url, world_size, rank, options)
    _state["config"], _state["device_id"] = config, device_id


def uninitialize(flags=0):
    """Leaves the world (closed once SMEM and the top level have let go too); BigMemory objects end."""
    for mem in list(_state["objects"].values()):
        mem.destroy()
    runtime.release("bm")
    _state["config"] = None


def bm_rank_id():
    """This rank, or 0xFFFFFFFF (u32 max) before initialize."""
    return runtime.world.rank if "bm" in runtime.users else _NO_RANK


def create(id, local_dram_size, local_hbm_size, data_op_type=BmDataOpType.SDMA, flags=0):  # noqa: A002 - memfabric's name
    """A BigMemory with this rank's contribution; raises hmc.InvalidArgumentError (bad id or sizes) or
    hmc.UnsupportedError (local_hbm_size > 0)."""
    runtime.require("bm", "hmc.mf.bm.initialize")
    check_int(id, "id", 0, MAX_ID)
    check_int(local_dram_size, "local_dram_size", 0, OFFSET_LIMIT - 1)
    check_int(local_hbm_size, "local_hbm_size", 0, OFFSET_LIMIT - 1)
    BmDataOpType(data_op_type)
    if id in _state["objects"]:
        raise InvalidArgumentError(f"id={id} is in use by another BigMemory (destroy it first)")
    if local_hbm_size:
        raise _hbm_unsupported(f"local_hbm_size={local_hbm_size}")
    if not local_dram_size:
        raise InvalidArgumentError("local_dram_size and local_hbm_size are both 0: nothing to contribute")
    mem = BigMemory(id, local_dram_size, BmDataOpType(data_op_type))
    _state["objects"][id] = mem
    return mem


_state = {"config": None, "device_id": 0, "objects": {}}


class BigMemory:
    """One BM object: this rank's DRAM contribution and, after join(), every rank's. Calls that
    return int give 0 or a negative hmc.Status (the message in hmc.mf.get_last_err_msg())."""

    def __init__(self, obj_id, dram, op_type):
        self.id, self._dram, self.data_op_type = obj_id, dram, op_type
        self._base = runtime.allocate(dram)
        self._peers = None        # [(session-buffer offset, DRAM size)] by rank, after join()
        self._registered = {}     # host address -> size (register/unregister)

    # -- lifecycle -----------------------------------------------------------------------------
    def _world(self):
        if self._base is None:
            raise InvalidArgumentError(f"BigMemory {self.id} was destroyed")
        return runtime.require("bm", "hmc.mf.bm.initialize")

    @returns_code
    def join(self, flags=0):
        """Learns every rank's contribution (a collective: every rank joins)."""
        self._world()
        mine = f"{self._base} {self._dram}".encode()
        parts = runtime.all_gather_bytes(mine, timeout_of(_state["config"], "create_timeout"))
        self._peers = [tuple(int(v) for v in p.split()) for p in parts]

    @returns_code
    def leave(self, flags=0):
        """Stops this object's copies once every rank got here (a barrier: every rank leaves)."""
        self._world().barrier()
        self._peers = None

    def destroy(self):
        if self._base is not None:
            runtime.free(self._base)
            _state["objects"].pop(self.id, None)
            self._base, self._peers = None, None

    # -- addresses -----------------------------------------------------------------------------
    def local_mem_size(self, mem_type=BmMemType.DEVICE):
        """Bytes this rank contributes of mem_type (DEVICE: 0, there is no HBM contribution)."""
        return self._dram if BmMemType(mem_type) in (BmMemType.HOST, BmMemType.LOCAL_HOST) else 0

    def peer_rank_ptr(self, peer_rank, mem_type=BmMemType.DEVICE):
        """The GVA of peer_rank's contribution of mem_type; 0 (with the reason in get_last_err_msg())
        for a rank outside the world."""
        kind = HOST if BmMemType(mem_type) in (BmMemType.HOST, BmMemType.LOCAL_HOST) else DEVICE
        size = runtime.world.size if runtime.world is not None else 0
        if isinstance(peer_rank, bool) or not isinstance(peer_rank, int) or not 0 <= peer_rank < size:
            InvalidArgumentError(f"peer_rank={peer_rank!r} is outside the world of {size} ranks")
            return 0
        return gva(BM, self.id, kind, peer_rank)

    def get_rank_id_by_gva(self, address):
        """The rank owning a GVA of this object, or 0xFFFFFFFF."""
        d = decode(int(address))
        return d[3] if d is not None and d[0] == BM and d[1] == self.id else _NO_RANK

    @returns_code
    def register(self, addr, size):
        """Records host memory [addr, addr + size). Copies need no registration (host pointers pass
        through the staging area); the World cannot make user memory a remote target."""
        check_int(addr, "addr", 1, (1 << 62) - 1)
        check_int(size, "size", 1, (1 << 62) - 1)
        for a, n in self._registered.items():
            if addr < a + n and a < addr + size:
                raise InvalidArgumentError(f"[{addr:#x}, +{size}) overlaps registered [{a:#x}, +{n})")
        self._registered[addr] = size

    @returns_code
    def unregister(self, addr):
        if self._registered.pop(addr, None) is None:
            raise InvalidArgumentError(f"{addr:#x} is not the start of memory registered with BigMemory {self.id}")

    # -- copies --------------------------------------------------------------------------------
    def _end(self, side, addr, n, what):
        """('H', address) for a host pointer or ('G', rank, session-buffer offset) for a GVA, after the
        checks of side ('H', 'G' or 'GH'); raises InvalidArgumentError naming the address."""
        d = decode(addr)
        if side == "L":
            raise _hbm_unsupported(f"{what} {addr:#x} is local device memory")
        if side == "H":
            if d is not None or addr <= 0:
                raise InvalidArgumentError(f"{what} {addr:#x} must be a host pointer, not a global address")
            return ("H", addr)
        if d is None:
            raise InvalidArgumentError(f"{what} {addr:#x} is not a global address (peer_rank_ptr gives them)")
        space, obj_id, kind, rank, offset = d
        if space != BM or obj_id != self.id:
            raise InvalidArgumentError(f"{what} {addr:#x} belongs to another BM/SMEM object, not BigMemory {self.id}")
        if side == "GH" and kind != HOST:
            raise InvalidArgumentError(f"{what} {addr:#x} is a device-memory address; the copy type needs host memory")
        if rank >= len(self._peers):
            raise InvalidArgumentError(f"{what} {addr:#x} names rank {rank}, outside the world of {len(self._peers)}")
        base, dram = self._peers[rank]
        extent = dram if kind == HOST else 0
        if offset + n > extent:
            raise InvalidArgumentError(
                f"{what} {addr:#x} + {n} bytes is outside rank {rank}'s {'host' if kind == HOST else 'device'} "
                f"contribution of {extent} bytes")
        return ("G", rank, base + offset)

    def _plan(self, src, dst, size, copy_type):
        """The checked (source end, destination end, size) of one copy; nothing is sent."""
        self._world()
        if self._peers is None:
            raise InvalidArgumentError(f"BigMemory {self.id} has not joined (call join() on every rank)")
        sides = _SIDES.get(copy_type if isinstance(copy_type, BmCopyType) else None)
        if sides is None:
            try:
                sides = _SIDES[BmCopyType(copy_type)]
            except ValueError:
                raise InvalidArgumentError(f"type={copy_type!r} is not a BmCopyType") from None
        check_int(size, "size", 1, OFFSET_LIMIT)
        check_int(src, "src_ptr", 0, (1 << 64) - 1)
        check_int(dst, "dst_ptr", 0, (1 << 64) - 1)
        return self._end(sides[0], src, size, "source"), self._end(sides[1], dst, size, "destination"), size

    @returns_code
    def copy_data(self, src_ptr, dst_ptr, size, type, flags=0):  # noqa: A002 - memfabric's name
        """Copies size bytes from src_ptr to dst_ptr as type (BmCopyType) says."""
        src, dst, n = self._plan(src_ptr, dst_ptr, size, type)
        with runtime.lock:
            _Mover(runtime.world).copy(src, dst, n)

    @returns_code
    def copy_data_batch(self, src_addrs, dst_addrs, sizes, count, type, flags=0):  # noqa: A002
        """count copies of one type. Every address is checked before anything is sent. Host-to-global
        and global-to-host copies go to each peer as one batched put or get per staging area's worth
        (host sources staged with one fill, host destinations read back at once, neighbours merged);
        G2G copies go one by one."""
        check_int(count, "count", 0, 1 << 40)
        if not len(src_addrs) >= count or not len(dst_addrs) >= count or not len(sizes) >= count:
            raise InvalidArgumentError(f"count={count} but src_addrs, dst_addrs, sizes have "
                                       f"{len(src_addrs)}, {len(dst_addrs)}, {len(sizes)} items")
        plans = [self._plan(int(src_addrs[i]), int(dst_addrs[i]), int(sizes[i]), type) for i in range(count)]
        with runtime.lock:
            _Mover(runtime.world).batch(plans)


class _Mover:
    """Runs checked copies over the World: ends are ('H', address) or ('G', rank, buffer offset)."""

    def __init__(self, world):
        self.core, self.rank = world._core, world.rank

    def _put(self, peer, local, remote, n):
        self.core.rma(True, peer, local, remote, n)

    def _get(self, peer, local, remote, n):
        self.core.rma(False, peer, local, remote, n)

    def _to_buffer(self, host, offset, n):
        self.core.write(memoryview((ctypes.c_char * n).from_address(host)).cast("B"), offset)

    def _from_buffer(self, offset, host, n):
        ctypes.memmove(host, self.core.read(offset, n), n)

    def copy(self, src, dst, n):
        for at in range(0, n, STAGING):
            self._piece(src, dst, at, min(STAGING, n - at))

    def _piece(self, src, dst, at, n):
        if src[0] == "H":  # H2G, H2GH
            _, rank, off = dst
            if rank == self.rank:
                self._to_buffer(src[1] + at, off + at, n)
            else:
                self._to_buffer(src[1] + at, 0, n)
                self._put(rank, 0, off + at, n)
        elif dst[0] == "H":  # G2H, GH2H
            _, rank, off = src
            if rank == self.rank:
                self._from_buffer(off + at, dst[1] + at, n)
            else:
                self._get(rank, 0, off + at, n)
                self._from_buffer(0, dst[1] + at, n)
        else:  # G2G
            (_, r1, o1), (_, r2, o2) = src, dst
            if r1 == self.rank and r2 == self.rank:
                self.core.write(self.core.read(o1 + at, n), o2 + at)
            elif r1 == self.rank:
                self._put(r2, o1 + at, o2 + at, n)
            elif r2 == self.rank:
                self._get(r1, o2 + at, o1 + at, n)
            else:  # between two other ranks: through this rank's staging area
                self._get(r1, 0, o1 + at, n)
                self._put(r2, 0, o2 + at, n)

    def batch(self, plans):
        kind = plans[0][0][0] + plans[0][1][0] if plans else ""
        if kind in ("HG", "GH"):
            self._batch_host(plans, put=kind == "HG")
        else:
            for src, dst, n in plans:
                self.copy(src, dst, n)

    @staticmethod
    def _runs(items):
        """items (peer, local offset, remote offset, n) with adjacent ones merged."""
        out = []
        for peer, loc, rem, n in items:
            if out and out[-1][0] == peer and out[-1][1] + out[-1][3] == loc and out[-1][2] + out[-1][3] == rem:
                out[-1][3] += n
            else:
                out.append([peer, loc, rem, n])
        return out

    def _groups(self, plans, remote_end):
        """Plans by owning rank (this rank's first: local copies), cut into staging-sized groups."""
        by_rank = {}
        for p in plans:
            by_rank.setdefault(p[remote_end][1], []).append(p)
        for rank in sorted(by_rank, key=lambda r: r != self.rank):
            group, used = [], 0
            for p in by_rank[rank]:
                if p[2] > STAGING or rank == self.rank:
                    yield rank, [p]
                    continue
                if used + p[2] > STAGING:
                    yield rank, group
                    group, used = [], 0
                group.append(p)
                used += p[2]
            if group:
                yield rank, group

    def _batch_host(self, plans, put):
        """H2G (put) or G2H batches: each peer's small copies share the staging area and move as
        one batched operation; this rank's own and larger ones are plain copies."""
        for rank, group in self._groups(plans, 1 if put else 0):
            if rank == self.rank or group[0][2] > STAGING:
                for src, dst, n in group:
                    self.copy(src, dst, n)
                continue
            slots, at = [], 0  # (host address, staging offset, remote offset, n)
            for src, dst, n in group:
                host, remote = (src, dst) if put else (dst, src)
                slots.append((host[1], at, remote[2], n))
                at += n
            if put:
                stage = (ctypes.c_char * at)()
                for host, loc, _, n in slots:
                    ctypes.memmove(ctypes.addressof(stage) + loc, host, n)
                self.core.write(memoryview(stage).cast("B"), 0)
            runs = self._runs([(rank, loc, rem, n) for _, loc, rem, n in slots])
            self.core.rma_batch(put, rank, [(loc, rem, n) for _, loc, rem, n in runs])
            if not put:
                staged = self.core.read(0, at)
                for host, loc, _, n in slots:
                    ctypes.memmove(host, staged[loc:loc + n], n)
