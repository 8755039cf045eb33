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

from . import kernels, runtime, tma
from .description import CompressorConfig, SparseGemmConfig
from .selection import round_up
from .emit_sm90 import INFO_FIELDS, SETUP, COMPRESS

LAYOUT = "sm90"


def _arch(device_id: int) -> str:
    import cupy

    cc = cupy.cuda.Device(device_id).compute_capability
    if cc != "90":
        raise ValueError(f"the sm90 kernel family needs a compute capability 9.0 GPU; device {device_id} "
                         f"is sm_{cc}: use family='sm80' (compress(..., layout='sm80'))")
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


@functools.lru_cache(maxsize=64)
def _sm_count(device_id: int) -> int:
    import cupy

    return cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]


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
    if info["workspace_bytes"]:
        raise RuntimeError(f"{compiled.symbol} needs {info['workspace_bytes']} workspace bytes; none is provided")
    if not 0 < info["tma_slots"] <= 16:
        raise RuntimeError(f"{compiled.symbol}: setup found {info['tma_slots']} TMA descriptor slots")
    templates = cupy.asarray(tma.templates(recipes.get().tobytes(), info["tma_slots"]))
    return templates, (info["grid_x"], info["grid_y"], info["grid_z"])


def matmul(sw, x, d, c_full, alpha: float, beta: float, config: SparseGemmConfig, ldb: int,
           ldc: int, ldd: int, info: dict | None):
    """Launch (setup and) GEMM on the current stream. Operands are validated by the caller."""
    device_id = x.device.id
    arch = _arch(device_id)
    m, k = sw.shape
    n = x.shape[1]
    compiled = kernels.get(config, arch)
    loaded = runtime.load(compiled)
    signature = (compiled.key, device_id, sw.values.data.ptr, sw.metadata.data.ptr, x.data.ptr,
                 c_full.data.ptr, d.data.ptr, ldb, ldc, ldd, m, n, k, float(alpha), float(beta))
    with _params_lock:
        cached = _params_cache.get(signature)
        if cached is not None:
            _params_cache.move_to_end(signature)
    if cached is None:
        cached = _build_params(loaded, compiled, device_id, signature[2:7], ldb, ldc, ldd, m, n, k, alpha, beta,
                               config.swizzle)
        with _params_lock:
            _params_cache[signature] = cached
            while len(_params_cache) > _PARAMS_CACHE_SIZE:
                _params_cache.popitem(last=False)
    params, grid = cached
    loaded.launch(device_id, grid, (params,))
    if info is not None:
        info.update(config=config.name, arch=arch, from_cache=compiled.from_cache,
                    compile_seconds=compiled.compile_seconds, grid=grid, k_padded=False)


def _build_params(loaded, compiled, device_id, pointers, ldb, ldc, ldd, m, n, k, alpha, beta, swizzle):
    """Queue the setup entry that writes Params (with encoded TMA descriptors) into a new buffer."""
    import cupy

    params = cupy.empty(compiled.constants["params_bytes"], dtype=cupy.uint8)
    info_out = cupy.zeros(len(INFO_FIELDS), dtype=cupy.int64)
    block = SETUP.new_block()
    f = block[0]
    f["a"], f["e"], f["b"], f["c"], f["d"] = pointers
    f["params_out"], f["info_out"] = params.data.ptr, info_out.data.ptr
    f["ldb"], f["ldc"], f["ldd"] = ldb, ldc, ldd
    f["m"], f["n"], f["k"] = m, n, k
    f["sm_count"] = _sm_count(device_id)
    f["swizzle"], f["raster"] = swizzle, 0
    f["alpha"], f["beta"] = alpha, beta
    setup = f"{compiled.symbol}_setup"
    shape_key = (compiled.key, device_id, m, n, k, ldb, ldc, ldd)
    prepared = _prepared.get(shape_key)
    if prepared is None:
        with _prepared_lock:
            prepared = _prepared.get(shape_key)
            if prepared is None:
                prepared = _prepared[shape_key] = _prepare(loaded, compiled, device_id, block, info_out, setup)
    templates, grid = prepared
    f["templates"] = templates.data.ptr
    loaded.launch(device_id, (1, 1, 1), block, symbol=setup, threads=1, shared_bytes=0)
    return params, grid
