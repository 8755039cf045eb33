"""cutlass-sparse: 2:4 structured-sparse GEMM from Python, via CUTLASS kernels compiled with NVRTC.

    import cutlass_sparse as cs
    sw = cs.compress(cs.prune_2to4(W))      # W: cupy [M, K] fp16/bf16
    y = cs.matmul(sw, x)                     # x: cupy [K, N] -> y: cupy [M, N]

The package follows the data: describe (Problem, configurations, catalogs, selection)
-> formats (2:4 layouts) -> emit (C++) -> build (NVRTC, cache) -> launch (family plans)
-> plan (Problem -> plan) -> profiler -> api (the calls below). docs/FLOW.md maps it.
"""
import sys as _sys

# cutlass_library's package import runs its generator's argument parser on sys.argv (which
# would answer our commands' --help with its options): the first import sees a bare argv.
_argv, _sys.argv = _sys.argv, _sys.argv[:1]
try:
    import cutlass_library  # noqa: F401
finally:
    _sys.argv = _argv

from . import env as _env  # noqa: E402

_env.keep_cupy_importable()   # before any module of ours imports CuPy

from .api.compress import compress, prune_2to4  # noqa: E402
from .api.quantized import (linear_fp8, linear_int8, quantize_activations_fp8,  # noqa: E402
                            quantize_activations_int8, quantize_fp8, quantize_int8)
from .api.matmul import linear, matmul, tune, workspace_size  # noqa: E402
from .api.plan import Plan, plan  # noqa: E402
from .build.compiler import CompileError  # noqa: E402
from .build.kernels import emit  # noqa: E402
from .describe import catalog  # noqa: E402
from .describe.description import SparseGemmConfig  # noqa: E402
from .describe.dtypes import bfloat16  # noqa: E402
from .env import PACKAGE_VERSION as __version__  # noqa: E402
from .formats.matrices import SparseBatch, SparseMatrix  # noqa: E402


def emit_source(config: SparseGemmConfig | str) -> str:
    """The CUDA C++ that cutlass-sparse compiles for a configuration (object or procedural name)."""
    if isinstance(config, str):
        try:
            config = catalog.find(config)
        except ValueError as exc:
            raise ValueError(f"config: {exc}") from None
    elif not isinstance(config, SparseGemmConfig):
        raise TypeError(f"config must be a SparseGemmConfig or a configuration's procedural name (str), "
                        f"got {type(config).__name__}")
    return emit(config).source


__all__ = ["CompileError", "SparseBatch", "SparseGemmConfig", "SparseMatrix", "bfloat16", "compress", "emit_source",
           "Plan", "linear", "linear_fp8", "linear_int8", "matmul", "plan", "prune_2to4", "quantize_activations_fp8",
           "quantize_activations_int8", "quantize_fp8", "quantize_int8",
           "tune", "workspace_size", "__version__"]
