"""Every path, version and environment switch the package reads, resolved in one place.

Nothing else in the package looks at os.environ or searches the file system for
headers: it asks this module.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import warnings
from pathlib import Path

from . import trust

PACKAGE_VERSION = "0.1.0"

# Version of the layout of a cache entry (cubin + JSON metadata). Bump it when
# what is stored, or how it is read, changes: old entries then stop matching, unless this
# version still reads their format (READABLE_FORMATS).
CACHE_FORMAT = 3   # 3: cubins stored zlib-packed (build.cache_files.pack)
# Earlier formats whose entries this version still serves: format 2 stored the same cubins
# raw (cache_files.unpack passes an untagged blob through), so only the format line of
# their keys and stamps differs. An upgrade then recompiles nothing and a shipped file
# keeps serving; new entries are written in CACHE_FORMAT.
READABLE_FORMATS = (2,)


def cache_path() -> Path:
    """Where compiled_cache.db lives: $CUTLASS_SPARSE_CACHE (its first entry), else the user's cache dir.

    Never the working directory: a database there would be picked up by whoever
    runs in that directory. When the user's cache dir cannot be written (a read-only or
    missing HOME) and holds no cache yet, a private per-user temporary cache is used
    ($TMPDIR/cutlass_sparse-<uid>/compiled_cache.db, directory 0700 and checked), with
    one warning naming the path that could not be used.
    """
    return cache_search_path()[0]


def cache_search_path() -> tuple[Path, ...]:
    """The writable cache, then read-only ones searched after it, in order.

    CUTLASS_SPARSE_CACHE=WRITABLE:SHIPPED1:SHIPPED2 (os.pathsep-separated); an empty first
    entry (":/opt/fleet.db") means the default location for the writable one.
    """
    env = os.environ
    first, _, rest = (env.get("CUTLASS_SPARSE_CACHE") or "").partition(os.pathsep)
    writable = _cache_path(first or None, env.get("XDG_CACHE_HOME"), env.get("HOME"))
    return _shipped(writable, rest) if rest else (writable,)


@functools.lru_cache(maxsize=64)
def _shipped(writable: Path, rest: str) -> tuple[Path, ...]:
    return tuple(dict.fromkeys([writable, *(Path(part).expanduser() for part in rest.split(os.pathsep) if part)]))


@functools.lru_cache(maxsize=64)
def _cache_path(explicit: str | None, xdg: str | None, home: str | None) -> Path:
    # Memoized on the variables it reads: pathlib costs tens of microseconds, and every
    # cs.matmul call asks (the path may change between calls, so it is asked each time).
    # The memo also makes the fallback's warning appear once per setting.
    if explicit:
        return Path(explicit).expanduser()
    try:
        base = Path(xdg) if xdg else Path(home or Path.home()) / ".cache"
    except (RuntimeError, KeyError):    # no HOME and no password entry
        base = Path("$HOME/.cache")
    preferred = base / "cutlass_sparse" / "compiled_cache.db"
    # A relative base would put the cache in the working directory: never.
    why = "its directory cannot be written"
    if base.is_absolute() and (preferred.exists() or _can_create(preferred.parent)):
        try:
            trust.check_path_chain(preferred)
            return preferred
        except trust.UntrustedPathError as exc:   # e.g. a ~/.cache others may write (umask 002)
            why = str(exc)
    fallback = trust.user_temp_dir() / "compiled_cache.db"
    warnings.warn(f"cannot use the kernel cache {preferred}: {why}; using the private temporary cache {fallback} "
                  "instead (set CUTLASS_SPARSE_CACHE to a writable path to keep kernels across reboots)", stacklevel=3)
    return fallback


def _dir_writable(path: Path) -> bool:
    """Whether a directory can take new entries (tests may monkeypatch it: root writes anything)."""
    return os.access(path, os.W_OK | os.X_OK)


def _can_create(directory: Path) -> bool:
    """Whether directory exists writable, or its nearest existing ancestor is a writable directory."""
    for candidate in (directory, *directory.parents):
        if candidate.exists():
            return candidate.is_dir() and _dir_writable(candidate)
    return False


def keep_cupy_importable() -> None:
    """Give CuPy a kernel cache it can create, before anything imports it.

    CuPy makes its kernel cache directory (~/.cupy/kernel_cache) when it is imported and
    fails there with PermissionError on a read-only or missing HOME (a serving container
    with a read-only root), and this package imports CuPy for torch callers too. Where
    CUPY_CACHE_DIR is unset and that directory cannot be made, point CuPy at a private
    per-user directory beside our own fallback cache ($TMPDIR/cutlass_sparse-<uid>/cupy,
    inside a 0700 directory we checked), with one warning. A CuPy already imported, or a
    CUPY_CACHE_DIR already chosen, is left as it is."""
    import sys

    if "cupy" in sys.modules or os.environ.get("CUPY_CACHE_DIR"):
        return
    wanted = Path(os.path.expanduser("~/.cupy/kernel_cache"))   # where CuPy's default points
    if wanted.is_absolute() and _can_create(wanted):   # CuPy also writes there at each new kernel
        return
    try:
        fallback = trust.user_temp_dir() / "cupy"
    except OSError as exc:   # no private temporary directory either: CuPy says what it says on import
        warnings.warn(f"CuPy cannot create its kernel cache {wanted}, and there is no private temporary "
                      f"directory for it ({exc}); set CUPY_CACHE_DIR to a directory you can write", stacklevel=2)
        return
    os.environ["CUPY_CACHE_DIR"] = str(fallback)
    warnings.warn(f"CuPy cannot create its kernel cache {wanted}; set CUPY_CACHE_DIR={fallback} for it (set "
                  "CUPY_CACHE_DIR yourself to choose another place)", stacklevel=2)


def cache_read_only() -> bool:
    """CUTLASS_SPARSE_CACHE_READONLY=1: use the cache file read-only (new kernels stay in memory)."""
    return os.environ.get("CUTLASS_SPARSE_CACHE_READONLY", "") not in ("", "0")


def shard_from_environment() -> tuple[int, int, str] | None:
    """(index, count, where from) of a Slurm job array or a Kubernetes indexed Job, else None.

    Slurm: SLURM_ARRAY_TASK_ID among SLURM_ARRAY_TASK_COUNT ids from SLURM_ARRAY_TASK_MIN
    in steps of SLURM_ARRAY_TASK_STEP (so --array=1-8 and 0-14:2 work). Kubernetes sets
    JOB_COMPLETION_INDEX but never passes the Job's completions: CUTLASS_SPARSE_SHARD_COUNT.
    Raises ValueError naming the variable when a value is unusable.
    """
    env = os.environ
    if env.get("SLURM_ARRAY_TASK_ID"):
        task, count = _env_int("SLURM_ARRAY_TASK_ID"), _env_int("SLURM_ARRAY_TASK_COUNT")
        low, step = _env_int("SLURM_ARRAY_TASK_MIN", task if count == 1 else 0), _env_int("SLURM_ARRAY_TASK_STEP", 1)
        index, off_step = divmod(task - low, step)
        if off_step or not 0 <= index < count:
            raise ValueError(f"SLURM_ARRAY_TASK_ID={task} is not one of {count} evenly spaced array ids from "
                             f"SLURM_ARRAY_TASK_MIN={low} (step {step}): submit with --array=0-{count - 1}, or "
                             "pass --shard i/N")
        return index, count, f"SLURM_ARRAY_TASK_ID={task} of SLURM_ARRAY_TASK_COUNT={count}"
    if env.get("JOB_COMPLETION_INDEX"):
        index = _env_int("JOB_COMPLETION_INDEX")
        if not env.get("CUTLASS_SPARSE_SHARD_COUNT"):
            raise ValueError(f"JOB_COMPLETION_INDEX={index} is set but not the shard count: set "
                             "CUTLASS_SPARSE_SHARD_COUNT to the Job's completions (Kubernetes does not pass it), "
                             "or pass --shard i/N")
        count = _env_int("CUTLASS_SPARSE_SHARD_COUNT")
        if not 0 <= index < count:
            raise ValueError(f"JOB_COMPLETION_INDEX={index} is not below CUTLASS_SPARSE_SHARD_COUNT={count}")
        return index, count, f"JOB_COMPLETION_INDEX={index} of CUTLASS_SPARSE_SHARD_COUNT={count}"
    return None


def _env_int(name: str, default: int | None = None) -> int:
    text = os.environ.get(name, "")
    if not text and default is not None:
        return default
    try:
        value = int(text, 10)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None
    positive = name.endswith(("COUNT", "STEP"))   # a count or a step of 0 means nothing
    if value < 0 or (value == 0 and positive):
        raise ValueError(f"{name}={value}: must be {'>= 1' if positive else '>= 0'}")
    return value


def compile_disabled() -> bool:
    """CUTLASS_SPARSE_NO_COMPILE=1 makes every compile fail: proves a cache is warm."""
    return os.environ.get("CUTLASS_SPARSE_NO_COMPILE", "") not in ("", "0")


def stand_in_allowed() -> bool:
    """CUTLASS_SPARSE_STAND_IN=0: a default-family call that needs an sm90 GEMM the cache
    lacks waits for its compile instead of running the sm80 family meanwhile (plan.stand_in)."""
    return os.environ.get("CUTLASS_SPARSE_STAND_IN", "1") != "0"


def programmatic_launch() -> bool:
    """CUTLASS_SPARSE_PDL=0 launches every sm90 GEMM in plain stream order (launch.pdl)."""
    return os.environ.get("CUTLASS_SPARSE_PDL", "1") != "0"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cuda_home() -> Path | None:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return Path(os.environ[var])
    default = Path("/usr/local/cuda")
    return default if default.exists() else None


# Where NVIDIA's pip header wheels put each piece, per CUDA major, relative to a
# site-packages/nvidia directory, with the wheel whose version names it in the cache key.
# CUDA 13 wheels share one nvidia/cu13/include (CCCL in its cccl/ folder); CUDA 12 wheels
# each have their own nvidia/<component>/include, and CUDA 12 ships the crt headers
# (crt/host_defines.h, ...) in the nvcc wheel: it has no separate crt wheel.
PIP_HEADER_LAYOUT = {
    13: {"cccl": ("cu13/include/cccl", "nvidia-cuda-cccl"),
         "runtime": ("cu13/include", "nvidia-cuda-runtime"),
         "crt": ("cu13/include", "nvidia-cuda-crt")},
    12: {"cccl": ("cuda_cccl/include", "nvidia-cuda-cccl-cu12"),
         "runtime": ("cuda_runtime/include", "nvidia-cuda-runtime-cu12"),
         "crt": ("cuda_nvcc/include", "nvidia-cuda-nvcc-cu12")},
}
# The NVRTC wheel of each CUDA major, whose exact version goes into the cache key.
NVRTC_DIST = {13: "nvidia-cuda-nvrtc", 12: "nvidia-cuda-nvrtc-cu12"}

INSTALL_HINT = ("install one CUDA stack with the package: pip install 'cutlass-sparse[cu13]' (drivers of "
                "CUDA 13, 580 and newer) or 'cutlass-sparse[cu12]' (drivers of CUDA 12)")


class CudaStackMissing(RuntimeError):
    """No usable NVRTC: the package was installed without its [cu13] or [cu12] extra."""


def _nvidia_roots() -> list[Path]:
    """Every site-packages/nvidia directory of the nvidia-cuda-* wheels.

    The wheels may sit in several site directories (e.g. a --target dir beside the
    system's), so each header piece is looked up across all of them. (CUDA 13's wheels
    make `nvidia` a namespace package spanning them; CUDA 12's ship nvidia/__init__.py,
    which makes it an ordinary package of one directory, so install a CUDA 12 stack into
    one site directory.)

    Not cuda.pathfinder's locate_nvidia_header_directory: it names one directory and
    whether it came from site-packages or CUDA_HOME, but the cache key needs the exact
    wheel version of each piece (CCCL, runtime, crt), which these directories give.
    """
    try:
        import nvidia
    except ImportError:
        return []
    return [Path(root) for root in nvidia.__path__]


@functools.cache
def nvrtc_major() -> int:
    """The CUDA major of the NVRTC that cuda.bindings loads: it picks the headers.

    Asked of the loaded library, not of installed wheel names: cuda.pathfinder, which
    cuda.bindings loads NVRTC through, takes libnvrtc.so.13 or .so.12, whichever it finds
    (with both extras installed, the .so.13: it searches nvidia/cu13/lib first; a preloaded
    .so.12 wins), and headers of another CUDA than the compiler's do not compile CUTLASS.
    """
    try:
        from cuda.bindings import nvrtc

        err, major, _ = nvrtc.nvrtcVersion()
    except (ImportError, RuntimeError, OSError) as exc:   # no cuda-bindings, or no libnvrtc to load
        raise CudaStackMissing(f"cannot load NVRTC ({exc}): {INSTALL_HINT}") from exc
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CudaStackMissing(f"nvrtcVersion failed ({err}): {INSTALL_HINT}")
    return major


@functools.cache
def cutlass_root() -> Path:
    import cutlass_library

    return Path(cutlass_library.source_path)


@functools.cache
def header_sources() -> tuple[tuple[Path, str], ...]:
    """The include directories for NVRTC, each with a string naming its exact version.

    Each piece is taken from NVIDIA's pip packages when present (pinned to the CUDA
    minor that CUTLASS 4.2 compiles with), else from CUDA_HOME. The version strings
    go into the cache key, paths do not: the same headers on two machines give the
    same key.
    """
    sources: list[tuple[Path, str]] = []
    root = cutlass_root()
    cutlass_id = f"nvidia-cutlass {_version('nvidia-cutlass')}"
    sources.append((root / "include", cutlass_id))
    sources.append((root / "tools" / "util" / "include", cutlass_id))

    major = nvrtc_major()
    layout = PIP_HEADER_LAYOUT.get(major)
    if layout is None:
        raise CudaStackMissing(f"NVRTC {major} is not a CUDA major this package knows the headers of "
                               f"({', '.join(map(str, sorted(PIP_HEADER_LAYOUT)))}): {INSTALL_HINT}")
    roots = _nvidia_roots()
    home = _cuda_home()
    home_id = None
    if home is not None:
        version_json = home / "version.json"
        digest = hashlib.sha256(version_json.read_bytes()).hexdigest()[:16] if version_json.exists() else "unknown"
        home_id = f"CUDA_HOME version.json {digest}"

    def pick(piece: str, rel_home: str, probe: str) -> None:
        rel_pip, dist = layout[piece]
        found = [root / rel_pip for root in roots if (root / rel_pip / probe).exists()]
        if found and _version(dist):
            sources.append((found[0], f"{dist} {_version(dist)}"))
        elif home is not None and (home / rel_home / probe).exists():
            sources.append((home / rel_home, home_id))
        else:
            raise CudaStackMissing(
                f"cannot find the CUDA {major} header {probe!r} for NVRTC {major}: install the pip package "
                f"{dist} (see pyproject.toml's cu{major} extra for the pinned version) or set CUDA_HOME; "
                f"{INSTALL_HINT}"
            )

    pick("cccl", "include/cccl", "cuda/std/type_traits")
    pick("runtime", "include", "cuda_runtime.h")
    pick("crt", "include", "crt/host_defines.h")
    return tuple(sources)


@functools.cache
def nvrtc_version() -> str:
    major = nvrtc_major()     # first: it turns a missing NVRTC into the message naming the extras
    from cuda.bindings import nvrtc

    _, _, minor = nvrtc.nvrtcVersion()
    # The pip wheel's patch level changes code generation too; record it when known.
    dist = NVRTC_DIST.get(major)
    return f"{major}.{minor} ({(_version(dist) if dist else None) or 'system'})"


@functools.cache
def include_dirs() -> list[Path]:
    """header_sources' directories, each once, in order (runtime and crt often share one)."""
    return list(dict.fromkeys(path for path, _ in header_sources()))


@functools.cache
def toolchain_identity(cache_format: int = CACHE_FORMAT) -> str:
    """Everything besides source and options that changes a compiled binary, and the format
    its entry is stored in."""
    parts = [
        f"cutlass_sparse {PACKAGE_VERSION}",
        f"cache format {cache_format}",
        f"nvrtc {nvrtc_version()}",
        *sorted({ident for _, ident in header_sources()}),
    ]
    return "\n".join(parts)


def readable_identities() -> tuple[str, ...]:
    """The toolchain stamps whose entries this version serves: its own, then READABLE_FORMATS'."""
    return (toolchain_identity(), *(toolchain_identity(f) for f in READABLE_FORMATS))


def operations_dir() -> Path:
    """The catalogs: installed as cutlass_sparse.operations, or operations/ in a checkout."""
    try:
        import importlib.resources

        path = Path(str(importlib.resources.files("cutlass_sparse.operations")))
        if path.is_dir():
            return path
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parent.parent / "operations"
