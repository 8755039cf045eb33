"""Host copies of sm90 Params, so a call with new pointers (or a new N) launches no setup.

A kernel's Params depend on the operands' addresses through 8-byte words that hold the
pointer itself, or the first word of a TMA descriptor, where the driver keeps the plain
global address (scripts/device/probe_params.py, docs/probe_params_h100.log); a stream-K
kernel's workspace sits in two (GemmUniversal's own and its scheduler's, equal while the
epilogue asks for no workspace of its own; a word that differs refuses the map). Those words
are found once per kernel and device (pointer_map, from setups with moved pointers, at
the kernel's first setup, which synchronizes anyway). After that:

- the first Params the setup entry builds for a shape are copied back to pinned host
  memory without waiting (request); once the copy has landed, a call of that shape with
  other pointers patches the copy and passes it to the GEMM by value (no synchronization,
  no kernel, no copy; a CUDA graph captures the patched Params with the launch);
- a serving loop's new N finds Params that were built ahead: the first new N of a range
  has the device build every N of the range at once, and one copy brings them all back
  (Sm90Plan.build_ahead).
"""
from __future__ import annotations

import ctypes
import struct
import threading
from collections import OrderedDict

import numpy as np

from .. import events
from . import device, graphs, tma, torch_memory

# The scaled epilogue's run-time vectors, as pointers: row scales, column scales, row bias
# (0: absent; a scale then reads as 1, the bias as 0).
NO_VECTORS = (0, 0, 0)
# The pointer vector: a, e, b, c, d as the setup block has them, then a scaled kernel's
# vectors, then a stream-K kernel's workspace.
POINTERS = 5 + len(NO_VECTORS)
WORKSPACE = POINTERS   # the workspace's index in the vector
_DELTAS = (16, 1 << 20)
_SPACING = 4 << 20        # between the stand-in pointers of the mapping setups
_WORD = struct.Struct("<Q")
MAX_TEMPLATES = 16384    # about 1.5 KB each; the oldest go first
_SLOT = 256              # build_ahead's Params slots: TMA descriptors want 64-byte alignment

# (kernel key, device) -> the byte offsets of each pointer's words in Params (empty: not in
# Params), or None where some pointer is not stored as itself (then no host Params for that
# kernel).
pointer_maps: dict[tuple[str, int], tuple[tuple[int, ...], ...] | None] = {}
failures: dict[int, str] = {}   # the last reason a map could not be made (for tests and probes)
_templates: OrderedDict[tuple, "Template"] = OrderedDict()
_lock = threading.Lock()


ROUNDS = 3   # each mapping setup runs this many times, in a different order each round


def find_pointer_map(run_setup, count: int, base: int) -> tuple[tuple[int, ...], ...] | None:
    """Where each of `count` pointers sits in Params: the byte offsets of its words.
    run_setup(pointers) -> Params as bytes (synchronizes); base: the first stand-in
    address (the setup stores the stand-ins, never dereferences them).

    The setup copies Params whole, padding included, and padding holds what the stack
    held before: it depends on the kernels that ran earlier in the process (a kernel
    mapped alone on the H100 was refused in the full test suite). So every configuration
    (the base pointers, and each pointer moved by each delta) runs ROUNDS times, in a
    different order each round; a word that differs among one configuration's runs is
    such a leftover and left out. A word that changes the same way every time is one of
    the pointer's: it must hold the pointer itself (patching writes the pointer there),
    not an address derived from it; otherwise there is no map (the kernel keeps its
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
    offsets: list[tuple[int, ...]] = []
    for i in range(count):
        found = set()
        for delta in _DELTAS:
            moved = runs[(i, delta)][0]
            changed = [int(w) for w in np.nonzero((moved != reference) & ~noisy)[0]]
            if any(int(moved[w]) - int(reference[w]) != delta or int(reference[w]) != pointers[i] for w in changed):
                failures[count] = (f"pointer {i} moved by {delta:#x} changed words {[8 * w for w in changed]}, "
                                   f"not all of them holding the pointer itself")
                return None
            found.add(tuple(8 * w for w in changed))
        if len(found) != 1:
            failures[count] = f"pointer {i} was found in different words for different moves: {sorted(found)}"
            return None
        offsets.append(found.pop())
    placed = [offset for words in offsets for offset in words]
    return tuple(offsets) if len(placed) == len(set(placed)) else None


class Copy:
    """Params built on the device (one shape's, or a range's in slots of one buffer) on
    their way to pinned host memory: one copy and one event however many shapes."""

    def __init__(self, params, stream):
        import cupy

        self._device = params   # kept until the copy has landed
        self._host = cupy.cuda.alloc_pinned_memory(params.nbytes)
        runtime = cupy.cuda.runtime
        stream_ptr = (stream or cupy.cuda.get_current_stream()).ptr
        runtime.memcpyAsync(self._host.ptr, params.data.ptr, params.nbytes, runtime.memcpyDeviceToHost, stream_ptr)
        self._event = cupy.cuda.Event(disable_timing=True)
        self._event.record(stream)

    def done(self) -> bool:
        """Whether the copy has landed (asked in relaxed capture mode; never waits)."""
        event = self._event
        return event is None or events.done(event)

    def landed(self, stream=None) -> int | None:
        """The host address of the copy once it has landed (never waits), else None; None
        while `stream` (the launching CuPy stream; default the current one) captures a
        graph: an event query there would invalidate the capture (torch captures in global
        mode)."""
        event = self._event   # another thread may clear it meanwhile
        if event is not None:
            import cupy

            if graphs.capturing((stream or cupy.cuda.get_current_stream()).ptr) or not events.done(event):
                return None
            self._event = self._device = None
        return self._host.ptr


class Template:
    """One shape's Params in a Copy (its bytes at offset), once they have arrived."""

    def __init__(self, copy: Copy, offset: int, nbytes: int):
        self._copy, self._offset, self.nbytes = copy, offset, nbytes
        self.bytes = None

    def arrived(self, stream=None) -> bytes | None:
        """The Params once the copy has landed (never waits), else None (see Copy.landed)."""
        if self.bytes is None:
            copy = self._copy   # another thread may clear it meanwhile
            host = None if copy is None else copy.landed(stream)
            if host is not None:
                self.bytes = ctypes.string_at(host + self._offset, self.nbytes)
                self._copy = None   # the last Template of a Copy to arrive frees its pinned memory
        return self.bytes


