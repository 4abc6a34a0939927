"""What Python objects can be: sources (bytes, bytearray, memoryview, any buffer, NumPy arrays,
torch tensors of any dtype) and destinations (writable, C-contiguous buffers, CPU tensors). CUDA
tensors take the device path. Tensors travel as their raw bytes, so dtypes NumPy lacks (bfloat16,
float8, ...) work too; arrays of Python objects are refused (their bytes are pointers)."""
from ._enums import MemoryType
from ._errors import InvalidArgumentError, UnsupportedError
from ._hmc import memory_available


def is_tensor(obj):
    t = type(obj)
    return t.__module__.startswith("torch") and t.__name__ in ("Tensor", "Parameter")


def device_of(obj):
    """('cuda', device_index) for a CUDA tensor, else None."""
    if is_tensor(obj) and obj.is_cuda:
        return ("cuda", obj.device.index or 0)
    return None


def require_memory(mem_type, device_id, what):
    """UnsupportedError, with the reason, where this build or machine lacks mem_type memory."""
    ok, why = memory_available(int(mem_type), device_id)
    if not ok:
        name = "CUDA" if mem_type == MemoryType.NVIDIA_GPU else mem_type.name
        raise UnsupportedError(f"{what}: {name} memory is unavailable here ({why})")


def cuda_device(t, what):
    """The CUDA device index of tensor t; UnsupportedError (with the reason) where CUDA memory is
    unavailable, InvalidArgumentError for anything but a CUDA tensor."""
    require_memory(MemoryType.NVIDIA_GPU, 0, what)
    dev = device_of(t)
    if dev is None:
        raise InvalidArgumentError(f"{what} needs a CUDA tensor, not {type(t).__name__}")
    return dev[1]


def _numpy_array(obj):
    return type(obj).__module__ == "numpy" and hasattr(obj, "flags") and hasattr(obj, "dtype")


def _tensor_bytes(t, name):
    """A uint8 NumPy view of a CPU tensor's bytes (shares its memory)."""
    import torch

    if t.device.type != "cpu":
        raise InvalidArgumentError(f"{name}: a tensor on {t.device} needs the device path (device='cuda')")
    try:
        return t.detach().reshape(-1).view(torch.uint8).numpy()
    except RuntimeError as e:  # sparse, quantized, ...: no flat byte view
        raise InvalidArgumentError(f"{name}: this {t.dtype} tensor has no flat byte view ({e})") from None


def _refuse_objects(obj, name):
    if _numpy_array(obj) and obj.dtype.hasobject:
        raise InvalidArgumentError(f"{name}: an array of Python objects (dtype {obj.dtype}) cannot be transferred; "
                                   "its bytes are pointers (convert it to a numeric dtype)")


def _require_buffer(obj, name):
    try:
        memoryview(obj).release()
    except TypeError:
        raise InvalidArgumentError(f"{name} must be bytes-like, a NumPy array or a tensor, not {type(obj).__name__}") \
            from None


def source(obj, name="data"):
    """A C-contiguous buffer with the bytes of obj; non-contiguous arrays and tensors are copied."""
    if type(obj) in (bytes, bytearray):
        return obj
    if is_tensor(obj):
        t = obj if obj.is_contiguous() else obj.contiguous()
        return _tensor_bytes(t, name)
    _refuse_objects(obj, name)
    if _numpy_array(obj) and not obj.flags["C_CONTIGUOUS"]:
        import numpy

        return numpy.ascontiguousarray(obj)
    if isinstance(obj, memoryview) and not obj.c_contiguous:
        return obj.tobytes()
    if isinstance(obj, str):
        raise InvalidArgumentError(f"{name} must be bytes-like, not str (encode it: {name}.encode())")
    _require_buffer(obj, name)
    return obj


def destination(obj, name="dest"):
    """A writable C-contiguous buffer sharing obj's memory; never a silent copy."""
    if type(obj) is bytearray:
        return obj
    if is_tensor(obj):
        if not obj.is_contiguous():
            raise InvalidArgumentError(f"{name}: the tensor must be contiguous (use .contiguous() and copy back)")
        return _tensor_bytes(obj, name)
    _refuse_objects(obj, name)
    if _numpy_array(obj):
        if not obj.flags["C_CONTIGUOUS"]:
            raise InvalidArgumentError(f"{name}: the array must be C-contiguous (np.ascontiguousarray copies)")
        if not obj.flags["WRITEABLE"]:
            raise InvalidArgumentError(f"{name}: the array is read-only")
    if isinstance(obj, (bytes, str)):
        raise InvalidArgumentError(f"{name} must be writable, not {type(obj).__name__} (use a bytearray)")
    _require_buffer(obj, name)
    return obj


def nbytes(obj):
    """Size in bytes of a source or destination (as returned by source()/destination())."""
    if is_tensor(obj):
        return obj.element_size() * obj.nelement()
    if hasattr(obj, "nbytes"):
        return int(obj.nbytes)
    return memoryview(obj).nbytes


def prefix(buf, n, name="size"):
    """The first n bytes of a C-contiguous buffer; n larger than the data is an error, never a
    silent short transfer."""
    have = nbytes(buf)
    if n > have:
        raise InvalidArgumentError(f"{name}={n} exceeds the {have} bytes of the data")
    return buf if n == have else memoryview(buf).cast("B")[:n]


def writable(obj):
    """Whether obj can be a destination (registration picks read-only or read-write from this)."""
    if is_tensor(obj):
        return True
    try:
        return not memoryview(obj).readonly
    except TypeError:
        return False
