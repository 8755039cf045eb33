"""Emitter for the parallel split-K reduction: CUTLASS 2.x ReduceSplitK.

The GEMM writes one fp32 partial tile per K slice into a workspace [slices, M, ld];
this kernel sums the slices per element and applies the epilogue (alpha, beta, C,
activation) while writing D, so a parallel split-K call ends exactly where a one-slice
call would.
"""
from __future__ import annotations

from ..describe import dtypes
from ..describe.helper_kernels import ReductionConfig
from . import arguments, epilogue
from .emitted import Emitted
from .template import substitute

ROWS_PER_BLOCK = 4     # threads (32, ROWS_PER_BLOCK): one warp per row of a block's tile

TEMPLATE = """\\
// ${name}
// Emitted by cutlass_sparse: parallel split-K reduction (CUTLASS 2.x ReduceSplitK).
#include <cutlass/cutlass.h>
#include <cutlass/reduction/kernel/reduce_split_k.h>
#include <cutlass/reduction/thread/reduction_operators.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/epilogue/thread/linear_combination_generic.h>
#include <cutlass/epilogue/thread/activation.h>
#include <cuda/std/type_traits>

using OutputOp = ${output_op};
using Reduction = cutlass::reduction::kernel::ReduceSplitK<
    cutlass::MatrixShape<${rows}, ${columns}>, OutputOp,
    cutlass::reduction::thread::ReduceAdd<float, float, ${alignment}>>;
static_assert(${columns} / Reduction::kElementsPerAccess == 32, "block: 32 threads across, ${rows} rows");
extern "C" __constant__ int ${name}_threads = 32 * ${rows};
extern "C" __constant__ int ${name}_shared_bytes = 0;
extern "C" __constant__ int ${name}_rows = ${rows};
extern "C" __constant__ int ${name}_columns = ${columns};

${arguments_struct}
extern "C" __global__ void __launch_bounds__(32 * ${rows}) ${name}(${arguments_name} const args) {
  using Out = typename OutputOp::ElementOutput;
  using WorkspaceRef = typename Reduction::WorkspaceTensorRef;
  using OutputRef = typename Reduction::OutputTensorRef;
  typename Reduction::Params params(
      cutlass::MatrixCoord(args.m, args.n), args.slices, size_t(args.slice_stride),
      WorkspaceRef(static_cast<float *>(const_cast<void *>(args.workspace)),
                   typename WorkspaceRef::Layout(args.ld_workspace)),
      OutputRef(static_cast<Out *>(args.destination), typename OutputRef::Layout(args.ld_destination)),
      OutputRef(static_cast<Out *>(const_cast<void *>(args.source)), typename OutputRef::Layout(args.ld_source)),
      ${output_params});
  typename Reduction::SharedStorage storage;
  Reduction op;
  op(params, storage);
}
"""


def emit(config: ReductionConfig) -> Emitted:
    element = dtypes.cutlass_type(config.element_out)
    op = epilogue.output_op_2x(config.activation, element, config.alignment)
    source = substitute(TEMPLATE, {
        "name": config.name, "output_op": op, "alignment": config.alignment,
        "rows": ROWS_PER_BLOCK, "columns": 32 * config.alignment,
        "output_params": epilogue.output_params_2x("OutputOp", "args.alpha", "args.beta", "args.activation_arg",
                                                   config.activation),
        "arguments_struct": arguments.REDUCE_SPLIT_K.cpp(), "arguments_name": arguments.REDUCE_SPLIT_K.name,
    })
    return Emitted(source, {config.name: arguments.REDUCE_SPLIT_K.dtype.itemsize},
                   ("threads", "shared_bytes", "rows", "columns"))