# Copies whose Template was evicted before they landed: their pinned memory goes back to
# CuPy's pinned pool, which checks no events, only once the DMA into it is done.
_in_flight: list[Copy] = []


def _keep(key: tuple, made: Template) -> None:
    with _lock:
        _templates.setdefault(key, made)
        while len(_templates) > MAX_TEMPLATES:
            copy = _templates.popitem(last=False)[1]._copy
            if copy is not None:
                _in_flight.append(copy)
        _in_flight[:] = [copy for copy in _in_flight if not copy.done()]


def template(key: tuple) -> Template | None:
    return _templates.get(key)


def request(key: tuple, params, stream) -> None:
    """Bring the Params just built for `key` to the host, unless they are on their way (or
    the stream is capturing a graph: the copy and its event would be captured too)."""
    if key in _templates:
        return
    import cupy

    if graphs.capturing((stream or cupy.cuda.get_current_stream()).ptr):
        return
    _keep(key, Template(Copy(params, stream), 0, params.nbytes))


def encoded(params_bytes: bytes, offsets: tuple[tuple[int, ...], ...]) -> bool:
    """Whether every mapped pointer word of these Params holds a pointer, not the mark of a
    TMA recipe the setup left unencoded (before session 36 a setup could lose its nonce to
    another one running at once: emit.nvrtc_headers.RECIPE_HOOK). Params that fail must never
    launch: a TMA load from a recipe is an illegal instruction, which ends the process's CUDA
    context."""
    return all(_WORD.unpack_from(params_bytes, offset)[0] != tma.MAGIC for words in offsets for offset in words)


refused = 0   # host copies discarded as unencoded (for probes: scripts/device/stress_first_calls.py)


def discard(key: tuple) -> None:
    """Forget the host copy kept under `key` (Params that must not launch): the next setup of
    that shape brings a new one."""
    global refused
    with _lock:
        _templates.pop(key, None)
        refused += 1


class HostParams:
    """A kernel's Params for one shape on the host, patched with a call's pointers into a
    record the GEMM entry takes by value (the driver copies kernel arguments at the launch:
    no device buffer, no host-to-device copy, and a graph capture keeps its own copy).

    A record is one buffer: Params, the GEMM's second argument (from_device, null), and
    the kernelParams array of the two arguments' addresses. The bytes as they arrived are
    never written: each record is a copy, patched (threads sharing a plan need no lock)."""

    __slots__ = ("_layout", "_block")

    def __init__(self, params_bytes: bytes, offsets: tuple[tuple[int, ...], ...]):
        self._layout = layout = _layout(len(params_bytes), offsets)
        self._block = params_bytes + layout.pad

    def record(self, pointers: tuple[int, ...]) -> tuple[int, ctypes.Array]:
        """(kernelParams address, the record holding it) for Params with these pointers;
        the record must outlive every launch that uses the address."""
        layout = self._layout
        record = layout.type.from_buffer_copy(self._block)
        for offset, i in layout.words:
            _WORD.pack_into(record, offset, pointers[i])
        address = ctypes.addressof(record)
        _ARGV.pack_into(record, layout.argv_at, address, address + layout.null_at)
        return address + layout.argv_at, record


