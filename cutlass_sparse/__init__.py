"""cutlass-sparse: 2:4 structured-sparse GEMM from Python, via CUTLASS kernels compiled with NVRTC.

    import cutlass_sparse as cs
    sw = cs.compress(cs.prune_2to4(W))      # W: cupy [M, K] fp16/bf16
    y = cs.matmul(sw, x)                     # x: cupy [K, N] -> y: cupy [M, N]

The package follows the data: describe (Problem, configurations, catalogs, selection)
-> formats (2:4 layouts) -> emit (C++) -> build (NVRTC, cache) -> launch (family plans)
-> plan (Problem -> plan) -> profiler -> api (the calls below). docs/FLOW.md maps it.
"""
from .api.compress import compress, prune_2to4
from .api.matmul import linear, matmul, tune, workspace_size
from .api.plan import Plan, plan
from .build.compiler import CompileError
from .build.kernels import emit
from .describe import catalog
from .describe.description import SparseGemmConfig
from .describe.dtypes import bfloat16
from .env import PACKAGE_VERSION as __version__
from .formats.matrices import SparseBatch, SparseMatrix


def emit_source(config: SparseGemmConfig | str) -> str:
    """The CUDA C++ that cutlass-sparse compiles for a configuration (object or procedural name)."""
    if isinstance(config, str):
        config = catalog.find(config)
    return emit(config).source


__all__ = ["CompileError", "SparseBatch", "SparseGemmConfig", "SparseMatrix", "bfloat16", "compress", "emit_source",
           "Plan", "linear", "matmul", "plan", "prune_2to4", "tune", "workspace_size", "__version__"]
