"""Emitter for the Ampere-style family: CUTLASS 2.x DefaultSparseGemm + an extern "C" entry."""
from __future__ import annotations

from cutlass_library.library import (
    DataTypeTag,
    LayoutTag,
    MathOperationTag,
    OpcodeClassTag,
    SwizzlingFunctorTag,
)

from . import arguments, epilogue
from .description import SparseGemmConfig
from .emitted import Emitted
from .template import substitute

TEMPLATE = """\
// ${name}
// Emitted by cutlass_sparse: 2:4 sparse GEMM, CUTLASS 2.x (mma.sp), family ${family}.
#include <cutlass/cutlass.h>
#include <cutlass/gemm/gemm.h>
#include <cutlass/gemm/kernel/default_gemm_sparse.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/epilogue/thread/linear_combination_generic.h>
#include <cutlass/epilogue/thread/activation.h>
#include <cuda/std/type_traits>

using Kernel = typename cutlass::gemm::kernel::DefaultSparseGemm<
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
    ${split_k_serial},  // serial split-K
    ${math_operation}>::GemmKernel;

// Metadata as the kernel reads it: the host side must compress to exactly this.
static_assert(sizeof(typename Kernel::ElementE) == 2, "metadata word must be 16-bit");
static_assert(Kernel::kElementsPerElementE == 8, "one metadata word covers 8 stored values");
static_assert(Kernel::kThreadCount == ${threads}, "thread count differs from the description");
extern "C" __constant__ int ${name}_threads = Kernel::kThreadCount;

${arguments_struct}
extern "C" __global__ void __launch_bounds__(Kernel::kThreadCount)
${name}(${arguments_name} const args) {
  using Mma = typename Kernel::Mma;
  using OutputRef = typename Kernel::Epilogue::OutputTileIterator::TensorRef;
  using OutputOp = typename Kernel::Epilogue::OutputOp;
  // Parallel split-K: K slice z writes its own partial tile at z * slice_stride.
  long long const slice = (long long)blockIdx.z * args.slice_stride;
  // Params built per thread from plain values: no host compiler needed to lay them out.
  typename Kernel::Params params(
      {args.m, args.n, args.k},
      {args.grid_m, args.grid_n, args.grid_k},
      {const_cast<${element_a} *>(static_cast<${element_a} const *>(args.a)), typename Mma::IteratorA::Layout(args.lda)},
      {const_cast<${element_b} *>(static_cast<${element_b} const *>(args.b)), typename Mma::IteratorB::Layout(args.ldb)},
      OutputRef(static_cast<${element_c} *>(const_cast<void *>(args.c)) + slice, typename OutputRef::Layout(args.ldc)),
      OutputRef(static_cast<${element_c} *>(args.d) + slice, typename OutputRef::Layout(args.ldd)),
      {const_cast<typename Kernel::ElementE *>(static_cast<typename Kernel::ElementE const *>(args.e)), typename Mma::IteratorE::Layout(args.lde)},
      ${output_params},
      args.semaphore);
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
        raise ValueError(f"emit_sm80 cannot emit family {config.family!r}")
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
                                           config.alignment_c),
        "output_params": epilogue.output_params_2x("OutputOp", "args.alpha", "args.beta", "args.activation_arg",
                                                   config.activation),
        "split_k_serial": "true" if config.split_k_serial else "false",
        "swizzle": SwizzlingFunctorTag[config.swizzling_functor],
        "stages": config.stages,
        "math_operation": MathOperationTag[mi.math_operation],
        "threads": config.threads,
        "arguments_struct": arguments.SM80_GEMM.cpp(),
        "arguments_name": arguments.SM80_GEMM.name,
    })
    return Emitted(source, {config.name: arguments.SM80_GEMM.dtype.itemsize}, ("shared_bytes", "threads"))
