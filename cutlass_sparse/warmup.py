"""Compile a list of configurations into the cache in parallel worker processes."""
from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor

from .description import SparseGemmConfig


def _compile_one(args) -> tuple[str, str, float]:
    config_json, arch = args
    from . import kernels
    from .description import CompressorConfig

    config = (CompressorConfig(**config_json) if config_json.get("family") == "sm90_compressor"
              else SparseGemmConfig.from_json(config_json))
    start = time.perf_counter()
    try:
        compiled = kernels.get(config, arch)
    except Exception as exc:  # reported per kernel, the rest go on
        return config.name, f"failed: {exc}".splitlines()[0], time.perf_counter() - start
    return config.name, "cached" if compiled.from_cache else "compiled", time.perf_counter() - start


def compile_all(configs, arch: str, jobs: int | None = None) -> list[tuple[str, str, float]]:
    """(name, 'compiled' | 'cached' | 'failed: ...', seconds) per unique configuration."""
    unique = list(dict.fromkeys(configs))
    jobs = jobs or os.cpu_count() or 1
    work = [(c.to_json(), arch) for c in unique]
    if jobs == 1:
        return [_compile_one(w) for w in work]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_compile_one, work))
