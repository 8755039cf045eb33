"""Emitter for CUTLASS's own sm90 2:4 compressor, so the layout is by definition the one
the sm90 mainloop reads (the same SparseConfig as emit.sm90's GEMM)."""
from __future__ import annotations

import numpy as np
from cutlass_library.library import DataTypeTag

from . import arguments
from .emitted import Emitted
from .sm90 import AFTER_INCLUDES, BEFORE_INCLUDES, sparse_config_decl
from .template import substitute

COMPRESS = arguments.StructLayout("CutlassSparseSm90Compress", (
    ("dense", "void const *", np.uint64),      # [M, K] row-major
    ("values", "void *", np.uint64),           # compressed A, physical layout of SparseConfig
    ("metadata", "void *", np.uint64),
    ("ld_dense", "long long", np.int64),
    ("m", "int", np.int32),
    ("k", "int", np.int32),
))

# Constants of the compressed format the host needs to size buffers and the grid.
COMPRESSOR_CONSTANTS = ("threads", "shared_bytes", "a_align_m", "a_align_k", "e_align_m", "e_align_k",
                        "a_sparsity", "e_sparsity", "chunk_k", "atom_m", "atom_k", "max_align_m", "max_align_k")

COMPRESS_TEMPLATE = """\
// ${name}
// Emitted by cutlass_sparse: CUTLASS's sm90 structured-sparse compressor for ${element}, metadata atom K ${atom_k}.
${before_includes}
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/builders/sm90_sparse_config.inl>
#include <cutlass/transform/kernel/sm90_sparse_gemm_compressor.hpp>
#include <cutlass/util/packed_stride.hpp>
${after_includes}

using namespace cute;
${sparse_config_decl}
using Compressor = cutlass::transform::kernel::SM90StructuredSparseCompressor<
    Shape<int, int, int, int>, ${element}, cutlass::layout::RowMajor, SparseConfig>;

extern "C" __constant__ int ${name}_threads = Compressor::MaxThreadsPerBlock;
extern "C" __constant__ int ${name}_shared_bytes = Compressor::SharedStorageSize;
extern "C" __constant__ int ${name}_a_align_m = Compressor::TensorAAlignmentM;
extern "C" __constant__ int ${name}_a_align_k = Compressor::TensorAAlignmentK;
extern "C" __constant__ int ${name}_e_align_m = Compressor::TensorEAlignmentM;
extern "C" __constant__ int ${name}_e_align_k = Compressor::TensorEAlignmentK;
extern "C" __constant__ int ${name}_a_sparsity = typename SparseConfig::ElementASparsity{};
extern "C" __constant__ int ${name}_e_sparsity = typename SparseConfig::ElementEMmaSparsity{};
extern "C" __constant__ int ${name}_chunk_k = Compressor::LogicalElemsAPerChunk;
extern "C" __constant__ int ${name}_atom_m = typename SparseConfig::TensorEAtomM{};
extern "C" __constant__ int ${name}_atom_k = typename SparseConfig::TensorEAtomK{};
extern "C" __constant__ int ${name}_max_align_m =
    cutlass::const_max(Compressor::TensorEAlignmentM, Compressor::TensorAAlignmentM);
extern "C" __constant__ int ${name}_max_align_k =
    cutlass::const_max(Compressor::TensorEAlignmentK, Compressor::TensorAAlignmentK);

${compress_struct}

extern "C" __global__ void __launch_bounds__(Compressor::MaxThreadsPerBlock)
${name}(${compress_name} const args) {
  extern __shared__ __align__(128) char shared_storage[];
  typename Compressor::Params params{};
  params.problem_shape = make_shape(args.m, 1, args.k, 1);
  params.transform.ptr_A = args.dense;
  params.transform.dA = cutlass::make_cute_packed_stride(typename Compressor::StrideA{}, make_shape(args.m, args.k, 1));
  get<0>(params.transform.dA) = args.ld_dense;
  params.transform.ptr_ACompress = args.values;
  params.transform.ptr_E = args.metadata;
  Compressor::run(params, shared_storage);
}
"""


def emit(config) -> Emitted:
    element = DataTypeTag[config.data_type]
    source = substitute(COMPRESS_TEMPLATE, {
        "name": config.name, "element": element, "atom_k": config.atom_k,
        "sparse_config_decl": sparse_config_decl(element, config.atom_k),
        "compress_struct": COMPRESS.cpp(), "compress_name": COMPRESS.name,
        "before_includes": BEFORE_INCLUDES, "after_includes": AFTER_INCLUDES,
    })
    return Emitted(source, {config.name: COMPRESS.dtype.itemsize}, COMPRESSOR_CONSTANTS)
