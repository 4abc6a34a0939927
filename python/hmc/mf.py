"""memfabric's Python names over HMC's world and transfer engine (a thin layer, one way to each thing).

    import hmc.mf as mf
    mf.initialize()                                            # runtime set-up (flags=0)
    mf.bm.initialize("tcp://10.0.0.1:29400", 4, 0, cfg)        # BM: hmc.mf.bm (hmc._mf_bm)
    mf.shm.initialize("tcp://10.0.0.1:29400", 4, r, 0, cfg)    # SMEM: hmc.mf.shm (hmc._mf_shm)

    mf.initialize("tcp://10.0.0.1:29400", world_size=4, rank_id=r, device_id=0, config=None)
    mf.barrier(); everyone = mf.all_gather(b"mine")            # bytes, rank after rank

    engine = mf.TransferEngine()
    engine.initialize("tcp://10.0.0.1:29400", "10.0.0.2:5000", "prefill", 0)
    engine.register_memory(array.ctypes.data, array.nbytes)
    engine.transfer_sync_write("10.0.0.1:5000", src.ctypes.data, peer_address, nbytes)

The top level, BM and SMEM share one hmc.World per process (hmc._mf_runtime). As in memfabric,
calls that return an int return 0 on success and a negative hmc.Status on failure (the message is
in get_last_err_msg()); calls that return data raise hmc errors. A buffer may be an address (int)
or an object with the buffer protocol (NumPy array, CPU tensor).
"""
import enum
import re

from . import _args, _hmc, _logging, _payload
from . import _mf_bm as bm  # noqa: F401 - memfabric's submodule
from . import _mf_shm as shm  # noqa: F401 - memfabric's submodule
from ._errors import InvalidArgumentError
from ._errors import get_and_clear_last_err_msg, get_last_err_msg  # noqa: F401 - memfabric's names
from . import _mf_runtime
from ._mf_runtime import returns_code as _returns_code
from ._mf_runtime import runtime as _runtime
from .session import Session
from .world import _Op

_fail = _mf_runtime.fail  # memfabric's return-code convention, shared with bm and shm
_state = {"initialized": False, "stores": {}}

__all__ = ["bm", "shm", "initialize", "uninitialize", "rank_id", "world_size", "barrier", "all_gather",
           "set_log_level", "set_extern_logger", "get_last_err_msg", "get_and_clear_last_err_msg",
           "create_config_store", "set_conf_store_tls", "set_conf_store_tls_key", "TransferOpcode",
           "TransferEngine", "TransferFuture"]


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
def initialize(flags=0, world_size=None, rank_id=None, device_id=0, config=None, *, store_url=None):
    """initialize(flags=0): memfabric's runtime set-up (nothing to start: bm/shm.initialize join the
    world). initialize(store_url, world_size, rank_id=None, device_id=0, config=None): also joins the
    world at store_url (tcp://ip:port; rank 0 starts the store unless config says start_store=False)
    for barrier/all_gather here; config: a dict (or object with attributes) of hmc.World options,
    plus memfabric's init_timeout (seconds)."""
    if store_url is not None or isinstance(flags, str):
        _join(flags if store_url is None else store_url, world_size, rank_id, config)
    elif isinstance(flags, bool) or not isinstance(flags, int):
        raise InvalidArgumentError(f"flags={flags!r} must be an int (or pass a store URL to join a world)")
    _state["initialized"] = True


def _join(store_url, world_size, rank_id, config):
    options = dict(config if isinstance(config, dict) else vars(config) if config is not None else {})
    if "init_timeout" in options:
        options["store_timeout"] = options.pop("init_timeout")
    for unused in ("create_timeout", "operation_timeout", "flags", "auto_ranking", "rank_id"):
        options.pop(unused, None)
    _runtime.acquire("top", store_url, world_size, rank_id, options)


def uninitialize(flags=0):
    """Ends the runtime: leaves the world joined by initialize(store_url, ...) and stops the config
    stores create_config_store started (bm/shm.uninitialize leave theirs)."""
    _runtime.release("top")
    for server in _state["stores"].values():
        server.close()
    _state["stores"].clear()
    _state["initialized"] = False


