"""The Hopper family at run time: compression with CUTLASS's sm90 compressor, and the
two-launch GEMM (setup builds Params and TMA descriptors on the device, then the kernel).

Launch rules (TMA): every operand's base address 16-byte aligned and its leading
dimension a multiple of 16 bytes; K a multiple of 8. Problems outside them get a clear
error that names family="sm80", whose kernels take any shape.
"""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass

import dataclasses

from . import catalog, dtypes, kernels, operands, runtime, selection, tma
from .description import CompressorConfig, SparseGemmConfig
from .emit_sm90 import COMPRESS, DECOMPOSITIONS, INFO_FIELDS, SETUP
from .selection import cdiv, round_up

LAYOUT = "sm90"
# The tile scheduler's raster order: 0 lets CUTLASS choose (its heuristic), 1 along M,
# 2 along N. A run-time argument of the setup entry; scripts/device/sweep_large.py varies it.
RASTER = 0


def _arch(device_id: int) -> str:
    arch = operands.device_facts(device_id)[0]
    if arch != "sm_90":
        raise ValueError(f"the sm90 kernel family needs a compute capability 9.0 GPU; device {device_id} "
                         f"is {arch}: use family='sm80' (compress(..., layout='sm80'))")
    return "sm_90a"


# -- compression ---------------------------------------------------------------------

