"""Kernel life cycle: configuration -> emitted source -> cache key -> cached or fresh cubin.

Loading never compiles twice for one key in a process; a cache hit costs one SQLite
read. What launching needs (entry symbols, shared memory, threads, sizes) is read out
of the cubin the compiler produced, checked, and stored beside it.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import warnings
from dataclasses import dataclass, field
from typing import Callable

from .. import env
from ..describe.description import SparseGemmConfig
from ..emit.emitted import Emitted
from ..emit.registry import emit
from . import compile_locks, compiler, cubin, cubin_trim
from .cache import KernelCache, default_cache

log = logging.getLogger("cutlass_sparse")


@dataclass(frozen=True)
class CompiledKernel:
    config: SparseGemmConfig
    arch: str
    key: str
    cubin: bytes
    constants: dict[str, int] = field(hash=False)
    from_cache: bool = False
    compile_seconds: float = 0.0

    @property
    def symbol(self) -> str:
        return self.config.name

    @property
    def shared_bytes(self) -> int:
        return self.constants["shared_bytes"]

    @property
    def threads(self) -> int:
        return self.constants["threads"]


def normalize_arch(arch: str | int) -> str:
    """80, '80', 'sm80', 'sm_80' -> 'sm_80'; keeps an 'a' suffix (sm_90a)."""
    text = str(arch).lower().replace("sm_", "").replace("sm", "")
    if not text.rstrip("a").isdigit():
        raise ValueError(f"arch {arch!r} is not of the form sm_XX (e.g. sm_80, sm_90a)")
    return f"sm_{text}"


def cache_key(emitted: Emitted | str, arch: str, options: list[str], identity: str | None = None) -> str:
    """identity: the toolchain's (env.toolchain_identity), or an earlier format's (lookups only)."""
    h = hashlib.sha256()
    source = emitted if isinstance(emitted, str) else emitted.source
    headers = () if isinstance(emitted, str) else emitted.headers
    for part in (identity or env.toolchain_identity(), arch, "\n".join(options), source,
                 *(f"{name}\n{text}" for name, text in headers)):
        h.update(hashlib.sha256(part.encode()).digest())
    return h.hexdigest()


_memo: dict[tuple[SparseGemmConfig, str, tuple[str, ...]], CompiledKernel] = {}
_memo_lock = threading.Lock()


def get(config: SparseGemmConfig, arch: str, cache: KernelCache | None = None) -> CompiledKernel:
    """The compiled kernel for (config, arch): from memory, else the cache, else NVRTC."""
    arch = normalize_arch(arch)
    if getattr(_asking, "on", False):
        raise KernelAsked(config, arch)
    cache = cache or default_cache()
    memo_key = (config, arch, cache.search_id)
    found = _memo.get(memo_key)
    if found is not None:
        return found
    with _memo_lock:
        found = _memo.get(memo_key)
        if found is None:
            found = _memo[memo_key] = _load_or_compile(config, arch, cache)
    return found


def loaded(config: SparseGemmConfig, arch: str) -> bool:
    """Whether this process has the kernel at hand already (from the default cache)."""
    return (config, normalize_arch(arch), default_cache().search_id) in _memo


def cached(config: SparseGemmConfig, arch: str, cache: KernelCache | None = None) -> bool:
    """Whether the cache already holds this kernel (no compiling)."""
    return _lookup(config, normalize_arch(arch), cache or default_cache())[0] is not None


def present(arch: str, cache: KernelCache | None = None) -> list[SparseGemmConfig]:
    """The GEMM kernels for arch that the cache (and the shipped files it searches) holds,
    built by this toolchain (in this cache format or one it reads). Only a listing: loading
    still goes through the key."""
    found = (cache or default_cache()).configs(normalize_arch(arch), env.readable_identities())
    configs = []
    for data in found:
        try:
            configs.append(SparseGemmConfig.from_json(data))
        except (TypeError, ValueError):   # a compressor, a reduction, or a description this version lacks
            pass
    return list(dict.fromkeys(configs))


class KernelAsked(BaseException):
    """Raised by get() inside first_asked: a BaseException, so no `except Exception` on the
    way up swallows it."""

    def __init__(self, config, arch: str):
        super().__init__(config, arch)
        self.config, self.arch = config, arch


_asking = threading.local()


def asking() -> bool:
    """Whether this thread is inside first_asked (plans are being listed, not made)."""
    return getattr(_asking, "on", False)


def first_asked(build: Callable[[], object]) -> tuple[object, str] | None:
    """The first (kernel, arch) build() asks get() for, with nothing compiled or loaded:
    build stops there. Lists what plans pick without a GPU or a compiler (warm-up presets,
    the no-compile fallback). None if build() asks for no kernel."""
    _asking.on = True
    try:
        build()
    except KernelAsked as asked:
        return asked.config, asked.arch
    finally:
        _asking.on = False
    return None


def key_for(config, arch: str) -> str:
    """The cache key of (config, arch): what a lookup of it asks the cache for."""
    return _keyed(config, normalize_arch(arch))[2]


def _keyed(config, arch):
    emitted = emit(config)
    options = compiler.options_for(arch, emitted.options)
    return emitted, options, cache_key(emitted, arch, options)


def earlier_keys(emitted: Emitted, arch: str, options: list[str]) -> list[str]:
    """The keys the same kernel had in the earlier cache formats this version still reads."""
    return [cache_key(emitted, arch, options, identity) for identity in env.readable_identities()[1:]]


def _lookup(config, arch, cache):
    emitted, options, key = _keyed(config, arch)
    entry = cache.get(key)
    for old in earlier_keys(emitted, arch, options) if entry is None else ():
        entry = cache.get(old)   # an earlier format's entry serves as it is
        if entry is not None:
            break
    if entry is not None and not _holds(entry, config, arch):
        entry = None
    found = None if entry is None else CompiledKernel(config, arch, key, entry.cubin, entry.meta["constants"],
                                                       True, entry.meta["compile_seconds"])
    return found, emitted, options, key


def _holds(entry, config, arch: str) -> bool:
    """Whether a cached entry is the kernel its key names: its name, arch and the name of its
    stored description (the kernel's identity; run-time fields such as the swizzle are not
    in the source, so one entry serves them all) are the asked kernel's. The key hashes the
    source, so only a hand-edited file or a broken merge can disagree; such an entry is not
    served."""
    stored = entry.meta.get("config")
    try:
        described = (config.from_json(stored) if hasattr(config, "from_json") else type(config)(**stored))
    except (TypeError, ValueError):
        described = None
    if entry.name == config.name and entry.arch == arch and getattr(described, "name", None) == config.name:
        return True
    says = f"describes {described.name}" if described is not None else "holds no description this version reads"
    warnings.warn(f"kernel cache entry {entry.key[:12]} is filed under {config.name} for {arch} but is named "
                  f"{entry.name} for {entry.arch} and {says}: not served")
    return False


# What a compile takes on one CPU core (docs/compile_time.md; README "Kernel cache"): the
# Hopper family's CUTLASS 3.x kernels are template-heavy, the others small; an sm90 GEMM
# without CUTLASS's TMA epilogue (the direct or the staged store) less so.
ABOUT = {"sm90": "1-2 minutes and about 5 GB of memory", "sm90_compressor": "15-30 seconds"}
# an sm90 GEMM without one of CUTLASS's two heaviest pieces (its TMA epilogue; its mainloop's
# producer and consumers: SparseGemmConfig.lean_mainloop), and without both
ABOUT_WITHOUT_TMA_EPILOGUE = "30-60 seconds and about 3.5 GB of memory"
ABOUT_LEAN = "20-45 seconds and about 2.5 GB of memory"
_said_once = threading.Event()


def compile_estimate(config) -> str:
    """About how long (and how much memory) compiling this kernel takes, for messages."""
    if getattr(config, "is_3x", False):
        return (ABOUT["sm90"], ABOUT_WITHOUT_TMA_EPILOGUE, ABOUT_LEAN)[config.cutlass_pieces_left_out]
    return ABOUT.get(getattr(config, "family", ""), "a few seconds")


def announced() -> None:
    """The caller reports its compiles itself (the warm-up): no first-compile warning."""
    _said_once.set()


def _say_compiling(config, arch: str, cache: KernelCache) -> None:
    """One log line per compile (which kernel, about how long, where it is kept); a process
    whose logging is not set up gets one warning for its first compile instead."""
    text = f"compiling {config.name} for {arch} (about {compile_estimate(config)}; kept in {cache.path})"
    log.info("%s", text)
    configured = log.handlers or logging.getLogger().handlers or log.getEffectiveLevel() <= logging.INFO
    if not configured and not _said_once.is_set():
        _said_once.set()
        warnings.warn(f"{text}; later compiles are logged at INFO on the 'cutlass_sparse' logger, and "
                      f"`cutlass-sparse warmup` compiles ahead of time", stacklevel=5)


def _load_or_compile(config: SparseGemmConfig, arch: str, cache: KernelCache) -> CompiledKernel:
    found, emitted, options, key = _lookup(config, arch, cache)
    if found is not None:
        return found
    if not env.compile_disabled() and compile_locks.wait_for_other(config, arch):   # a stand-in's compile, say
        found, emitted, options, key = _lookup(config, arch, cache)
        if found is not None:
            return found
    if not env.compile_disabled():   # else the compiler refuses at once: nothing to wait for
        _say_compiling(config, arch, cache)
    compiled = compiler.compile_to_cubin(emitted.source, config.name, options, emitted.headers)
    log.info("compiled %s for %s in %.1f s", config.name, arch, compiled.seconds)
    notes = compiled.performance_notes
    for note in notes:   # correct, but slower than its tile should run
        log.warning("%s for %s: ptxas %s", config.name, arch, note)
    constants = {c: cubin.read_int32(compiled.cubin, f"{config.name}_{c}") for c in emitted.constants}
    for symbol, expected in emitted.entries.items():
        if isinstance(expected, tuple):   # each parameter's size; a name stands for a constant's value
            expected = tuple(constants[size] if isinstance(size, str) else size for size in expected)
            got = cubin.kernel_param_sizes(compiled.cubin, symbol)
        else:
            got = cubin.kernel_param_bytes(compiled.cubin, symbol)
        if got != expected:
            raise compiler.CompileError(
                config.name, f"entry {symbol} takes {got} parameter bytes; the launcher passes {expected}",
                options, compiler.dump_source(emitted.source, config.name))
    meta = {"constants": constants, "compile_seconds": round(compiled.seconds, 3),
            "ptxas_notes": list(notes),
            "config": config.to_json(), "toolchain": env.toolchain_identity()}
    # without the device variables no instruction reads: the driver would set each one up at
    # every module load (build.cubin_trim). Every sm90 key changed with the nonce hook of
    # session 36, so no cubin this version serves skipped this.
    kept = cubin_trim.without_unused_variables(compiled.cubin)
    cache.put(key, config.name, arch, kept, meta)
    return CompiledKernel(config, arch, key, kept, constants, False, compiled.seconds)
