"""hmc.World / hmc.AsyncWorld: a world of ranks bootstrapped through a store, with collectives on
one-sided transfers.

    world = hmc.init_world("tcp://10.0.0.1:29400", world_size=4)       # rank from the store
    world = hmc.init_world("env://")                                     # torchrun's, mpirun's or srun's variables
    parts = world.all_gather(np.arange(10))                              # list indexed by rank
    back = world.all_to_all([b"to 0", b"to 1", b"to 2", b"to 3"])        # list indexed by source
    total = world.all_reduce(torch.ones(5), op="sum")                    # a new tensor

Data may be bytes, bytearray, memoryview, NumPy arrays or torch CPU tensors. Arrays come back as
arrays of the same dtype (the sender's shape when the size matches this rank's, else 1-D) and
tensors as tensors. Every rank must call the same collectives in the same order; one failure
(a lost rank: hmc.PeerLostError naming it; a timeout; bad sizes) makes the world unusable.
"""
import asyncio
import functools
import json
import os
import re

from . import _args, _hmc, _payload
from ._errors import HMCError, InvalidArgumentError, InvalidConfigError
from ._store import Store, _TorchStore, wrap_store  # noqa: F401 - Store is re-exported
from .aio import AsyncSession
from .session import Session

_OPS = {"sum": 0, "max": 1, "min": 2}
_DTYPES = {"int8": 0, "uint8": 1, "int16": 2, "uint16": 3, "int32": 4, "uint32": 5, "int64": 6, "uint64": 7,
           "float32": 8, "float64": 9}
_HEADER = 64  # self-describing payloads (broadcast, scatter) start with a padded JSON header


# -- payload conversions ---------------------------------------------------------------------------
def _np():
    import numpy

    return numpy


def _is_tensor(x):
    return _payload.is_tensor(x)


def _is_array(x):
    return type(x).__module__ == "numpy" and hasattr(x, "dtype")


def _array_of(x):
    """A C-contiguous NumPy array sharing x's memory (tensors and arrays), or None for bytes-likes."""
    if _is_tensor(x):
        if x.device.type != "cpu":
            raise InvalidArgumentError("collectives take CPU tensors (copy with .cpu() first)")
        try:  # the tensor's own dtype and shape (_payload.source gives its bytes)
            return (x if x.is_contiguous() else x.contiguous()).detach().numpy()
        except (TypeError, RuntimeError) as e:
            raise InvalidArgumentError(f"a {x.dtype} tensor has no NumPy form ({e})") from None
    if _is_array(x):
        return _payload.source(x)
    return None


def _like(template, buf, start, stop):
    """Bytes [start, stop) of buf as the template's type: bytes, or an array/tensor of its dtype."""
    arr = _array_of(template) if template is not None else None
    if arr is None:
        return bytes(memoryview(buf)[start:stop])
    np = _np()
    raw = np.frombuffer(buf, dtype=np.uint8)[start:stop]
    if raw.nbytes % arr.dtype.itemsize:
        raise InvalidArgumentError(f"{raw.nbytes} bytes are not a whole number of {arr.dtype} elements")
    out = raw.view(arr.dtype)
    if out.nbytes == arr.nbytes:
        out = out.reshape(arr.shape)
    return _wrap_like(template, out)


def _wrap_like(template, array):
    if _is_tensor(template):
        import torch

        return torch.from_numpy(array)
    return array


def _encode(x):
    """Header + payload for receivers that have no template (broadcast, scatter)."""
    arr = _array_of(x)
    if arr is None:
        if isinstance(x, str):
            head, data = {"k": "str"}, x.encode()
        else:
            try:
                data = memoryview(x).cast("B")
            except TypeError as e:
                raise InvalidArgumentError(f"cannot send a {type(x).__name__}: pass bytes, an array or a tensor "
                                           "(pickle.dumps objects yourself)") from e
            head = {"k": "bytes"}
    else:
        head = {"k": "torch" if _is_tensor(x) else "numpy", "d": arr.dtype.str, "s": list(arr.shape)}
        data = memoryview(arr.reshape(-1).view(_np().uint8))
    text = json.dumps(head).encode()
    if len(text) >= _HEADER:
        raise InvalidArgumentError("array shape too long to send")
    out = bytearray(_HEADER + len(data))
    out[:len(text)] = text
    out[_HEADER:] = data
    return out


