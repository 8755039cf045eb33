"""Emitter for the Ampere-style family: CUTLASS 2.x DefaultGemmSparseUniversal + an extern "C" entry."""
from __future__ import annotations

from cutlass_library.library import (
    DataTypeTag,
    LayoutTag,
    MathOperationTag,
    OpcodeClassTag,
    SwizzlingFunctorTag,
)

import numpy as np

from . import arguments, epilogue
from ..describe.description import SparseGemmConfig
from ..formats.patterns import PATTERNS
from .emitted import Emitted
from .template import substitute

TEMPLATE = """\
// ${name}
// Emitted by cutlass_sparse: 2:4 sparse GEMM, CUTLASS 2.x (mma.sp), family ${family}.
#include <cutlass/cutlass.h>
#include <cutlass/gemm/gemm.h>
#include <cutlass/gemm/kernel/default_gemm_sparse_universal.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/epilogue/thread/linear_combination_generic.h>
#include <cutlass/epilogue/thread/linear_combination_clamp.h>
#include <cutlass/epilogue/thread/activation.h>
#include <cuda/std/type_traits>

// GemmSparseUniversal: one kernel for plain, split-K serial (kGemm with K slices, semaphores),
// split-K parallel (kGemmSplitKParallel: each slice writes its own partial D) and batched.
using Kernel = typename cutlass::gemm::kernel::DefaultGemmSparseUniversal<
    ${element_a}, ${layout_a}, ${alignment_a},
    ${element_b}, ${layout_b}, ${alignment_b},
    ${element_c}, cutlass::layout::RowMajor,
    ${element_accumulator},
    ${opcode_class}, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<${tb_m}, ${tb_n}, ${tb_k}>,
    cutlass::gemm::GemmShape<${warp_m}, ${warp_n}, ${warp_k}>,
    cutlass::gemm::GemmShape<${inst_m}, ${inst_n}, ${inst_k}>,
    ${output_op},
    ${swizzle},
    ${stages},
    ${math_operation}>::GemmKernel;

// Metadata as the kernel reads it: the host side must compress to exactly this.
static_assert(sizeof(typename Kernel::ElementE) == ${metadata_bytes}, "metadata word size (compress.PATTERNS)");
static_assert(Kernel::kElementsPerElementE == ${stored_per_word}, "stored values per metadata word");
static_assert(cuda::std::is_same<typename Kernel::LayoutE, cutlass::layout::ColumnMajorInterleaved<2>>::value,
              "metadata must be ColumnMajorInterleaved<2>");
static_assert(Kernel::kThreadCount == ${threads}, "thread count differs from the description");
extern "C" __constant__ int ${name}_threads = Kernel::kThreadCount;

${arguments_struct}
extern "C" __global__ void __launch_bounds__(Kernel::kThreadCount)
${name}(${arguments_name} const args) {
  using OutputOp = typename Kernel::EpilogueOutputOp;
  // Params built per thread from plain values: no host compiler needed to lay them out.
  typename Kernel::Arguments arguments(
      static_cast<cutlass::gemm::GemmUniversalMode>(args.mode), {args.m, args.n, args.k}, args.batch_count,
      ${output_params},
      args.a, args.b, args.c, args.d, args.e,
      args.batch_stride_a, args.batch_stride_b, args.batch_stride_c, args.batch_stride_d, args.batch_stride_e,
      args.lda, args.ldb, args.ldc, args.ldd, args.lde);
  typename Kernel::Params params(arguments, 0, 0);
  if (args.slice_k > 0) {
    // K slices on whole tiles: CUTLASS would cut K on 8-element boundaries, which lands a
    // slice mid metadata word.
    params.gemm_k_size = args.slice_k;
    params.grid_tiled_shape.k() = args.grid_k;
  }
  params.semaphore = args.semaphore;
  extern __shared__ __align__(16) char shared_storage[];
  Kernel op;
  op(params, *reinterpret_cast<typename Kernel::SharedStorage *>(shared_storage));
}

// The dynamic shared memory the entry needs, as a symbol the host reads out of the
// cubin (cubin.py): the compiler's own sizeof, not a Python re-derivation.
extern "C" __constant__ int ${name}_shared_bytes = int(sizeof(typename Kernel::SharedStorage));
"""


def emit(config: SparseGemmConfig) -> Emitted:
    if config.family != "sm80":
        raise ValueError(f"the sm80 emitter cannot emit family {config.family!r}")
    mi = config.math_instruction
    warp_shape = [config.threadblock[i] // config.warps[i] for i in range(3)]
    source = substitute(TEMPLATE, {
        "name": config.name,
        "family": config.family,
        "element_a": DataTypeTag[config.tensor_a.element],
        "layout_a": LayoutTag[config.tensor_a.layout],
        "alignment_a": config.alignment_a,
        "element_b": DataTypeTag[config.tensor_b.element],
        "layout_b": LayoutTag[config.tensor_b.layout],
        "alignment_b": config.alignment_b,
        "element_c": DataTypeTag[config.tensor_c.element],
        "element_accumulator": DataTypeTag[mi.element_accumulator],
        "opcode_class": OpcodeClassTag[mi.opcode_class],
        "tb_m": config.threadblock[0], "tb_n": config.threadblock[1], "tb_k": config.threadblock[2],
        "warp_m": warp_shape[0], "warp_n": warp_shape[1], "warp_k": warp_shape[2],
        "inst_m": mi.instruction_shape[0], "inst_n": mi.instruction_shape[1], "inst_k": mi.instruction_shape[2],
        "output_op": epilogue.output_op_2x(config.activation, DataTypeTag[config.tensor_c.element],
                                           config.alignment_c, DataTypeTag[mi.element_accumulator]),
        "output_params": epilogue.output_params_2x("OutputOp", "args.alpha", "args.beta", "args.activation_arg",
                                                   config.activation),
        "swizzle": SwizzlingFunctorTag[config.swizzling_functor],
        "stages": config.stages,
        "math_operation": MathOperationTag[mi.math_operation],
        "threads": config.threads,
        # what compress writes
        "metadata_bytes": np.dtype(PATTERNS[config.element].word).itemsize,
        "stored_per_word": PATTERNS[config.element].stored_per_word,
        "arguments_struct": arguments.SM80_GEMM.cpp(),
        "arguments_name": arguments.SM80_GEMM.name,
    })
    return Emitted(source, {config.name: arguments.SM80_GEMM.dtype.itemsize}, ("shared_bytes", "threads"))