def compress(dense, element: str):
    """values and metadata of a 2:4 [M, K] cupy matrix in CUTLASS's sm90 layout."""
    import cupy

    m, k = dense.shape
    if k % 16:
        raise ValueError(f"dense has K = {k}: the sm90 layout needs K a multiple of 16 "
                         f"(pad K, or use layout='sm80', which takes any K)")
    device_id = dense.device.id
    compiled = kernels.get(CompressorConfig(element), _arch(device_id))
    c = compiled.constants
    # The compressor works in whole atoms (max_align_m rows by max_align_k columns); the
    # buffers are sized to whole atoms so that none of its writes can leave them.
    m_atoms, k_atoms = round_up(m, c["max_align_m"]), round_up(k, c["max_align_k"])
    values = cupy.zeros(m_atoms * (k_atoms // c["a_sparsity"]), dtype=dense.dtype)
    metadata = cupy.zeros(m_atoms * (k_atoms // c["e_sparsity"]), dtype=cupy.uint8)
    dense = cupy.ascontiguousarray(dense)
    block = COMPRESS.new_block()
    f = block[0]
    f["dense"], f["values"], f["metadata"] = dense.data.ptr, values.data.ptr, metadata.data.ptr
    f["ld_dense"], f["m"], f["k"] = k, m, k
    grid = (-(-round_up(m, c["max_align_m"]) // c["atom_m"]), -(-round_up(k, c["max_align_k"]) // c["atom_k"]), 1)
    with cupy.cuda.Device(device_id):
        runtime.load(compiled).launch(device_id, grid, block)
    return values, metadata


# -- GEMM ------------------------------------------------------------------------------

# Per (kernel, device, sizes, strides): TMA descriptor templates and the grid. CuTe may
# fold a compact tensor's modes into a different TMA rank or box, so templates are made
# for each sizes-and-strides signature: one synchronizing setup when one is first seen.
_prepared: dict[tuple, tuple] = {}
_prepared_lock = threading.Lock()

# Params depend only on pointers, strides, sizes and scalars, never on data: a call that
# repeats all of them (a plan, a benchmark, a weight applied to the same buffers) reuses
# the Params built last time and launches the GEMM alone.
_PARAMS_CACHE_SIZE = 64
_params_cache: "OrderedDict[tuple, object]" = OrderedDict()
_params_lock = threading.Lock()


def _prepare(loaded, compiled, device_id, block, info_out, setup):
    """First sight of a problem signature: run the setup leaving CuTe's TMA recipes, check
    what CUTLASS reports, and encode the recipes into descriptor templates."""
    import cupy

    recipes = cupy.zeros(16 * 128, dtype=cupy.uint8)
    first = block.copy()
    first[0]["recipes_out"] = recipes.data.ptr
    first[0]["templates"] = 0
    loaded.launch(device_id, (1, 1, 1), first, symbol=setup, threads=1, shared_bytes=0)
    info = dict(zip(INFO_FIELDS, (int(v) for v in info_out.get())))   # synchronizes
    f = first[0]
    problem = f"{int(f['m'])}x{int(f['n'])}x{int(f['k'])}"
    if not info["can_implement"]:
        raise ValueError(f"CUTLASS cannot implement {problem} with {compiled.symbol}: use family='sm80'")
    if not 0 < info["tma_slots"] <= 16:
        raise RuntimeError(f"{compiled.symbol}: setup found {info['tma_slots']} TMA descriptor slots")
    templates = cupy.asarray(tma.templates(recipes.get().tobytes(), info["tma_slots"]))
    return Prepared(templates, (info["grid_x"], info["grid_y"], info["grid_z"]), info["workspace_bytes"],
                    info["barrier_offset"], info["barrier_bytes"])


@dataclass(frozen=True)
class Prepared:
    """What one problem signature needs besides pointers: descriptor templates, the grid, and
    the workspace (bytes, and the barrier region that is zeroed before every launch)."""

    templates: object
    grid: tuple[int, int, int]
    workspace_bytes: int
    barrier_offset: int
    barrier_bytes: int


@dataclass(frozen=True)
class Scheduling:
    """How the stream-K scheduler divides K: DECOMPOSITIONS key and K slices (split-K)."""

    decomposition: str = "data_parallel"
    splits: int = 1

    @classmethod
    def split_k(cls, splits: int) -> "Scheduling":
        return cls("split_k", splits) if splits > 1 else cls()


@dataclass
class _Ready:
    """A built launch: Params in device memory, its grid, and the workspace it points into."""

    params: object
    grid: tuple[int, int, int]
    workspace: object
    barrier: tuple[int, int]      # (byte offset, bytes) to zero before each launch


def matmul(sw, x, d, c_full, alpha: float, beta: float, config: SparseGemmConfig, ldb: int,
           ldc: int, ldd: int, info: dict | None, scheduling: Scheduling = Scheduling(), workspace=None,
           activation_arg: float = 0.0, record: dict | None = None):
    """Launch (setup and) GEMM on the current stream. Operands are validated by the caller."""
    device_id = x.device.id
    arch = _arch(device_id)
    m, k = sw.shape
    n = x.shape[1]
    if scheduling != Scheduling() and config.tile_scheduler != "streamk":
        raise ValueError(f"{scheduling.decomposition} with {scheduling.splits} splits needs a stream-K kernel; "
                         f"{config.name} has the persistent scheduler")
    compiled = kernels.get(config, arch)
    loaded = runtime.load(compiled)

    def ready_for(b_ptr: int, c_ptr: int, d_ptr: int) -> _Ready:
        pointers = (sw.values.data.ptr, sw.metadata.data.ptr, b_ptr, c_ptr, d_ptr)
        return _ready(loaded, compiled, device_id, pointers, ldb, ldc, ldd, m, n, k, alpha, beta, config.swizzle,
                      scheduling, workspace, activation_arg)

    ready = ready_for(x.data.ptr, c_full.data.ptr, d.data.ptr)
    launch(loaded, device_id, ready)
    if info is not None:
        info.update(config=config.name, arch=arch, from_cache=compiled.from_cache,
                    compile_seconds=compiled.compile_seconds, grid=ready.grid, k_padded=False,
                    decomposition=scheduling.decomposition, split_k=scheduling.splits,
                    workspace_bytes=0 if ready.workspace is None else ready.workspace.nbytes)
    if record is not None:   # what a Plan needs to repeat this launch with new pointers
        record.update(direct=True, loaded=loaded, ready_for=ready_for, ldb=ldb, ldc=ldc, ldd=ldd,
                      alignment_b=8, alignment_c=16 // d.dtype.itemsize)


def _ready(loaded, compiled, device_id, pointers, ldb, ldc, ldd, m, n, k, alpha, beta, swizzle, scheduling,
           workspace, activation_arg) -> _Ready:
    """The built launch for these pointers and scalars: from the cache, else built now."""
    workspace_ptr = 0 if workspace is None else workspace.data.ptr
    signature = (compiled.key, device_id, *pointers, ldb, ldc, ldd, m, n, k, float(alpha), float(beta),
                 scheduling, workspace_ptr, float(activation_arg), swizzle)
    with _params_lock:
        ready = _params_cache.get(signature)
        if ready is not None:
            _params_cache.move_to_end(signature)
    if ready is None:
        ready = _build_params(loaded, compiled, device_id, pointers, ldb, ldc, ldd, m, n, k, alpha, beta,
                              swizzle, scheduling, workspace, activation_arg)
        with _params_lock:
            _params_cache[signature] = ready
            while len(_params_cache) > _PARAMS_CACHE_SIZE:
                _params_cache.popitem(last=False)
    return ready


def launch(loaded, device_id: int, ready: _Ready) -> None:
    """The GEMM on the current stream (after zeroing its stream-K barriers, if any)."""
    import cupy

    offset, nbytes = ready.barrier
    if nbytes:
        # The reduction's turnstiles count up during a launch; each launch starts from zero.
        cupy.cuda.runtime.memsetAsync(ready.workspace.data.ptr + offset, 0, nbytes,
                                      cupy.cuda.get_current_stream().ptr)
    loaded.launch(device_id, ready.grid, (ready.params,))


def workspace_size(config: SparseGemmConfig, device_id: int, m: int, n: int, k: int,
                   scheduling: Scheduling = Scheduling()) -> int:
    """Bytes of workspace this kernel needs for an M x N x K problem (0 for most)."""
    if config.tile_scheduler != "streamk":
        return 0
    import cupy

    compiled = kernels.get(config, _arch(device_id))
    loaded = runtime.load(compiled)
    with cupy.cuda.Device(device_id):
        # Sizes depend on shape and scheduling only; dummy aligned addresses stand in for operands.
        scratch = cupy.empty(256, dtype=cupy.uint8)
        p = scratch.data.ptr
        prepared = _prepared_for(loaded, compiled, device_id, (p, p, p, p, p), n, n, n, m, n, k, 1.0, 0.0,
                                 config.swizzle, scheduling)
    return prepared.workspace_bytes


def _setup_block(compiled, device_id, pointers, ldb, ldc, ldd, m, n, k, alpha, beta, swizzle, scheduling,
                 activation_arg=0.0):
    block = SETUP.new_block()
    f = block[0]
    f["a"], f["e"], f["b"], f["c"], f["d"] = pointers
    f["ldb"], f["ldc"], f["ldd"] = ldb, ldc, ldd
    f["m"], f["n"], f["k"] = m, n, k
    f["sm_count"] = operands.device_facts(device_id)[1]
    f["swizzle"], f["raster"] = swizzle, RASTER
    f["splits"], f["decomposition"] = scheduling.splits, DECOMPOSITIONS[scheduling.decomposition]
    f["alpha"], f["beta"], f["activation_arg"] = alpha, beta, activation_arg
    return block


def _prepared_for(loaded, compiled, device_id, pointers, ldb, ldc, ldd, m, n, k, alpha, beta, swizzle,
                  scheduling) -> Prepared:
    import cupy

    shape_key = (compiled.key, device_id, m, n, k, ldb, ldc, ldd, scheduling, swizzle)   # swizzle: the grid
    prepared = _prepared.get(shape_key)
    if prepared is None:
        with _prepared_lock:
            prepared = _prepared.get(shape_key)
            if prepared is None:
                block = _setup_block(compiled, device_id, pointers, ldb, ldc, ldd, m, n, k, alpha, beta, swizzle,
                                     scheduling)
                params = cupy.empty(compiled.constants["params_bytes"], dtype=cupy.uint8)
                info_out = cupy.zeros(len(INFO_FIELDS), dtype=cupy.int64)
                block[0]["params_out"], block[0]["info_out"] = params.data.ptr, info_out.data.ptr
                prepared = _prepared[shape_key] = _prepare(loaded, compiled, device_id, block, info_out,
                                                           f"{compiled.symbol}_setup")
    return prepared


def _build_params(loaded, compiled, device_id, pointers, ldb, ldc, ldd, m, n, k, alpha, beta, swizzle,
                  scheduling, workspace, activation_arg) -> _Ready:
    """Queue the setup entry that writes Params (with encoded TMA descriptors) into a new buffer."""
    import cupy

    prepared = _prepared_for(loaded, compiled, device_id, pointers, ldb, ldc, ldd, m, n, k, alpha, beta,
                             swizzle, scheduling)
    if prepared.workspace_bytes:
        if workspace is None:
            workspace = cupy.empty(prepared.workspace_bytes, dtype=cupy.uint8)
        elif workspace.nbytes < prepared.workspace_bytes or workspace.data.ptr % 128:
            raise ValueError(f"workspace holds {workspace.nbytes} bytes at {workspace.data.ptr:#x}; this call needs "
                             f"{prepared.workspace_bytes} bytes, 128-byte aligned (cs.workspace_size)")
    else:
        workspace = None
    params = cupy.empty(compiled.constants["params_bytes"], dtype=cupy.uint8)
    block = _setup_block(compiled, device_id, pointers, ldb, ldc, ldd, m, n, k, alpha, beta, swizzle, scheduling,
                         activation_arg)
    f = block[0]
    f["params_out"], f["info_out"] = params.data.ptr, 0
    f["templates"] = prepared.templates.data.ptr
    f["workspace"] = 0 if workspace is None else workspace.data.ptr
    loaded.launch(device_id, (1, 1, 1), block, symbol=f"{compiled.symbol}_setup", threads=1, shared_bytes=0)
    return _Ready(params, prepared.grid, workspace, (prepared.barrier_offset, prepared.barrier_bytes))


def run(sw, x, layout_b, ldb, out, c, alpha, beta, element, element_out, config, info, split_k,
        workspace, activation, leaky_slope, choice=None, record=None):
    """cs.matmul's sm90 path, operands checked: TMA's rules, the kernel, the launch."""
    import cupy

    m, k = sw.shape
    n = x.shape[1]
    np_out = dtypes.numpy_dtype(element_out)
    with cupy.cuda.Device(x.device.id):
        d = out if out is not None else cupy.empty((m, n), dtype=np_out)
        c_full = c if beta != 0.0 else d
        ldd, ldc = operands.row_stride(d, n), operands.row_stride(c_full, n)
        # TMA: 16-byte aligned bases and leading dimensions.
        for what, array, ld in (("x", x, ldb), ("out", d, ldd), ("c", c_full, ldc)):
            item = array.dtype.itemsize
            if array.data.ptr % 16 or (ld * item) % 16:
                raise ValueError(
                    f"{what} (leading dimension {ld}, address {array.data.ptr:#x}) breaks the sm90 kernels' "
                    f"TMA rule: 16-byte aligned address and leading dimension a multiple of {16 // item} "
                    f"elements; pad it, or use family='sm80' (sw.to_layout('sm80')), which takes any shape")
        config, scheduling = resolve(m, n, k, x.device.id, element, element_out, layout_b, config, split_k,
                                     activation, choice)
        matmul(sw, x, d, c_full, alpha, beta, config, ldb, ldc, ldd, info, scheduling, workspace, leaky_slope,
               record)
        return d


@functools.lru_cache(maxsize=4096)
def resolve(m, n, k, device_id, element, element_out, layout_b, config, split_k, activation="identity",
            choice=None):
    """The sm90 kernel and K decomposition for a problem (the caller's config, the
    profiler's choice, or the catalog's). Memoized: building and checking a configuration
    takes tens of microseconds, a call's whole budget."""
    alignment_c = 16 // dtypes.numpy_dtype(element_out).itemsize
    if config is None and choice is not None:
        splits = split_k or 1
        config = catalog.load("sm90").config(choice.tile, element, element_out, layout_b, 8, alignment_c)
        if choice.swizzle:   # the tile scheduler's swizzle: a run-time argument, same binary
            config = dataclasses.replace(config, swizzle=choice.swizzle)
    elif config is None:
        sm_count = operands.device_facts(device_id)[1]
        tile, splits = selection.choose_sm90(m, n, k, sm_count, split_k, element, element_out)
        config = catalog.load("sm90").config(tile, element, element_out, layout_b, 8, alignment_c)
        config = dataclasses.replace(config, swizzle=selection.sm90_swizzle(tile[0], m, n, sm_count, config.swizzle))
    else:
        operands.check_config_fits(config, element, element_out, layout_b, 8, alignment_c)
        splits = split_k or 1
    config = dataclasses.replace(config, activation=activation)
    if splits > 1 and config.tile_scheduler != "streamk":
        raise ValueError(f"split_k={splits} needs an sm90 stream-K kernel; {config.name} is not one")
    if splits > cdiv(k, config.threadblock[2]):
        raise ValueError(f"split_k={splits} exceeds the {cdiv(k, config.threadblock[2])} K tiles of "
                         f"K = {k} with {config.name}")
    return config, Scheduling.split_k(splits)