def _decode(buf):
    mv = memoryview(buf)
    if len(mv) < _HEADER:
        raise HMCError(f"a payload of {len(mv)} bytes has no header")
    head = json.loads(bytes(mv[:_HEADER]).rstrip(b"\0"))
    kind = head.get("k")
    if kind == "bytes":
        return bytes(mv[_HEADER:])
    if kind == "str":
        return bytes(mv[_HEADER:]).decode()
    np = _np()
    out = np.frombuffer(buf, dtype=np.uint8)[_HEADER:].view(np.dtype(head["d"])).reshape(head["s"])
    if kind == "torch":
        import torch

        return torch.from_numpy(out)
    return out


def _contiguous(arrays):
    """One flat uint8 array of the arrays back to back: a view when they already are (slices of one
    array, the usual way to split a send buffer), else a copy."""
    np = _np()
    first, size = arrays[0], arrays[0].nbytes
    base = first.base if isinstance(first.base, np.ndarray) else None
    if base is not None and base.flags["C_CONTIGUOUS"] and all(
            a.ctypes.data == first.ctypes.data + i * size and a.flags["C_CONTIGUOUS"] for i, a in enumerate(arrays)):
        start = first.ctypes.data - base.ctypes.data
        flat = base.reshape(-1).view(np.uint8)
        if 0 <= start and start + size * len(arrays) <= flat.nbytes:
            return flat[start:start + size * len(arrays)]
    return np.concatenate([a.reshape(-1).view(np.uint8) for a in arrays])


def _blocks(core_blocks, template):
    """One result per rank from a Blocks buffer (views into it for arrays)."""
    offsets = core_blocks.offsets
    return [_like(template, core_blocks, offsets[i], offsets[i + 1]) for i in range(len(offsets) - 1)]


def _quantile_us(buckets, q):
    """As OpStats::latency_quantile_us: the bound of the bucket (2^i us) holding fraction q."""
    total = sum(buckets)
    if total == 0:
        return 0.0
    seen = 0
    for i, n in enumerate(buckets):
        seen += n
        if seen and seen >= q * total:
            return float(1 << i)
    return float(1 << (len(buckets) - 1))


def _add(a, b):
    """Counters added key by key (lists element-wise); strings are kept from the first."""
    if isinstance(a, dict):
        return {k: _add(v, b[k]) for k, v in a.items() if k in b}
    if isinstance(a, list):
        return [x + y for x, y in zip(a, b)]
    return a + b if isinstance(a, (int, float)) else a


def _world_stats(parts):
    """{"ranks": every rank's stats() by rank, "total": their counters added up}."""
    ranks = []
    for raw in parts:
        s = json.loads(bytes(raw))
        s["peers"] = {int(r): p for r, p in s["peers"].items()}  # JSON made the rank keys strings
        ranks.append(s)
    total = None
    for s in ranks:
        counters = {k: v for k, v in s.items() if k != "peers"}
        total = counters if total is None else _add(total, counters)
    for kind in total["ops"].values():
        lat = kind["latency_us"]
        for name, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999)):
            lat[name] = _quantile_us(lat["buckets"], q)
    return {"ranks": ranks, "total": total}


def _torchrun_store(options):
    """Under torchrun's agent, MASTER_PORT is torch's own TCPStore: bootstrap through it."""
    import datetime

    import torch.distributed as dist

    timeout = options.get("store_timeout") or options.get("timeout") or 30.0
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=datetime.timedelta(seconds=float(timeout)))


