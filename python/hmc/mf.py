"""memfabric's Python names over HMC's world and transfer engine (a thin layer, one way to each thing).

    import hmc.mf as mf
    mf.initialize("tcp://10.0.0.1:29400", world_size=4, rank_id=r, device_id=0, config=None)
    mf.barrier(); everyone = mf.all_gather(b"mine")          # bytes, rank after rank

    engine = mf.TransferEngine()
    engine.initialize("tcp://10.0.0.1:29400", "10.0.0.2:5000", "prefill", 0)
    engine.register_memory(array.ctypes.data, array.nbytes)
    engine.transfer_sync_write("10.0.0.1:5000", src.ctypes.data, peer_address, nbytes)

As in memfabric, calls that return an int return 0 on success and a negative hmc.Status on failure
(the message is in get_last_err_msg()); calls that return data raise hmc errors. A buffer may be an
address (int) or an object with the buffer protocol (NumPy array, CPU tensor).
"""
import logging

from . import _args, _hmc, _logging, _payload
from ._errors import HMCError, InvalidArgumentError
from ._errors import get_and_clear_last_err_msg, get_last_err_msg  # noqa: F401 - memfabric's names
from .session import Session
from .world import World, _Op

_state = {"world": None}


def _fail(e):
    """An HMCError as memfabric's return code; creating it recorded its message for get_last_err_msg()."""
    logging.getLogger("hmc.mf").error("%s", e)
    return -int(getattr(e, "status", 1)) or -1


def _returns_code(fn):
    def call(*args, **kwargs):
        try:
            fn(*args, **kwargs)
            return 0
        except HMCError as e:
            return _fail(e)

    call.__name__, call.__doc__ = fn.__name__, fn.__doc__
    return call


def _address(buffer):
    if isinstance(buffer, int):
        return buffer
    if _payload.is_tensor(buffer):
        return buffer.data_ptr()
    import ctypes

    view = memoryview(_payload.source(buffer)).cast("B")
    if view.readonly:
        raise InvalidArgumentError("the buffer must be writable (or pass its address as an int)")
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


@_returns_code
def initialize(store_url, world_size, rank_id=None, device_id=0, config=None):
    """Joins the world at store_url (tcp://ip:port; rank 0 starts the store unless config says
    start_store=False). config: a dict (or object with attributes) of hmc.World options, plus
    memfabric's init_timeout (seconds)."""
    options = dict(config if isinstance(config, dict) else vars(config) if config is not None else {})
    if "init_timeout" in options:
        options["store_timeout"] = options.pop("init_timeout")
    for unused in ("create_timeout", "operation_timeout", "flags", "auto_ranking", "rank_id"):
        options.pop(unused, None)
    if _state["world"] is not None:
        raise InvalidArgumentError("already initialized (call uninitialize first)")
    _state["world"] = World(store_url, world_size, rank_id, **options)


def uninitialize(flags=0):
    world, _state["world"] = _state["world"], None
    if world is not None:
        world.close()


def _world():
    if _state["world"] is None:
        raise InvalidArgumentError("not initialized: call hmc.mf.initialize first")
    return _state["world"]


def rank_id():
    return _world().rank


def world_size():
    return _world().size


def barrier():
    _world().barrier()


def all_gather(local_data):
    """Every rank's bytes, concatenated in rank order (memfabric's ShareMemory.all_gather)."""
    return b"".join(_world().all_gather(bytes(local_data)))


@_returns_code
def set_log_level(level):
    """0 debug, 1 info, 2 warn, 3 error (hmc.set_log_level)."""
    _logging.set_log_level(level)


class TransferFuture:
    """The result of transfer_async_*_submit: done(), result(timeout) (raises the transfer's error)."""

    def __init__(self, op, keep):
        self._op = op
        self._keep = keep  # buffers passed as objects stay alive until the transfer is done

    def done(self):
        return self._op.done()

    def result(self, timeout=None):
        if not self._op.wait(timeout):
            from ._errors import TimeoutError

            raise TimeoutError(f"transfer not complete after {timeout} s")
        self._keep = None
        return self._op.result("none")

    def wait(self, timeout=None):
        return self._op.wait(timeout)


class TransferEngine:
    """memfabric's TransferEngine: peers by unique id ("ip:port"), memory by address."""

    _finish = Session._finish  # a synchronous transfer waits as a Session's blocking operation does

    def __init__(self):
        self._core = None
        self.timeout = 30.0

    def _engine(self):
        if self._core is None:
            raise InvalidArgumentError("the engine is not initialized")
        return self._core

    @_returns_code
    def initialize(self, store_url, unique_id, role="", device_id=0, **options):
        """role and device_id are kept for memfabric's signature; options are hmc.World's."""
        self.role, self.device_id = role, device_id
        timeout = options.get("timeout")
        self.timeout = 30.0 if timeout is None else _args.session_timeout(timeout)  # the C++ default
        self._core = _hmc.TransferEngine(store_url, unique_id, options)

    def get_rpc_port(self):
        return self._engine().rpc_port()

    @_returns_code
    def register_memory(self, buffer_addr, capacity):
        self._engine().register_memory(_address(buffer_addr), int(capacity))

    @_returns_code
    def batch_register_memory(self, buffer_addrs, capacities):
        for addr, cap in zip(buffer_addrs, capacities, strict=True):
            self._engine().register_memory(_address(addr), int(cap))

    @_returns_code
    def unregister_memory(self, buffer_addr):
        self._engine().unregister_memory(_address(buffer_addr))

    def _submit(self, is_write, destflag, buffers, addresses, lengths):
        locals_ = [_address(b) for b in buffers]
        return self._engine().submit(is_write, destflag, locals_, [int(a) for a in addresses],
                                     [int(n) for n in lengths], False)

    @_returns_code
    def transfer_sync_write(self, destflag, buffer, peer_buffer_address, length):
        op = self._submit(True, destflag, [buffer], [peer_buffer_address], [length])
        self._finish(_Op(op, "none"))

    @_returns_code
    def transfer_sync_read(self, destflag, buffer, peer_buffer_address, length):
        op = self._submit(False, destflag, [buffer], [peer_buffer_address], [length])
        self._finish(_Op(op, "none"))

    @_returns_code
    def batch_transfer_sync_write(self, destflag, buffers, peer_buffer_addresses, lengths):
        op = self._submit(True, destflag, list(buffers), list(peer_buffer_addresses), list(lengths))
        self._finish(_Op(op, "none"))

    def transfer_async_write_submit(self, destflag, buffer, peer_buffer_address, length, stream=None):
        """A TransferFuture (memfabric's stream argument has no meaning on CPU memory)."""
        return TransferFuture(self._submit(True, destflag, [buffer], [peer_buffer_address], [length]), buffer)

    def transfer_async_read_submit(self, destflag, buffer, peer_buffer_address, length, stream=None):
        return TransferFuture(self._submit(False, destflag, [buffer], [peer_buffer_address], [length]), buffer)

    def destroy(self):
        if self._core is not None:
            self._core.close()
            self._core = None

    unInitialize = destroy  # noqa: N815 - memfabric's name
