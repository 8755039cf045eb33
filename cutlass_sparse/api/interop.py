"""torch in, torch out. A call that gets a torch tensor anywhere runs on CuPy views of
the tensors (DLPack, no copy), on torch's current stream for that device, with what it
allocates for itself drawn from torch's allocator (launch.torch_memory), and returns
torch tensors (the caller's own `out` where one was given). torch is imported only when
a torch tensor is passed; torch.float16 / torch.bfloat16 / torch.float32 / torch.int8
map to f16 / bf16 / f32 (tf32) / s8.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from ..describe.dtypes import bfloat16
from ..launch import torch_memory


_torch_types: dict[type, bool] = {}   # type -> whether it is torch's (asked on every call)


def is_torch(obj) -> bool:
    kind = type(obj)
    found = _torch_types.get(kind)
    if found is None:
        found = _torch_types[kind] = kind.__module__.startswith("torch")
    return found


_NUMPY_OF = {}


def numpy_dtype(torch_dtype):
    """The NumPy dtype of a torch dtype the kernels take, or None."""
    if not _NUMPY_OF:
        import torch

        _NUMPY_OF.update({torch.float16: np.dtype(np.float16), torch.bfloat16: bfloat16,
                          torch.float32: np.dtype(np.float32), torch.int8: np.dtype(np.int8),
                          torch.int32: np.dtype(np.int32)})
    return _NUMPY_OF.get(torch_dtype)


def torch_dtype(np_dtype):
    """The torch dtype of a NumPy dtype the kernels write (None for one torch has no map for here)."""
    numpy_dtype(None)
    return next((t for t, n in _NUMPY_OF.items() if n == np_dtype), None)


def _cupy_view(tensor, dtype):
    """A CuPy array over a CUDA tensor's memory, made from its pointer, shape and strides
    (a few microseconds, where a DLPack exchange costs tens); the tensor stays its owner."""
    import cupy

    item = dtype.itemsize
    shape = tuple(tensor.shape)
    strides = tuple(s * item for s in tensor.stride())
    extent = sum((d - 1) * s for d, s in zip(shape, strides)) + item if all(shape) else 0
    memory = cupy.cuda.UnownedMemory(tensor.data_ptr(), extent, tensor, tensor.device.index)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0), strides)


def to_array(tensor):
    """A CuPy (CUDA tensor) or NumPy (CPU tensor) view of a torch tensor, no copy."""
    import torch

    dtype = numpy_dtype(tensor.dtype)
    if tensor.is_cuda and dtype is not None:
        return _cupy_view(tensor, dtype)
    bf16 = tensor.dtype == torch.bfloat16
    if bf16:   # neither CuPy nor NumPy speaks bfloat16 over DLPack: cross as int16 bits
        tensor = tensor.view(torch.int16)
    if tensor.is_cuda:
        import cupy

        array = cupy.from_dlpack(tensor)
    else:
        array = tensor.detach().numpy()
    return array.view(bfloat16) if bf16 else array


def to_tensor(array):
    """A torch view of a CuPy or NumPy array, no copy."""
    import torch

    if array.dtype == bfloat16:
        return torch.from_dlpack(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(array)


_streams: dict[tuple[int, int], object] = {}
_streams_lock = threading.Lock()


_raw_stream = None   # torch's current stream pointer of a device (found on the first call)


def torch_stream_pointer():
    """A function of a device index giving torch's current stream pointer there."""
    global _raw_stream
    if _raw_stream is None:
        import torch

        # the pointer without a Stream object, where torch has the function
        _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
            lambda index: torch.cuda.current_stream(index).cuda_stream)
    return _raw_stream


def torch_stream(device_index: int):
    """CuPy's handle on torch's current stream of a device (kept per stream)."""
    ptr = (_raw_stream or torch_stream_pointer())(device_index)
    stream = _streams.get((ptr, device_index))
    if stream is None:
        with _streams_lock:
            stream = _streams[(ptr, device_index)] = _cupy_stream(ptr, device_index)
    return stream


class _StreamPointer:
    """A raw stream pointer in the CUDA stream protocol (what Stream.from_external takes)."""

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


def _cupy_stream(ptr: int, device_index: int):
    """A CuPy stream over a torch stream's pointer (CuPy 14 deprecates ExternalStream for
    Stream.from_external; the legacy default stream, pointer 0, is CuPy's null stream)."""
    import cupy

    if ptr == 0:
        return cupy.cuda.Stream.null
    if not hasattr(cupy.cuda.Stream, "from_external"):
        return cupy.cuda.ExternalStream(ptr, device_index)
    with cupy.cuda.Device(device_index):
        return cupy.cuda.Stream.from_external(_StreamPointer(ptr))


def torch_io(fn=None, *, make_out=None, device: bool = False):
    """Let `fn` take torch tensors (positional or keyword) and give torch tensors back.
    make_out(*args, **kwargs), if given, allocates the torch tensor a call without `out=`
    writes into (cheaper than handing a result back over DLPack), or returns None.
    device: `fn` takes device arrays only, so a torch CPU tensor reaches it as it is (its
    own checks name the argument: operands.check_device_array), not as a NumPy view."""
    if fn is None:
        return functools.partial(torch_io, make_out=make_out, device=device)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not any(map(is_torch, args)) and not any(map(is_torch, kwargs.values())):
            return fn(*args, **kwargs)
        if make_out is not None and kwargs.get("out") is None:
            out = make_out(*args, **kwargs)
            if out is not None:
                kwargs = dict(kwargs, out=out)
        return _call_with_torch(fn, args, kwargs, device)
    return wrapper


def _call_with_torch(fn, args, kwargs, device: bool = False):
    tensors = [a for a in (*args, *kwargs.values()) if is_torch(a) and (not device or getattr(a, "is_cuda", False))]
    cuda = next((t for t in tensors if t.is_cuda), None)
    converted = {id(t): to_array(t) for t in tensors}
    args = tuple(converted.get(id(a), a) if is_torch(a) else a for a in args)
    kwargs = {k: converted.get(id(v), v) if is_torch(v) else v for k, v in kwargs.items()}
    if cuda is None:
        result = fn(*args, **kwargs)
    else:
        import cupy

        index = cuda.device.index
        # on torch's stream, and what the call allocates comes from torch's allocator
        if cupy.cuda.runtime.getDevice() == index:
            with torch_stream(index), torch_memory.using(index):
                result = fn(*args, **kwargs)
        else:
            with cupy.cuda.Device(index), torch_stream(index), torch_memory.using(index):
                result = fn(*args, **kwargs)
    for tensor in tensors:   # the caller's own tensor (out=), not a new view of it
        if converted[id(tensor)] is result:
            return tensor
    if isinstance(result, np.ndarray) or type(result).__module__.startswith("cupy"):
        return to_tensor(result)
    return result