# Rank and size variables of the launchers env:// reads after torchrun's RANK and WORLD_SIZE, in order.
_LAUNCHERS = (("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
              ("Slurm", "SLURM_PROCID", "SLURM_NTASKS"))


def _launcher_rank_size(environ=os.environ):
    """(rank, size, launcher name) from mpirun's or else srun's variables; None when torchrun's RANK
    or WORLD_SIZE is set (the C++ core reads those) or when neither launcher's variables are."""
    if environ.get("RANK") or environ.get("WORLD_SIZE"):
        return None
    for launcher, rank_var, size_var in _LAUNCHERS:
        if not environ.get(rank_var) and not environ.get(size_var):
            continue
        numbers = []
        for var in (rank_var, size_var):
            value = environ.get(var, "")
            if not re.fullmatch(r"[0-9]+", value):  # int() would also take "-1", " 3" and "1_0"
                raise InvalidConfigError(f"{var}={value!r} ({launcher}) is not a non-negative integer")
            numbers.append(int(value))
        rank, size = numbers
        if size == 0 or rank >= size:
            raise InvalidConfigError(f"{rank_var}={rank} is outside {size_var}={size} ({launcher})")
        return rank, size, launcher
    return None


def _env_rank_size(world_size, rank):
    """env://'s world size and rank: the arguments, else a launcher's (which must agree with them)."""
    found = _launcher_rank_size()
    if found is None:
        return world_size, rank  # the C++ core takes RANK and WORLD_SIZE, or reports them missing
    env_rank, env_size, launcher = found
    if world_size and world_size != env_size:  # env://'s world_size 0 means "from the environment"
        raise InvalidArgumentError(f"world_size={world_size} differs from {launcher}'s {env_size} ranks")
    if rank is not None and rank != env_rank:
        raise InvalidArgumentError(f"rank={rank} differs from {launcher}'s rank {env_rank}")
    return env_size, env_rank


def _dtype_code(arr):
    name = arr.dtype.name
    if name not in _DTYPES:
        raise InvalidArgumentError(f"all_reduce of {name}: supported are {', '.join(_DTYPES)}")
    return _DTYPES[name]


class _Op:
    """A collective as the Session's hooks see an operation (id, done, wait, result()): result()
    turns the C++ result into its Python shape once and keeps it (the hooks ask twice)."""

    __slots__ = ("_op", "_shape", "_value", "id")

    def __init__(self, op, shape):
        self._op, self._shape, self.id = op, shape, op.id

    def done(self):
        return self._op.done()

    def wait(self, timeout=None):
        return self._op.wait(timeout)

    def result(self):
        if not hasattr(self, "_value"):
            self._value = self._op.result(self._shape)
        return self._value


# -- the shared implementation -----------------------------------------------------------------------
class _Base:
    """Builds the collective operations; World waits for them, AsyncWorld awaits them, both through
    the Session's hooks (`_finish`)."""

    def _setup(self, store, world_size, rank, options):
        timeout = options.get("timeout")
        self.timeout = 30.0 if timeout is None else _args.session_timeout(timeout)  # the C++ default
        if hasattr(store, "url") and not isinstance(store, (str, _TorchStore)):
            options.setdefault("job_id", store.job_id)  # an hmc.Store: the world opens its own connection
            store = store.url
        if store == "env://" and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            store, world_size, rank = _torchrun_store(options), int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
        if isinstance(store, str):
            if store.startswith("env://"):
                world_size, rank = _env_rank_size(world_size, rank)
                if world_size is None:
                    world_size = 0  # WORLD_SIZE
            if world_size is None:
                raise InvalidArgumentError("world_size is required (except for env://)")
            self._core = _hmc.World(store, int(world_size), rank, options)
            self._store = None
        else:
            self._core = self._rendezvous(wrap_store(store, options.get("job_id")), world_size, rank, options)
        self.rank = self._core.rank
        self.size = self._core.size
        self.session = RankSession(self._core)

    def _rendezvous(self, store, world_size, rank, options):
        """Bootstrap through a torch-style store: rank, address and the join happen here."""
        if world_size is None:
            world_size = int(os.environ.get("WORLD_SIZE", "0"))
        if world_size <= 0:
            raise InvalidArgumentError("world_size is required")
        size = str(world_size).encode()
        agreed = store.compare_set("world/size", b"", size)
        if bytes(agreed) != size:
            raise InvalidArgumentError(f"world size {world_size} differs from the size {agreed!r} others use")
        if rank is None:
            rank = store.add("world/rank_counter", 1) - 1
            if rank >= world_size:
                raise InvalidArgumentError(f"more than {world_size} ranks joined")
        core = _hmc.World(int(rank), int(world_size), {k: v for k, v in options.items() if k != "start_store"})
        try:
            ip, port = core.address()
            store.set(f"world/{rank}/addr", f"{ip} {port}")
            if store.add("world/joined", 1) == world_size:
                store.set("world/ready", b"1")
            timeout = options.get("store_timeout") or options.get("timeout") or 30.0
            store.wait(["world/ready"], timeout)
            directory = []
            for r in range(world_size):
                host, p = store.get(f"world/{r}/addr").decode().split()
                directory.append((host, int(p)))
            core.join(directory)
        except BaseException:
            core.close()
            raise
        self._store = store
        return core

    def _pending_op(self, name, *args):
        return getattr(self._core, name)(*args, self._notify)

    def _run(self, triple, timeout):
        """Waits for (awaits, in AsyncWorld) a collective; the wait outlasts its own deadline by 1 s,
        so the collective's error (naming a lost rank, or a timeout) comes first."""
        op, shape, finish = triple
        op = _Op(op, shape)
        limit = (self.timeout if timeout is None else timeout) + 1.0
        return self._finish(op, limit, lambda: finish(op.result()))

    # Each returns (op, shape, finish): finish(result) turns the C++ result into Python values.
    def _barrier(self, timeout):
        return self._pending_op("barrier", timeout), "none", lambda r: None

    def _broadcast(self, x, root, timeout):
        data = _encode(x) if self.rank == root else None
        return self._pending_op("broadcast", data, root, timeout), "bytes", _decode

    def _out(self, out, shape, dtype, name):
        """A caller's output array (reused between calls: no new pages each time), or a new one."""
        np = _np()
        if out is None:
            return np.empty(shape, dtype=dtype)
        o = _array_of(out)
        if o is None or o.shape != tuple(shape) or o.dtype != dtype or not o.flags["WRITEABLE"]:
            raise InvalidArgumentError(f"{name}: out must be a writable array of shape {tuple(shape)} and {dtype}")
        return o

    def _all_gather(self, x, timeout, out=None):
        arr = _array_of(x)
        if arr is None:
            return self._pending_op("all_gather_v", x, timeout), "blocks", lambda b: _blocks(b, x)
        out = self._out(out, (self.size,) + arr.shape, arr.dtype, "all_gather")
        op = self._pending_op("all_gather", arr, out, timeout)
        if _is_tensor(x):
            import torch

            out_t = torch.from_numpy(out)
            return op, "none", lambda _: list(out_t.unbind(0))
        return op, "none", lambda _: list(out)

    def _stats(self, timeout):
        mine = json.dumps(self._core.stats()).encode()  # taken as the collective starts
        op, shape, finish = self._all_gather(mine, timeout)
        return op, shape, lambda r: _world_stats(finish(r))

    def _gather(self, x, root, timeout):
        op = self._pending_op("gather", x if _array_of(x) is None else _array_of(x), root, timeout)
        return op, "blocks", lambda b: _blocks(b, x) if self.rank == root else None

    def _scatter(self, xs, root, timeout):
        if self.rank == root:
            if xs is None or len(xs) != self.size:
                raise InvalidArgumentError(f"scatter: the root passes {self.size} items, one per rank")
            blocks = [_encode(x) for x in xs]
        else:
            blocks = []
        return self._pending_op("scatter", blocks, root, timeout), "bytes", _decode

    def _all_to_all(self, xs, timeout, out=None):
        xs = list(xs)
        if len(xs) != self.size:
            raise InvalidArgumentError(f"all_to_all takes {self.size} items, one per destination rank")
        arrays = [_array_of(x) for x in xs]
        if all(a is not None for a in arrays) and len({(a.dtype.str, a.shape) for a in arrays}) == 1:
            # Equal arrays: one input, results written straight into one array (no copies after).
            out = self._out(out, (self.size,) + arrays[0].shape, arrays[0].dtype, "all_to_all")
            op = self._pending_op("all_to_all", _contiguous(arrays), out, timeout)
            if _is_tensor(xs[0]):
                import torch

                out_t = torch.from_numpy(out)
                return op, "none", lambda _: list(out_t.unbind(0))
            return op, "none", lambda _: list(out)
        srcs = [x if a is None else a for x, a in zip(xs, arrays)]
        return self._pending_op("all_to_all_v", srcs, timeout), "blocks", lambda b: _blocks(b, xs[0])

    def _all_reduce(self, x, op, timeout, out=None):
        arr = _array_of(x)
        if arr is None:
            raise InvalidArgumentError("all_reduce takes a NumPy array or a CPU tensor")
        if op not in _OPS:
            raise InvalidArgumentError(f"op must be one of {', '.join(_OPS)}")
        out = self._out(out, arr.shape, arr.dtype, "all_reduce")
        pending = self._pending_op("all_reduce", arr, out, _dtype_code(arr), _OPS[op], timeout)
        return pending, "none", lambda _: _wrap_like(x, out)


class RankSession:
    """The Session under a world (blocking calls); a peer is a rank, or 'ip', 'ip:port', (ip, port)
    as hmc.Session takes them."""

    _rank = Session._rank  # the one place a peer becomes a rank

    def __init__(self, core):
        self._core = core

    def put(self, peer, local_off, remote_off, nbytes):
        self._rma(True, peer, local_off, remote_off, nbytes)

    def get(self, peer, local_off, remote_off, nbytes):
        self._rma(False, peer, local_off, remote_off, nbytes)

    def _rma(self, is_put, peer, local_off, remote_off, nbytes):
        self._core.rma(is_put, self._rank(peer), _args.offset(local_off, "local_off"),
                       _args.offset(remote_off, "remote_off"), _args.size(nbytes, "nbytes"))

    def write(self, data, offset=0):
        """Copies data into this rank's session buffer; returns nbytes."""
        return self._core.write(_payload.source(data), offset)

    def read(self, offset, nbytes):
        return self._core.read(offset, nbytes)

    def ctrl_send(self, peer, tag):
        self._core.ctrl_send(self._rank(peer), tag)

    def ctrl_recv(self, peer, timeout=None):
        return self._core.ctrl_recv(self._rank(peer), _args.timeout(timeout))

    def connect(self, peer, timeout=None):
        """Makes peer (a rank) a put/get target now (collectives connect on their own)."""
        self._core.connect(_args.rank(peer, "peer"), _args.timeout(timeout))

    def peers(self):
        return self._core.connected()

    def transports(self, peer):
        return self._core.transports(self._rank(peer))

    def stats(self):
        """This rank's session counters, as hmc.Session.stats() gives them (collectives included)."""
        return self._core.stats()

    @property
    def buffer_size(self):
        return self._core.buffer_size()


class World(_Base):
    """A world of ranks; blocking collectives (the GIL is released while they run).

    World(store, world_size=None, rank=None, **options): store is a URL (tcp://, etcd://, env://), an
    hmc.Store or a torch.distributed.Store-like object. rank=None: assigned by the store; env:// takes
    rank and size from torchrun's RANK/WORLD_SIZE, else mpirun's OMPI_COMM_WORLD_*, else srun's
    SLURM_PROCID/SLURM_NTASKS (explicit arguments must agree with mpirun's or srun's). Options:
    buffer_size (bounds one round of a collective; default 64 MiB), ucx_tls, ucx_net_devices,
    progress_mode, timeout (s), job_id, auth_key, authenticate, start_store, local_ip, full_mesh,
    store_timeout, lease_ttl, ctrl_uds_dir, store_tls (a URL's store over TLS, and the one rank 0
    starts: a dict as hmc.Store's tls=). A collective's timeout: seconds, inf, or None (the world's
    timeout).
    """

    _notify = False
    _finish = Session._finish  # waits exactly as a Session's blocking operations do

    def __init__(self, store, world_size=None, rank=None, **options):
        self._setup(store, world_size, rank, options)

    def barrier(self, timeout=None):
        timeout = _args.timeout(timeout)
        return self._run(self._barrier(timeout), timeout)

    def broadcast(self, x, root=0, timeout=None):
        """root's x everywhere (the others' x is ignored; pass None)."""
        timeout = _args.timeout(timeout)
        return self._run(self._broadcast(x, root, timeout), timeout)

    def all_gather(self, x, timeout=None, out=None):
        """A list indexed by rank of every rank's x (arrays: equal shapes; the list holds views of
        one array of shape (size,) + x.shape: `out`, when given, is that array)."""
        timeout = _args.timeout(timeout)
        return self._run(self._all_gather(x, timeout, out), timeout)

    def gather(self, x, root=0, timeout=None):
        """On root: a list indexed by rank; None elsewhere."""
        timeout = _args.timeout(timeout)
        return self._run(self._gather(x, root, timeout), timeout)

    def scatter(self, xs, root=0, timeout=None):
        """root's xs[rank] on every rank (xs: one item per rank on the root, None elsewhere)."""
        timeout = _args.timeout(timeout)
        return self._run(self._scatter(xs, root, timeout), timeout)

    def all_to_all(self, xs, timeout=None, out=None):
        """xs indexed by destination; returns a list indexed by source. Any sizes per pair; with
        equal arrays, views of one array of shape (size,) + shape (`out`, when given)."""
        timeout = _args.timeout(timeout)
        return self._run(self._all_to_all(xs, timeout, out), timeout)

    all_to_all_v = all_to_all

    def all_reduce(self, x, op="sum", timeout=None, out=None):
        """A new array/tensor (or `out`): the element-wise sum, max or min over the ranks."""
        timeout = _args.timeout(timeout)
        return self._run(self._all_reduce(x, op, timeout, out), timeout)

    def stats(self, timeout=None):
        """Every rank's session counters and their sum, the same on every rank (a collective: all
        ranks call it): {"ranks": [stats() of rank 0, 1, ...], "total": the counters added up}."""
        timeout = _args.timeout(timeout)
        return self._run(self._stats(timeout), timeout)

    def close(self):
        self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class AsyncWorld(_Base):
    """World's collectives as asyncio coroutines. Start it with `await hmc.init_async_world(...)` or
    `async with hmc.AsyncWorld(...) as w`. Completions reach the event loop through one eventfd,
    drained by AsyncSession's own plumbing (a world's core has a SessionHandle's completion_fd and drain)."""

    _notify = True
    progress_thread = "own"  # a world's core has its own loop thread: no in-thread progress
    _wakeup = None
    _finish = AsyncSession._finish
    _settle = AsyncSession._settle
    _track = AsyncSession._track
    _attach = AsyncSession._attach
    _on_loop = AsyncSession._on_loop
    _drain = AsyncSession._drain
    _settle_early = AsyncSession._settle_early
    _settle_one = staticmethod(AsyncSession._settle_one)
    _call = AsyncSession._call
    _blocking = AsyncSession._blocking

    def __init__(self, store, world_size=None, rank=None, **options):
        self._start_args = (store, world_size, rank, options)
        self._pending = {}  # op id -> (asyncio future, op), as in AsyncSession
        self._loop = None

    async def start(self):
        store, world_size, rank, options = self._start_args
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, functools.partial(self._setup, store, world_size, rank, options))
        self._attach()
        return self

    async def barrier(self, timeout=None):
        timeout = _args.timeout(timeout)
        return await self._run(self._barrier(timeout), timeout)

    async def broadcast(self, x, root=0, timeout=None):
        timeout = _args.timeout(timeout)
        return await self._run(self._broadcast(x, root, timeout), timeout)

    async def all_gather(self, x, timeout=None, out=None):
        timeout = _args.timeout(timeout)
        return await self._run(self._all_gather(x, timeout, out), timeout)

    async def gather(self, x, root=0, timeout=None):
        timeout = _args.timeout(timeout)
        return await self._run(self._gather(x, root, timeout), timeout)

    async def scatter(self, xs, root=0, timeout=None):
        timeout = _args.timeout(timeout)
        return await self._run(self._scatter(xs, root, timeout), timeout)

    async def all_to_all(self, xs, timeout=None, out=None):
        timeout = _args.timeout(timeout)
        return await self._run(self._all_to_all(xs, timeout, out), timeout)

    all_to_all_v = all_to_all

    async def all_reduce(self, x, op="sum", timeout=None, out=None):
        timeout = _args.timeout(timeout)
        return await self._run(self._all_reduce(x, op, timeout, out), timeout)

    async def stats(self, timeout=None):
        timeout = _args.timeout(timeout)
        return await self._run(self._stats(timeout), timeout)

    async def close(self):
        if not hasattr(self, "_core"):
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._core.completion_fd())
        await self._call(self._core.close)
        for fut, _ in self._pending.values():
            if not fut.done():
                fut.cancel()
        self._pending.clear()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()


def init_world(store_url="env://", world_size=None, rank=None, **session_options):
    """Joins (or forms) a world: returns an hmc.World once all world_size ranks joined."""
    return World(store_url, world_size, rank, **session_options)


async def init_async_world(store_url="env://", world_size=None, rank=None, **session_options):
    """init_world for asyncio: returns a started hmc.AsyncWorld."""
    return await AsyncWorld(store_url, world_size, rank, **session_options).start()