def _world():
    if _runtime.world is None:
        raise InvalidArgumentError("not initialized: call hmc.mf.initialize first")
    return _runtime.world


def rank_id():
    return _world().rank


def world_size():
    return _world().size


def barrier():
    _world().barrier()


def all_gather(local_data):
    """Every rank's bytes, concatenated in rank order (memfabric's ShareMemory.all_gather)."""
    _world()
    return b"".join(_runtime.all_gather_bytes(bytes(local_data), None))


class TransferOpcode(enum.IntEnum):
    READ = 0
    WRITE = 1


@_returns_code
def create_config_store(store_url):
    """Serves hmc's embedded store at store_url (tcp://ip:port) in this process, until uninitialize();
    clients (TransferEngine, bm/shm with start_store=False) authenticate with the shared key
    (HMC_AUTH_KEY or the key file), over TLS after set_conf_store_tls(True, ...)."""
    m = re.fullmatch(r"tcp://(\[[0-9a-fA-F:]+\]|[^:/\[\]]+):([0-9]{1,5})", str(store_url))
    if m is None:
        raise InvalidArgumentError(f"store_url={store_url!r} must be tcp://ip:port")
    if store_url in _state["stores"]:
        raise InvalidArgumentError(f"a config store already serves {store_url} in this process")
    server = _hmc.StoreServer(tls=_mf_runtime.store_tls.options())
    server.listen(m.group(1).strip("[]"), int(m.group(2)))
    _state["stores"][store_url] = server


@_returns_code
def set_conf_store_tls(enable, tls_info=""):
    """enable=True: the config store runs over TLS for everything hmc.mf starts afterwards (both
    sides present a certificate and verify the other's); tls_info as in memfabric:
    "tlsCaPath: DIR; tlsCaFile: ca.pem[,ca2.pem]; tlsCert: FILE[; tlsCrlPath: DIR; tlsCrlFile:
    crl.pem,...][; packagePath: ...]" (packagePath is accepted and unused: hmc links OpenSSL). The
    private key comes from set_conf_store_tls_key. enable=False: in clear (the default)."""
    if enable:
        _mf_runtime.store_tls.enable(tls_info)
    else:
        _mf_runtime.store_tls.disable()


@_returns_code
def set_conf_store_tls_key(tls_pk, tls_pk_pw, py_decrypt_func=None):
    """The config store's private key: tls_pk its PEM text, tls_pk_pw its password (for an encrypted
    key; "" for none). With py_decrypt_func, tls_pk_pw is the password's ciphertext and
    py_decrypt_func(tls_pk_pw) -> str the password: called once, here; the result is never logged."""
    if isinstance(tls_pk, bytes):
        tls_pk = tls_pk.decode("ascii", "replace")
    if not isinstance(tls_pk, str) or "-----BEGIN" not in tls_pk or "PRIVATE KEY-----" not in tls_pk:
        raise InvalidArgumentError("tls_pk must be the private key's PEM text (-----BEGIN ... PRIVATE KEY-----)")
    if not isinstance(tls_pk_pw, (str, bytes)):
        raise InvalidArgumentError(f"tls_pk_pw must be a str, not {type(tls_pk_pw).__name__}")
    if py_decrypt_func is not None and not callable(py_decrypt_func):
        raise InvalidArgumentError(f"py_decrypt_func must be callable or None, not {type(py_decrypt_func).__name__}")
    password = tls_pk_pw
    if py_decrypt_func is not None:
        try:
            password = py_decrypt_func(tls_pk_pw)
        except Exception as e:  # its message may hold the secret: only the type is reported
            raise InvalidArgumentError(f"py_decrypt_func raised {type(e).__name__}") from None
        if not isinstance(password, (str, bytes)):
            raise InvalidArgumentError(f"py_decrypt_func must return a str, not {type(password).__name__}")
    if isinstance(password, bytes):
        password = password.decode("utf-8", "surrogateescape")
    _mf_runtime.store_tls.set_key(tls_pk, password)


@_returns_code
def set_extern_logger(log_fn):
    """Every HMC log line to log_fn(level, message) (hmc.set_extern_logger)."""
    _logging.set_extern_logger(log_fn)


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
        tls = _mf_runtime.store_tls.options()
        if tls is not None:
            options = {"store_tls": tls, **options}
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
