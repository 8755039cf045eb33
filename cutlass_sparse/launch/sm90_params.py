"""Host copies of sm90 Params, so a call with new pointers (or a new N) launches no setup.

A kernel's Params depend on the operands' addresses through one 8-byte word each: the
pointer itself, or the first word of a TMA descriptor, where the driver keeps the plain
global address (scripts/device/probe_params.py, docs/probe_params_h100.log). Those words
are found once per kernel and device (pointer_map, from setups with moved pointers, at
the kernel's first setup, which synchronizes anyway). After that:

- the first Params the setup entry builds for a shape are copied back to pinned host
  memory without waiting (request); once the copy has landed, a call of that shape with
  other pointers patches the copy and sends it with one host-to-device copy from
  pageable memory, which the driver stages at once (no synchronization, no kernel);
- a serving loop's new N finds Params that were built ahead: the first new N of a range
  has the device build every N of the range at once (Sm90Plan.build_ahead).

Under CUDA-graph capture the setup entry is used instead (a copy from host memory would
be replayed from a buffer that has changed since).
"""
from __future__ import annotations

import ctypes
import struct
import threading
from collections import OrderedDict

import numpy as np

# The pointer vector: a, e, b, c, d as the setup block has them, then a scaled kernel's
# row and column scale pointers.
POINTERS = 7
_DELTAS = (16, 1 << 20)
_SPACING = 4 << 20        # between the stand-in pointers of the mapping setups
_WORD = struct.Struct("<Q")
MAX_TEMPLATES = 16384    # about 1.5 KB each; the oldest go first

# (kernel key, device) -> offsets of each pointer's word in Params (None: not in Params),
# or None where some pointer is not one plain word (then no host Params for that kernel).
pointer_maps: dict[tuple[str, int], tuple[int | None, ...] | None] = {}
failures: dict[int, str] = {}   # the last reason a map could not be made (for tests and probes)
_templates: OrderedDict[tuple, "Template"] = OrderedDict()
_lock = threading.Lock()


ROUNDS = 3   # each mapping setup runs this many times, in a different order each round


def find_pointer_map(run_setup, count: int, base: int) -> tuple[int | None, ...] | None:
    """Where each of `count` pointers sits in Params. run_setup(pointers) -> Params as
    bytes (synchronizes); base: a device address with count * 4 MiB free after it.

    The setup copies Params whole, padding included, and padding holds what the stack
    held before: it depends on the kernels that ran earlier in the process (a kernel
    mapped alone on the H100 was refused in the full test suite). So every configuration
    (the base pointers, and each pointer moved by each delta) runs ROUNDS times, in a
    different order each round; a word that differs among one configuration's runs is
    such a leftover and left out. A word that changes the same way every time is the
    pointer's own, or a second use of it: then there is no map (the kernel keeps its
    setup launch)."""
    pointers = tuple(base + _SPACING * i for i in range(count))
    configs = [(None, 0)] + [(i, delta) for i in range(count) for delta in _DELTAS]
    runs: dict[tuple, list] = {config: [] for config in configs}
    orders = (configs, configs[::-1], configs[1::2] + configs[0::2])
    for round_ in range(ROUNDS):
        for i, delta in orders[round_ % len(orders)]:
            moved = tuple(p + delta * (j == i) for j, p in enumerate(pointers))
            runs[(i, delta)].append(np.frombuffer(run_setup(moved), dtype=np.uint64))
    noisy = np.zeros(len(runs[(None, 0)][0]), dtype=bool)
    for seen in runs.values():
        for other in seen[1:]:
            noisy |= other != seen[0]
    reference = runs[(None, 0)][0]
    offsets: list[int | None] = []
    for i in range(count):
        found = set()
        for delta in _DELTAS:
            moved = runs[(i, delta)][0]
            changed = np.nonzero((moved != reference) & ~noisy)[0]
            if len(changed) > 1 or (len(changed) == 1 and int(moved[changed[0]]) - int(reference[changed[0]]) != delta):
                failures[count] = f"pointer {i} moved by {delta:#x} changed words {[8 * int(w) for w in changed]}"
                return None
            found.add(int(changed[0]) * 8 if len(changed) else None)
        if len(found) != 1:
            failures[count] = f"pointer {i} was found in different words for different moves: {sorted(map(str, found))}"
            return None
        offsets.append(found.pop())
    placed = [o for o in offsets if o is not None]
    return tuple(offsets) if len(placed) == len(set(placed)) else None


