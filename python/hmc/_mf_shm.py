"""hmc.mf.shm: memfabric's SMEM ("share memory") objects over the World BM uses.

    shm.initialize("tcp://10.0.0.1:29400", world_size=4, rank_id=r, device_id=0, config=shm.ShmConfig())
    obj = shm.create(0, rank_size=4, rank_id=r, local_mem_size=2 << 20)
    obj.barrier(); everyone = obj.all_gather(b"mine")       # bytes, rank after rank

An SMEM object is a GVA range (hmc._mf_runtime's layout, space SMEM: rank r's part starts at
gva + (r << 44)) with barrier and all_gather over its ranks. memfabric moves SMEM data with device
kernels (MTE, SDMA, RDMA from the NPU), which hmc has not: the range has no backing memory here and
query_support_data_operation() reports none.
"""
import enum

from ._errors import InvalidArgumentError
from ._mf_runtime import HOST, MAX_ID, MAX_RANKS, SMEM, check_int, gva, returns_code, runtime, timeout_of

_MB2 = 2 << 20


class ShmDataOpType(enum.IntEnum):
    """memfabric's device data paths; ROCE is the guide's name of RDMA."""
    MTE = 1
    SDMA = 2
    RDMA = 4
    ROCE = 4


class ShmConfig:
    """memfabric's SMEM configuration: timeouts in seconds (>= 1; init_timeout joining the world,
    create_timeout create(), operation_timeout barrier and all_gather), start_store (False: this
    rank never starts the store), flags (kept, no effect) and world_options (hmc.World options)."""

    def __init__(self):
        self.init_timeout = 120
        self.create_timeout = 120
        self.operation_timeout = 120
        self.start_store = True
        self.flags = 0
        self.world_options = {}


_state = {"config": None, "objects": {}}


@returns_code
def initialize(store_url, world_size, rank_id, device_id=0, config=None):
    """Joins the world at store_url as rank_id of world_size (at most 1024); the same world as BM's
    when both are initialized in one process."""
    config = ShmConfig() if config is None else config
    check_int(world_size, "world_size", 1, MAX_RANKS)
    check_int(rank_id, "rank_id", 0, world_size - 1)
    check_int(device_id, "device_id", 0, (1 << 31) - 1)
    options = dict(config.world_options)
    options["timeout"] = timeout_of(config, "operation_timeout")
    options["store_timeout"] = timeout_of(config, "init_timeout")
    timeout_of(config, "create_timeout")
    if not config.start_store:
        options["start_store"] = False
    runtime.acquire("shm", store_url, world_size, rank_id, options)
    _state["config"] = config


def uninitialize(flags=0):
    for obj in list(_state["objects"].values()):
        obj.destroy()
    runtime.release("shm")
    _state["config"] = None


def create(id, rank_size, rank_id, local_mem_size, data_op_type=ShmDataOpType.MTE, flags=0):  # noqa: A002
    """A ShareMemory (a collective: every rank creates it with the same id and local_mem_size).
    id in [0, 63], rank_size the world's size (at most 1024), rank_id this rank, local_mem_size in
    [2 MiB, 4 GiB] and a multiple of 2 MiB; else hmc.InvalidArgumentError."""
    check_int(id, "id", 0, MAX_ID)
    check_int(rank_size, "rank_size", 1, MAX_RANKS)
    check_int(rank_id, "rank_id", 0, rank_size - 1)
    check_int(local_mem_size, "local_mem_size", _MB2, 4 << 30)
    if local_mem_size % _MB2:
        raise InvalidArgumentError(f"local_mem_size={local_mem_size} must be a multiple of 2 MiB")
    try:
        ShmDataOpType(data_op_type)
    except ValueError:
        raise InvalidArgumentError(f"data_op_type={data_op_type!r} is not a ShmDataOpType") from None
    world = runtime.require("shm", "hmc.mf.shm.initialize")
    if rank_size != world.size or rank_id != world.rank:
        raise InvalidArgumentError(f"rank_size={rank_size}, rank_id={rank_id} differ from the world's "
                                   f"{world.size} ranks and this rank {world.rank}")
    if id in _state["objects"]:
        raise InvalidArgumentError(f"id={id} is in use by another ShareMemory (destroy it first)")
    mine = f"{id} {local_mem_size}".encode()
    everyone = set(runtime.all_gather_bytes(mine, timeout_of(_state["config"], "create_timeout")))
    if len(everyone) != 1:
        raise InvalidArgumentError(f"ranks created SMEM objects with different (id, local_mem_size): "
                                   f"{sorted(e.decode() for e in everyone)}")
    obj = ShareMemory(id, local_mem_size, ShmDataOpType(data_op_type))
    _state["objects"][id] = obj
    return obj


class ShareMemory:
    """One SMEM object. local_rank, rank_size and gva are read-only."""

    def __init__(self, obj_id, size, op_type):
        self.id, self.local_mem_size, self.data_op_type = obj_id, size, op_type
        self.context = b""
        self._live = True

    def _world(self):
        if not self._live:
            raise InvalidArgumentError(f"ShareMemory {self.id} was destroyed")
        return runtime.require("shm", "hmc.mf.shm.initialize")

    @property
    def local_rank(self):
        return self._world().rank

    @property
    def rank_size(self):
        return self._world().size

    @property
    def gva(self):
        """The GVA of rank 0's part; rank r's starts at gva + (r << 44)."""
        return gva(SMEM, self.id, HOST, 0)

    @returns_code
    def set_context(self, context):
        """Keeps the user's context bytes (str is encoded as UTF-8) in .context."""
        self._world()
        if isinstance(context, str):
            context = context.encode()
        if not isinstance(context, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"context must be bytes or str, not {type(context).__name__}")
        self.context = bytes(context)

    @returns_code
    def destroy(self, flags=0):
        self._live = False
        _state["objects"].pop(self.id, None)

    def query_support_data_operation(self):
        """0: none of ShmDataOpType's device paths exists here (hmc moves no SMEM data)."""
        self._world()
        return 0

    def barrier(self):
        """Returns once every rank called it; raises hmc errors (hmc.PeerLostError naming a lost rank,
        hmc.TimeoutError after operation_timeout)."""
        self._world().barrier()

    def all_gather(self, local_data):
        """Every rank's bytes, concatenated in rank order."""
        self._world()
        return b"".join(runtime.all_gather_bytes(bytes(local_data), None))

    @returns_code
    def topology_can_reach(self, remote_rank, reach_info=0):
        """0 for every rank of the world (all reach each other through the World's transports); a
        rank outside it: InvalidArgumentError's code."""
        check_int(remote_rank, "remote_rank", 0, self._world().size - 1)
