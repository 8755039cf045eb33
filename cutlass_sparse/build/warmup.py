"""Compile many kernels into the cache ahead of time: in parallel worker processes,
optionally a deterministic share of the work per machine (--shard i/N)."""
from __future__ import annotations

import dataclasses
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from .. import host
from ..describe import catalog, dtypes
from ..describe.description import SparseGemmConfig
from ..describe.helper_kernels import CompressorConfig, LineCopyConfig, ReductionConfig
from ..describe.problem import allocated_d_layout
from . import kernels
from .cache import default_cache


# Peak resident memory of one NVRTC compile (docs/compile_time.md): an sm90 GEMM 4.2-4.9 GB,
# the sm90 compressor 0.75 GB; an sm80 GEMM, a reduction or the staging copy under 0.4 GB.
SM90_GEMM_BYTES = 5 << 30
# an sm90 GEMM without CUTLASS's TMA epilogue (SparseGemmConfig.direct_store: 3.28-3.34 GB
# measured in session 24; staged_store: 3.40 GB in session 38; docs/compile_time.md), or
# without its mainloop's producer and consumers (lean_mainloop); and without both (2.29-2.46
# GB in session 39)
SM90_WITHOUT_TMA_EPILOGUE_BYTES = 4 << 30
SM90_LEAN_BYTES = 3 << 30
COMPRESSOR_BYTES = 1 << 30
SMALL_BYTES = 1 << 29


def compile_bytes(config) -> int:
    """The memory one compile of this kernel may peak at."""
    if isinstance(config, SparseGemmConfig):
        if not config.is_3x:
            return SMALL_BYTES
        return (SM90_GEMM_BYTES, SM90_WITHOUT_TMA_EPILOGUE_BYTES, SM90_LEAN_BYTES)[config.cutlass_pieces_left_out]
    return COMPRESSOR_BYTES if isinstance(config, CompressorConfig) else SMALL_BYTES


def jobs_for(configs, requested: int | None = None) -> int:
    """Worker processes for compiling these kernels: the caller's number, else one per
    usable CPU and no more than the free memory holds of the heaviest (host: a job's cgroup
    and CPU mask, not the whole node), at most one per kernel, at least one."""
    configs = [c[0] if isinstance(c, tuple) else c for c in configs]
    jobs = requested or host.compiles_at_once(max((compile_bytes(c) for c in configs), default=SMALL_BYTES))
    return max(1, min(jobs, len(configs)))


def _config_from_json(data: dict):
    """Any kernel description back from its to_json() (workers receive JSON)."""
    kinds = {"sm90_compressor": CompressorConfig, "sm80_reduction": ReductionConfig, "line_copy": LineCopyConfig}
    kind = kinds.get(data.get("family"))
    return kind(**data) if kind else SparseGemmConfig.from_json(data)


def _compile_one(args) -> tuple[str, str, str, float]:
    config_json, arch = args
    config = _config_from_json(config_json)
    kernels.announced()   # the warm-up reports each kernel itself
    start = time.perf_counter()
    try:
        compiled = kernels.get(config, arch)
    except Exception as exc:  # reported per kernel, the rest go on
        reason = str(exc).strip().splitlines()
        return config.name, arch, f"failed: {reason[-1] if reason else type(exc).__name__}", time.perf_counter() - start
    return config.name, arch, "cached" if compiled.from_cache else "compiled", time.perf_counter() - start


def catalog_items(archs, widest_only: bool = True) -> list[tuple[object, str]]:
    """(configuration, arch) for every kernel the package's catalogs hold for these archs:
    the sm90 family (and the 8-bit compressors) for sm_90a, the sm80 family for the others."""
    items = []
    for arch in archs:
        arch = kernels.normalize_arch(arch)
        if arch == "sm_90a":
            # cs.quantize_fp8 / quantize_int8 run CUTLASS's compressor (16-bit types encode in Python)
            items += [(CompressorConfig(e), arch) for e in dtypes.SM90_KERNEL_INPUT_NAMES if e not in dtypes.INPUT_NAMES]
            items.append((LineCopyConfig(), arch))   # stages what TMA cannot read (launch.staging)
            # each tile with C (a bias or beta) and without (every other call: SparseGemmConfig.reads_c)
            items += [(variant, arch) for name in catalog.CATALOGS["sm90"]
                      for c in catalog.load(name).enumerate(widest_only)
                      for variant in (c, dataclasses.replace(c, reads_c=False)) + _column_d(c)]
        else:
            items += [(c, arch) for name in catalog.CATALOGS["sm80"] for c in catalog.load(name).enumerate(widest_only)]
    return items


def _column_d(config) -> tuple:
    """A decode tile's kernel for a single-column D, which the library allocates column-major
    (Problem.layout_d; cs.linear writes decode steps' D so too): no C, 16-bit D, tiles up to
    64 wide (the ones default selection picks at one token)."""
    if config.threadblock[1] > 64 or allocated_d_layout("sm90", 1, config.element_out) != "col":
        return ()
    return (dataclasses.replace(config, reads_c=False, layout_c="col"),)


def shard(items: list, index: int, count: int) -> list:
    """This machine's share: a fixed order (arch, name), every count-th item from index."""
    return shard_list(sorted(dict.fromkeys(items), key=lambda item: (item[1], item[0].name)), index, count)


def shard_list(items: list, index: int, count: int) -> list:
    """This machine's share of a list kept in its given order."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count}: need 0 <= i < N")
    return items[index::count]


def compile_all(configs, arch: str | None = None, jobs: int | None = None, progress=None):
    """(name, arch, 'compiled' | 'cached' | 'failed: ...', seconds) per unique item.

    configs: configurations (compiled for `arch`) or (configuration, arch) pairs.
    progress(done, total, result) is called as each finishes.
    """
    items = list(dict.fromkeys(c if isinstance(c, tuple) else (c, arch) for c in configs))
    results = []

    def done(result):
        results.append(result)
        if progress:
            progress(len(results), len(items), result)

    work, work_configs = [], []
    for config, item_arch in items:   # cached ones are answered here, without a worker
        start = time.perf_counter()
        try:
            hit = kernels.cached(config, item_arch)
        except Exception:   # reported by the worker that compiles it
            hit = False
        if hit:
            done((config.name, kernels.normalize_arch(item_arch), "cached", time.perf_counter() - start))
        else:
            work.append((config.to_json(), item_arch))
            work_configs.append(config)
    jobs = jobs_for(work_configs, jobs)
    if jobs == 1:
        for w in work:
            done(_compile_one(w))
        return results
    default_cache()  # create the file (and its WAL mode) once, before the workers race to
    # forkserver: the caller may be a multi-threaded CUDA process (the profiler), which
    # must not be forked
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        for future in as_completed([pool.submit(_compile_one, w) for w in work]):
            done(future.result())
    return results
