"""CUDA graphs keep the buffers they read. A buffer a call allocates for itself (a staged
x, a padded D copied out, a C with the bias folded in, Params the setup entry writes, a
split-K workspace) goes back to the memory pool when the call returns. Under stream
capture that is wrong: the graph's nodes still read and write it at every replay, while
later allocations get the same memory. So what a call allocates while its stream captures
is handed to the graph being captured, which keeps it until the graph and every
instantiation of it are destroyed (a CUDA user object: cuUserObjectCreate,
cuGraphRetainUserObject).

The user object's destructor is libc's sem_post on a semaphore of ours, so no Python runs
on the driver's thread (nor after the interpreter has gone); release_finished(), run at
each new hold, drops the buffers of every graph whose semaphore was posted. Outputs a call
returns are the caller's to keep, as with CuPy's own operations (the caller reads the
replays' results from them); they are held too where they come from the pool inside a
held call, which costs nothing."""
from __future__ import annotations

import ctypes
import threading

from . import torch_memory

_SEM_BYTES = 64   # glibc's sem_t is 32 bytes on x86-64 and aarch64; room to spare


class _Libc:
    """The libc functions a hold uses, bound once."""

    def __init__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        self.malloc, self.free = libc.malloc, libc.free
        self.malloc.restype, self.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        self.free.argtypes = [ctypes.c_void_p]
        self.sem_init, self.sem_trywait = libc.sem_init, libc.sem_trywait
        self.sem_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint]
        self.sem_trywait.argtypes = [ctypes.c_void_p]
        self.sem_post_address = ctypes.cast(libc.sem_post, ctypes.c_void_p).value
        self.sem_post = libc.sem_post
        self.sem_post.argtypes = [ctypes.c_void_p]


_libc: _Libc | None = None
_held: list[tuple[int, object]] = []   # (semaphore address, what a graph keeps)
_lock = threading.Lock()


def capturing(stream_ptr: int) -> bool:
    """Whether the stream is capturing a CUDA graph."""
    import cupy

    return cupy.cuda.runtime.streamIsCapturing(stream_ptr) != 0


def empty(nbytes: int, stream):
    """nbytes of device memory (a CuPy uint8 array) for work on `stream` (a CuPy stream):
    from CuPy's pool, or from torch's allocator where torch is capturing a graph on its
    current stream (torch captures in a mode that forbids cudaMalloc, and its allocator
    serves a capture from the graph's own pool)."""
    import cupy

    if capturing(stream.ptr):
        return _for_capture(nbytes, stream)
    with stream:
        return cupy.empty(nbytes, dtype=cupy.uint8)


def held_empty(nbytes: int, stream):
    """empty() for a stream known to be capturing, kept by the graph it captures."""
    buffer = _for_capture(nbytes, stream)
    _attach(stream.ptr, (buffer,))
    return buffer


def _for_capture(nbytes: int, stream):
    """empty() under capture: torch's allocator where torch captures, else CuPy's pool."""
    import cupy

    allocate = torch_memory.capture_allocator()
    if allocate is not None:
        return cupy.ndarray(nbytes, dtype=cupy.uint8, memptr=allocate(nbytes))
    with stream:
        return cupy.empty(nbytes, dtype=cupy.uint8)


def hold(stream_ptr: int, *objects) -> bool:
    """If the stream is capturing a graph, that graph keeps `objects` alive until it and its
    instantiations are destroyed; returns whether it does. None entries are skipped."""
    objects = tuple(o for o in objects if o is not None)
    if not objects or not capturing(stream_ptr):
        return False
    _attach(stream_ptr, objects)
    return True


def _attach(stream_ptr: int, objects: tuple) -> None:
    """Hand objects to the graph the stream is capturing (see hold)."""
    from cuda.bindings import driver

    release_finished()
    status, _, graph, *_ = _checked(driver.cuStreamGetCaptureInfo(driver.CUstream(stream_ptr)))
    semaphore = new_semaphore()
    try:
        (user_object,) = _checked(driver.cuUserObjectCreate(
            semaphore, driver.CUhostFn(_libc.sem_post_address), 1,
            driver.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC))
    except Exception:
        _libc.free(semaphore)
        raise
    # the graph takes our one reference: destroying the graph (and its execs) posts
    _checked(driver.cuGraphRetainUserObject(graph, user_object, 1,
                                            driver.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE))
    keep(semaphore, objects)


def new_semaphore() -> int:
    """A fresh semaphore (count 0) in memory of libc's that Python never frees behind the
    driver's back: it is freed only after its post was seen."""
    global _libc
    if _libc is None:
        _libc = _Libc()
    semaphore = _libc.malloc(_SEM_BYTES)
    if not semaphore or _libc.sem_init(semaphore, 0, 0) != 0:
        raise MemoryError("no memory for a graph's semaphore")
    return semaphore


def keep(semaphore: int, objects) -> None:
    """Keep `objects` until `semaphore` is posted."""
    with _lock:
        _held.append((semaphore, objects))


def release_finished() -> int:
    """Drop what graphs that were destroyed kept; returns how many holds remain (the ones
    graphs have not released yet)."""
    if not _held:
        return 0
    with _lock:
        alive = []
        for semaphore, objects in _held:
            if _libc.sem_trywait(semaphore) == 0:   # posted: its graph is gone
                _libc.free(semaphore)
            else:
                alive.append((semaphore, objects))
        _held[:] = alive
        return len(alive)


class Temporaries:
    """`with Temporaries(stream):` CuPy allocations this thread makes inside are kept by the
    graph the stream captures, if it captures one (else nothing changes). For the calls
    whose own allocations feed their launches."""

    __slots__ = ("_stream_ptr", "_made", "_using")

    def __init__(self, stream=None):
        if stream is None:
            import cupy

            stream = cupy.cuda.get_current_stream()
        self._stream_ptr = stream.ptr
        self._made = None

    def __enter__(self):
        if capturing(self._stream_ptr):
            import cupy

            made, base = [], torch_memory.capture_allocator() or cupy.cuda.get_allocator()

            def allocate(nbytes):
                memory = base(nbytes)
                made.append(memory)
                return memory

            self._made = made
            self._using = cupy.cuda.using_allocator(allocate)
            self._using.__enter__()
        return self

    def __exit__(self, *exc):
        if self._made is not None:
            self._using.__exit__(*exc)
            if exc[0] is None:
                hold(self._stream_ptr, *self._made)
        return False


def _checked(result: tuple) -> tuple:
    """A cuda-bindings result without its leading CUresult, raising on an error."""
    from cuda.bindings import driver

    error, *values = result
    if error != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver error {error!r} while handing buffers to a captured graph")
    return tuple(values)
