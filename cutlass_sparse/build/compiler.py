"""NVRTC: CUDA C++ source in, cubin bytes out. Caches nothing (see kernels.py).

Written on cuda.bindings.nvrtc rather than cuda.core's Program: the sm90 kernels compile
against patched CUTLASS headers handed to nvrtcCreateProgram in memory (emit.nvrtc_headers),
and Program (cuda.core 1.2) takes no named in-memory headers.
"""
from __future__ import annotations

import re
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from .. import env, trust

# Options every kernel is compiled with; the arch option is added per call.
BASE_OPTIONS = (
    "-std=c++17",
    "-default-device",
    "-DNDEBUG",
    "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1",
)


class CompileError(RuntimeError):
    """NVRTC rejected a kernel. Carries the log, the options and where the source was dumped."""

    def __init__(self, name: str, log: str, options: list[str], source_path: Path | None):
        self.name, self.log, self.options, self.source_path = name, log, options, source_path
        if source_path is None:   # refused before NVRTC ran (CUTLASS_SPARSE_NO_COMPILE)
            super().__init__(f"{log}: not compiling {name}\noptions: {' '.join(options)}")
            return
        super().__init__(
            f"NVRTC failed to compile {name}; source dumped to {source_path}\n"
            f"options: {' '.join(options)}\n{log}"
        )


def arch_option(arch: str) -> str:
    """'sm_80' / '80' / 'sm_90a' -> '-arch=sm_80' (cubin, not PTX)."""
    arch = arch if arch.startswith("sm_") else f"sm_{arch}"
    return f"-arch={arch}"


def options_for(arch: str, extra: tuple[str, ...] = ()) -> list[str]:
    """Full option list, include paths last (they are machine-specific, so kept out of cache keys)."""
    return [*BASE_OPTIONS, arch_option(arch), *extra]


def include_options() -> list[str]:
    return [f"-I{path}" for path in env.include_dirs()]


@dataclass(frozen=True)
class Compiled:
    cubin: bytes
    log: str
    seconds: float

    @property
    def performance_notes(self) -> tuple[str, ...]:
        return performance_notes(self.log)


# ptxas's "Potential Performance Loss" notes (C75xx), e.g. wgmma serialized for want of
# registers: the kernel is correct but can run far below its tile's speed (session 27: a
# 256x192 tile ran 8-35% slower for it), so a compile that draws one says so.
_PERFORMANCE_NOTE = re.compile(r"\((C75\d\d)\)\s*Potential Performance Loss:\s*(.*?)(?: (?:for|in) the function '[^']*')?\s*$")


def performance_notes(log: str) -> tuple[str, ...]:
    """ptxas's performance warnings in an NVRTC log, one line each: "C7512: wgmma... serialized ..."."""
    return tuple(f"{code}: {text.strip()}" for code, text in
                 (match.groups() for match in map(_PERFORMANCE_NOTE.search, log.splitlines()) if match))


def compile_to_cubin(source: str, name: str, options: list[str],
                     headers: tuple[tuple[str, str], ...] = ()) -> Compiled:
    """Compile one translation unit. Raises CompileError with the NVRTC log on failure.

    headers: (include name, text) pairs NVRTC uses in place of files of those names.
    """
    import time

    from cuda.bindings import nvrtc

    if env.compile_disabled():
        raise CompileError(name, "compilation disabled by CUTLASS_SPARSE_NO_COMPILE", options, None)   # nothing failed

    start = time.perf_counter()
    all_options = [*options, *include_options()]
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), len(headers),
                                         [text.encode() for _, text in headers],
                                         [include.encode() for include, _ in headers])
    _check(err, "nvrtcCreateProgram")
    try:
        encoded = [o.encode() for o in all_options]
        (compile_err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = _program_log(prog)
        if compile_err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(name, log, options, dump_source(source, name))
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize")
        cubin = bytearray(size)
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(err, "nvrtcGetCUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return Compiled(bytes(cubin), log, time.perf_counter() - start)


def _program_log(prog) -> str:
    from cuda.bindings import nvrtc

    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    _check(err, "nvrtcGetProgramLogSize")
    buf = bytearray(size)
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0").decode(errors="replace")


def _check(err, what: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")


def dump_source(source: str, name: str) -> Path:
    """Write a failed kernel's source where its user alone can reach it, and return the path.

    $TMPDIR/cutlass_sparse-<uid>/failed/<name>.cu: both directories created 0700 and checked
    (ours, no group/other write, no symbolic link); the file is written fresh and renamed
    into place, so a link planted at that name is replaced, never written through. If the
    directory fails its check (someone planted it), a fresh private directory is used.
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:200] or "kernel"
    try:
        directory = trust.private_dir(trust.user_temp_dir() / "failed")
    except trust.UnsafeCacheError as exc:
        directory = Path(tempfile.mkdtemp(prefix="cutlass_sparse-failed-"))
        warnings.warn(f"{exc}; failed source written to {directory} instead")
    return trust.write_new_file(directory, f"{safe}.cu", source.encode())
