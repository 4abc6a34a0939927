"""What Python objects can be: sources (bytes, bytearray, memoryview, any buffer, NumPy arrays,
torch tensors) and destinations (writable, C-contiguous buffers, CPU tensors). CUDA tensors take
the device path."""
from ._errors import InvalidArgumentError


def _is_tensor(obj):
    t = type(obj)
    return t.__module__.startswith("torch") and t.__name__ in ("Tensor", "Parameter")


def device_of(obj):
    """('cuda', device_index) for a CUDA tensor, else None."""
    if _is_tensor(obj) and obj.is_cuda:
        return ("cuda", obj.device.index or 0)
    return None


def source(obj):
    """A C-contiguous buffer with the bytes of obj; non-contiguous arrays and tensors are copied."""
    if _is_tensor(obj):
        t = obj.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        return t.numpy()
    if type(obj).__module__ == "numpy" and hasattr(obj, "flags") and not obj.flags["C_CONTIGUOUS"]:
        import numpy

        return numpy.ascontiguousarray(obj)
    if isinstance(obj, memoryview) and not obj.c_contiguous:
        return obj.tobytes()
    return obj


def destination(obj):
    """A writable C-contiguous buffer sharing obj's memory; never a silent copy."""
    if _is_tensor(obj):
        if not obj.is_contiguous():
            raise InvalidArgumentError("destination tensor must be contiguous (use .contiguous() and copy back)")
        return obj.detach().numpy()
    if type(obj).__module__ == "numpy" and hasattr(obj, "flags"):
        if not obj.flags["C_CONTIGUOUS"]:
            raise InvalidArgumentError("destination array must be C-contiguous (np.ascontiguousarray copies)")
        if not obj.flags["WRITEABLE"]:
            raise InvalidArgumentError("destination array is read-only")
    if isinstance(obj, (bytes, str)):
        raise InvalidArgumentError(f"destination must be writable, not {type(obj).__name__} (use a bytearray)")
    return obj


def nbytes(obj):
    """Size in bytes of a source or destination."""
    if _is_tensor(obj):
        return obj.element_size() * obj.nelement()
    if hasattr(obj, "nbytes"):
        return int(obj.nbytes)
    return memoryview(obj).nbytes