_ARGV = struct.Struct("<2Q")


class _Layout:
    """What the records of one Params size and pointer map share (every N of a kernel's
    range): worked out once, not at each new N's first call."""

    __slots__ = ("type", "null_at", "argv_at", "pad", "words")

    def __init__(self, size: int, offsets: tuple[tuple[int, ...], ...]):
        self.null_at = -(-size // 8) * 8        # from_device, 8-byte aligned after Params
        self.argv_at = self.null_at + 8
        self.pad = bytes(self.argv_at + _ARGV.size - size)
        self.type = ctypes.c_char * (size + len(self.pad))
        # (offset, pointer index) of each mapped pointer's words
        self.words = tuple((offset, i) for i, words in enumerate(offsets) for offset in words)


_layouts: dict[tuple, _Layout] = {}


def _layout(size: int, offsets: tuple[tuple[int, ...], ...]) -> _Layout:
    found = _layouts.get((size, offsets))
    if found is None:
        found = _layouts[size, offsets] = _Layout(size, offsets)
    return found


def map_pointers(plan, templates, scaled: bool, stream_k: bool = False) -> tuple[tuple[int, ...], ...] | None:
    """find_pointer_map for an Sm90Plan's kernel, with its setup entry (synchronizes; once
    per kernel and device). stream_k: the workspace too, which must then be found in Params
    (a by-value launch whose workspace were not patched in would use the template's)."""
    import cupy

    count = WORKSPACE + 1 if stream_k else POINTERS if scaled else 5
    compiled = plan.compiled

    def run_setup(pointers):
        params = cupy.zeros(compiled.constants["params_bytes"], dtype=cupy.uint8)
        block = plan._setup_arguments(pointers[:5], params.data.ptr, templates.data.ptr,
                                      workspace=pointers[WORKSPACE] if stream_k else 0,
                                      scales=pointers[5:POINTERS] if scaled else NO_VECTORS)
        plan.queue_setup(block)
        return params.get().tobytes()

    scratch = cupy.empty(256, dtype=cupy.uint8)   # stand-in addresses: the setup never reads them
    found = find_pointer_map(run_setup, count, scratch.data.ptr)
    if stream_k and found is not None and not found[WORKSPACE]:
        failures[count] = "the workspace was not found in Params"
        return None
    return found


def build_ahead(plan, problems) -> dict:
    """Have the device build Params for `problems` (plan's problem with other N, so the same
    kernel) on a side stream, into slots of one buffer, and bring them to the host with one
    copy and one event: their first calls then launch no setup and wait for nothing.
    Stand-in pointers: the real ones are patched in. Returns {N: plan} of the direct plans
    made for them (where the kernel's pointers are mapped; else nothing). A kernel that has
    not run here yet (the other kernel of a tail twin's range) has its first setup now,
    which maps its pointers (it synchronizes, once per kernel and device, as its first
    launch would)."""
    import cupy

    device_id = plan.problem.device_id
    with cupy.cuda.Device(device_id):
        if (plan.compiled.key, device_id) not in pointer_maps:
            scratch = cupy.empty(256, dtype=cupy.uint8)
            plan._prepared((scratch.data.ptr,) * 5)
        if not pointer_maps.get((plan.compiled.key, device_id)):
            return {}
        made, wanted = {}, []
        nbytes = plan.compiled.constants["params_bytes"]
        slot = -(-nbytes // _SLOT) * _SLOT
        stream = device.side_stream(device_id)
        # in a torch call, its allocator: blocks taken for the side stream, not torch's
        with stream, torch_memory.for_stream(device_id, stream.ptr):
            scratch = cupy.empty(256, dtype=cupy.uint8)
            stand_in = (scratch.data.ptr,) * 5
            for problem in problems:
                other = type(plan)(problem, *plan.asked, kernel=plan.kernel)
                if not other.direct:
                    continue
                key = other._host_key(stand_in, NO_VECTORS)
                if template(key) is None:
                    wanted.append((other, key))
                else:
                    other.expect_host_params(stand_in, NO_VECTORS, template(key))
                made[problem.n] = other
            if wanted:
                params = cupy.empty(slot * len(wanted), dtype=cupy.uint8)
                for i, (other, _) in enumerate(wanted):
                    other._write_params(stand_in, params.data.ptr + i * slot, None, stream)
                copy = Copy(params, stream)
                for i, (other, key) in enumerate(wanted):
                    _keep(key, Template(copy, i * slot, nbytes))
                    other.expect_host_params(stand_in, NO_VECTORS, template(key))
    return made

