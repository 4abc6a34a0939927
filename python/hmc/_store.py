"""hmc.Store: the key-value store ranks bootstrap through (`python -m hmc.store` serves one).

    store = hmc.Store("tcp://10.0.0.1:29400", job_id="run7")   # or etcd://h1:2379,h2:2379 or env://
    store.set("k", b"v"); store.get("k", timeout=5); store.add("n", 1)

Any object with torch.distributed.Store's methods (set/get/wait/add), e.g. a TCPStore, works
where a store is expected: wrap_store() gives it the same interface and the job namespace.
"""
import datetime
import os

from . import _hmc
from ._errors import InvalidArgumentError, TimeoutError


def _default_job():
    return os.environ.get("HMC_JOB_ID") or os.environ.get("TORCHELASTIC_RUN_ID") or "hmc"


class Store:
    """A store by URL: tcp:// (the embedded store), etcd://host:port[,host:port...], env://.

    Every key lives under job_id. Values are bytes (str is encoded as UTF-8). get/wait block up to
    `timeout` seconds (None: the store's timeout) and raise hmc.TimeoutError naming the keys.
    tls (tcp:// only): {"cert": PEM file, "key": PEM file (or "key_pem": the key's text),
    "key_password": of an encrypted key, "ca": file or list, "crl": file or list}; the server must
    use TLS too (StoreServer(tls=...), python -m hmc.store --tls-*, World store_tls=).
    """

    def __init__(self, url, *, job_id=None, timeout=30.0, auth_key=None, authenticate=True, lease_ttl=10, tls=None):
        opts = {"timeout": float(timeout), "authenticate": bool(authenticate), "lease_ttl": int(lease_ttl),
                "store_tls": tls}
        if job_id:
            opts["job_id"] = job_id
        if auth_key:
            opts["auth_key"] = auth_key
        self._core = _hmc.Store(url, opts)
        self.timeout = float(timeout)

    @property
    def url(self):
        return self._core.url

    @property
    def job_id(self):
        return self._core.job_id

    def set(self, key, value):
        self._core.set(key, value)

    def get(self, key, timeout=None):
        return self._core.get(key, _seconds(timeout))

    def wait(self, keys, timeout=None):
        self._core.wait(list(keys), _seconds(timeout))

    def add(self, key, amount):
        return self._core.add(key, int(amount))

    def compare_set(self, key, expected, desired):
        return self._core.compare_set(key, expected, desired)

    def delete(self, key):
        return self._core.delete(key)

    delete_key = delete  # torch.distributed.Store's name

    def check(self, keys):
        return self._core.check(list(keys))

    def close(self):
        self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _seconds(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return timeout


class _TorchStore:
    """A torch.distributed.Store-like object with hmc.Store's interface and a job namespace."""

    def __init__(self, store, job_id):
        for name in ("set", "get", "wait", "add"):
            if not callable(getattr(store, name, None)):
                raise InvalidArgumentError(f"a store needs set/get/wait/add methods; {type(store).__name__} lacks {name}")
        self._store = store
        self.job_id = job_id or _default_job()
        self.url = f"<{type(store).__name__}>"

    def _k(self, key):
        return f"{self.job_id}/{key}"

    def set(self, key, value):
        self._store.set(self._k(key), value)

    def get(self, key, timeout=None):
        if timeout is not None:
            self.wait([key], timeout)
        return bytes(self._store.get(self._k(key)))

    def wait(self, keys, timeout=None):
        keys = [self._k(k) for k in keys]
        try:
            if timeout is None:
                self._store.wait(keys)
            else:
                self._store.wait(keys, datetime.timedelta(seconds=float(_seconds(timeout))))
        except Exception as e:  # torch raises RuntimeError/DistStoreError on a timeout
            if "timeout" in str(e).lower() or "timed out" in str(e).lower():
                raise TimeoutError(f"store {self.url}: not set within {timeout} s: {keys}") from e
            raise

    def add(self, key, amount):
        return int(self._store.add(self._k(key), int(amount)))

    def compare_set(self, key, expected, desired):
        return bytes(self._store.compare_set(self._k(key), expected, desired))

    def delete(self, key):
        return bool(self._store.delete_key(self._k(key)))

    delete_key = delete

    def check(self, keys):
        return bool(self._store.check([self._k(k) for k in keys]))

    def close(self):
        pass


def wrap_store(store, job_id=None):
    """hmc.Store for a URL; a torch.distributed.Store-like object gets hmc.Store's interface."""
    if isinstance(store, (Store, _TorchStore)):
        return store
    if isinstance(store, str):
        return Store(store, job_id=job_id)
    return _TorchStore(store, job_id)
