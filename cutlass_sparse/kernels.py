"""Kernel life cycle: configuration -> emitted source -> cache key -> cached or fresh cubin.

Loading never compiles twice for one key in a process; a cache hit costs one SQLite
read. What launching needs (symbol, shared memory, threads) is read from the cubin
the compiler produced and stored beside it.
"""
from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

from . import arguments, compiler, cubin, emit_sm80, env
from .cache import KernelCache, default_cache
from .description import SparseGemmConfig

EMITTERS = {"sm80": emit_sm80.emit}


@dataclass(frozen=True)
class CompiledKernel:
    config: SparseGemmConfig
    arch: str
    key: str
    cubin: bytes
    symbol: str
    shared_bytes: int
    threads: int
    from_cache: bool
    compile_seconds: float


def emit(config: SparseGemmConfig) -> str:
    try:
        emitter = EMITTERS[config.family]
    except KeyError:
        raise ValueError(f"no emitter for kernel family {config.family!r}") from None
    return emitter(config)


def normalize_arch(arch: str | int) -> str:
    """80, '80', 'sm80', 'sm_80' -> 'sm_80'; keeps an 'a' suffix (sm_90a)."""
    text = str(arch).lower().replace("sm_", "").replace("sm", "")
    if not text.rstrip("a").isdigit():
        raise ValueError(f"arch {arch!r} is not of the form sm_XX (e.g. sm_80, sm_90a)")
    return f"sm_{text}"


def cache_key(source: str, arch: str, options: list[str]) -> str:
    h = hashlib.sha256()
    for part in (env.toolchain_identity(), arch, "\n".join(options), source):
        h.update(hashlib.sha256(part.encode()).digest())
    return h.hexdigest()


_memo: dict[tuple[SparseGemmConfig, str, str], CompiledKernel] = {}
_memo_lock = threading.Lock()


def get(config: SparseGemmConfig, arch: str, cache: KernelCache | None = None) -> CompiledKernel:
    """The compiled kernel for (config, arch): from memory, else the cache, else NVRTC."""
    arch = normalize_arch(arch)
    cache = cache or default_cache()
    memo_key = (config, arch, str(cache.path))
    found = _memo.get(memo_key)
    if found is not None:
        return found
    with _memo_lock:
        found = _memo.get(memo_key)
        if found is None:
            found = _memo[memo_key] = _load_or_compile(config, arch, cache)
    return found


def _load_or_compile(config: SparseGemmConfig, arch: str, cache: KernelCache) -> CompiledKernel:
    source = emit(config)
    options = compiler.options_for(arch)
    key = cache_key(source, arch, options)
    entry = cache.get(key)
    if entry is not None:
        meta = entry.meta
        return CompiledKernel(config, arch, key, entry.cubin, meta["symbol"], meta["shared_bytes"],
                              meta["threads"], True, meta["compile_seconds"])
    compiled = compiler.compile_to_cubin(source, config.name, options)
    shared_bytes = cubin.read_int32(compiled.cubin, f"{config.name}_shared_bytes")
    param_bytes = cubin.kernel_param_bytes(compiled.cubin, config.name)
    if param_bytes != arguments.DTYPE.itemsize:
        raise compiler.CompileError(
            config.name, f"kernel takes {param_bytes} parameter bytes, the Python argument block has "
            f"{arguments.DTYPE.itemsize}", options, compiler._dump(source, config.name))
    meta = {"symbol": config.name, "shared_bytes": shared_bytes, "threads": config.threads,
            "param_bytes": param_bytes, "compile_seconds": round(compiled.seconds, 3),
            "config": config.to_json(), "toolchain": env.toolchain_identity()}
    cache.put(key, config.name, arch, compiled.cubin, meta)
    return CompiledKernel(config, arch, key, compiled.cubin, config.name, shared_bytes,
                          config.threads, False, compiled.seconds)
