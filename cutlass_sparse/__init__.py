"""cutlass-sparse: 2:4 structured-sparse GEMM from Python, via CUTLASS kernels compiled with NVRTC.

    import cutlass_sparse as cs
    sw = cs.compress(cs.prune_2to4(W))      # W: cupy [M, K] fp16/bf16
    y = cs.matmul(sw, x)                     # x: cupy [K, N] -> y: cupy [M, N]
"""
from .compiler import CompileError
from .compress import SparseBatch, SparseMatrix, compress, prune_2to4
from .description import SparseGemmConfig
from .dtypes import bfloat16
from .env import PACKAGE_VERSION as __version__
from .matmul import linear, matmul, workspace_size
from .plan import Plan, plan
from .profiler import tune


def emit_source(config: SparseGemmConfig | str) -> str:
    """The CUDA C++ that cutlass-sparse compiles for a configuration (object or procedural name)."""
    from . import catalog, kernels

    if isinstance(config, str):
        config = catalog.find(config)
    return kernels.emit(config).source


__all__ = ["CompileError", "SparseBatch", "SparseGemmConfig", "SparseMatrix", "bfloat16", "compress", "emit_source",
           "Plan", "linear", "matmul", "plan", "prune_2to4", "tune", "workspace_size", "__version__"]