class Template:
    """Params built on the device for one shape, on their way to pinned host memory."""

    def __init__(self, params, stream):
        import cupy

        self.nbytes = params.nbytes
        self._host = cupy.cuda.alloc_pinned_memory(self.nbytes)
        runtime = cupy.cuda.runtime
        stream_ptr = (stream or cupy.cuda.get_current_stream()).ptr
        runtime.memcpyAsync(self._host.ptr, params.data.ptr, self.nbytes, runtime.memcpyDeviceToHost, stream_ptr)
        self._event = cupy.cuda.Event(disable_timing=True)
        self._event.record(stream)
        self.bytes = None

    def arrived(self) -> bytes | None:
        """The Params once the copy has landed (never waits), else None."""
        if self.bytes is None:
            host, event = self._host, self._event   # another thread may clear them meanwhile
            if event is not None and event.done:
                self.bytes = ctypes.string_at(host.ptr, self.nbytes)
                self._host = self._event = None
        return self.bytes


def template(key: tuple) -> Template | None:
    return _templates.get(key)


def request(key: tuple, params, stream) -> None:
    """Bring the Params just built for `key` to the host, unless they are on their way (or
    the stream is capturing a graph: the copy and its event would be captured too)."""
    if key in _templates:
        return
    import cupy

    if capturing((stream or cupy.cuda.get_current_stream()).ptr):
        return
    made = Template(params, stream)
    with _lock:
        _templates.setdefault(key, made)
        while len(_templates) > MAX_TEMPLATES:
            _templates.popitem(last=False)


class HostParams:
    """A kernel's Params for one shape on the host, ready to be patched and sent: one
    buffer, written in place (a pageable copy is staged by the driver before the call
    returns, so the buffer is free again at once), under a lock (plans are shared between
    threads)."""

    def __init__(self, params_bytes: bytes, offsets: tuple[int | None, ...]):
        self._block = bytearray(params_bytes)
        self._address = ctypes.addressof((ctypes.c_char * len(self._block)).from_buffer(self._block))
        self._words = [(offset, i) for i, offset in enumerate(offsets) if offset is not None]
        self._lock = threading.Lock()

    def send(self, pointers: tuple[int, ...], device_ptr: int, stream_ptr: int) -> None:
        """Params with these pointers, copied to device_ptr on the stream."""
        import cupy

        runtime = cupy.cuda.runtime
        block = self._block
        with self._lock:
            for offset, i in self._words:
                _WORD.pack_into(block, offset, pointers[i])
            runtime.memcpyAsync(device_ptr, self._address, len(block), runtime.memcpyHostToDevice, stream_ptr)


def map_pointers(plan, templates, scaled: bool) -> tuple[int | None, ...] | None:
    """find_pointer_map for an Sm90Plan's kernel, with its setup entry (synchronizes; once
    per kernel and device)."""
    import cupy

    count = POINTERS if scaled else 5
    compiled, device_id = plan.compiled, plan.problem.device_id

    def run_setup(pointers):
        params = cupy.zeros(compiled.constants["params_bytes"], dtype=cupy.uint8)
        block = plan._setup_arguments(pointers[:5], params.data.ptr, templates.data.ptr,
                                      scales=pointers[5:] if scaled else (0, 0))
        plan.loaded.launch(device_id, (1, 1, 1), (block,), symbol=f"{compiled.symbol}_setup", threads=1,
                           shared_bytes=0)
        return params.get().tobytes()

    scratch = cupy.empty(256, dtype=cupy.uint8)   # stand-in addresses: the setup never reads them
    return find_pointer_map(run_setup, count, scratch.data.ptr)


def build_ahead(plan, problems) -> dict:
    """Have the device build Params for `problems` (plan's problem with other N, so the same
    kernel) on a side stream and bring them to the host: their first calls then launch no
    setup. Stand-in pointers: the real ones are patched in. Returns {N: plan} of the
    direct plans made for them (where the kernel's pointers are mapped; else nothing)."""
    import cupy

    if not pointer_maps.get((plan.compiled.key, plan.problem.device_id)):
        return {}
    made = {}
    with cupy.cuda.Device(plan.problem.device_id):
        stream = _side_stream(plan.problem.device_id)
        with stream:
            scratch = cupy.empty(256, dtype=cupy.uint8)
            stand_in = (scratch.data.ptr,) * 5
            for problem in problems:
                other = type(plan)(problem, kernel=plan.kernel)
                if not other.direct:
                    continue
                key = other._host_key(stand_in, (0, 0))
                if template(key) is None:
                    other._build(stand_in, None, stream)
                other.expect_host_params(stand_in, (0, 0), template(key))
                made[problem.n] = other
    return made


_side_streams: dict[int, object] = {}


def _side_stream(device_id: int):
    """A non-blocking stream per device for work no call waits on (build_ahead)."""
    stream = _side_streams.get(device_id)
    if stream is None:
        import cupy

        stream = _side_streams.setdefault(device_id, cupy.cuda.Stream(non_blocking=True))
    return stream


def capturing(stream_ptr: int) -> bool:
    """Whether the stream is capturing a CUDA graph."""
    import cupy

    return cupy.cuda.runtime.streamIsCapturing(stream_ptr) != 0
