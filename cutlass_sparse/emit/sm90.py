"""Emitter for the Hopper family: CUTLASS 3.x sparse GEMM (wgmma.sp + TMA, sm90a).

Three entries per kernel:
- `<name>_setup` (one thread) builds the kernel's Params on the device from a small
  argument struct, with CUTLASS's own to_underlying_arguments, into a global buffer.
  Under NVRTC, CuTe cannot encode TMA descriptors; the patched CuTe header
  (nvrtc_headers.py) leaves a recipe in each descriptor slot instead, which this entry
  turns into a real descriptor: it copies a host-encoded template for that slot (same
  rank, type, box and swizzle, see tma.py) and replaces address, sizes and strides
  with tensormap.replace. It also reports the grid, the workspace size and whether
  CUTLASS can implement the problem.
- `<name>` runs GemmUniversal on Params passed by value (a host copy of the setup's
  Params, patched with the call's pointers: launch.sm90_params) or, where the second
  argument is not null, on the Params in the setup's buffer (a shape's first calls).
- constants the host reads from the cubin: shared_bytes, threads, params_bytes.
"""
from __future__ import annotations

import numpy as np
from cutlass_library.library import DataTypeTag, EpilogueScheduleTag, KernelScheduleTag, LayoutTag

from . import arguments, epilogue, nvrtc_headers, sm90_lean_mainloop, sm90_scheduler, sm90_staged_epilogue
from ..describe.description import SparseGemmConfig
from .emitted import Emitted
from .template import substitute

SETUP = arguments.StructLayout("CutlassSparseSm90Setup", (
    ("a", "void const *", np.uint64),
    ("e", "void const *", np.uint64),
    ("b", "void const *", np.uint64),
    ("c", "void const *", np.uint64),
    ("d", "void *", np.uint64),
    ("params_out", "void *", np.uint64),        # sizeof(Params) bytes, 64-byte aligned
    ("templates", "void const *", np.uint64),   # 128 bytes per TMA slot, or null: leave recipes
    ("recipes_out", "void *", np.uint64),       # 128 bytes per TMA slot, or null
    ("info_out", "long long *", np.uint64),     # INFO_FIELDS, or null: report nothing
    ("workspace", "void *", np.uint64),
    ("ldb", "long long", np.int64),
    ("ldc", "long long", np.int64),
    ("ldd", "long long", np.int64),
    ("m", "int", np.int32),
    ("n", "int", np.int32),
    ("k", "int", np.int32),
    ("sm_count", "int", np.int32),
    ("swizzle", "int", np.int32),               # tile scheduler: max swizzle size (1, 2, 4, 8)
    ("raster", "int", np.int32),                # 0 heuristic, 1 along M, 2 along N
    ("splits", "int", np.int32),                # stream-K scheduler: K slices (split-K) when > 1
    ("decomposition", "int", np.int32),         # stream-K scheduler: DECOMPOSITIONS value
    ("alpha", "float", np.float32),
    ("beta", "float", np.float32),
    ("activation_arg", "float", np.float32),   # leaky_relu's negative slope
    ("nonce", "unsigned int", np.uint32),       # this launch's, in the recipes it writes (never 0)
))
INFO_FIELDS = ("grid_x", "grid_y", "grid_z", "workspace_bytes", "can_implement", "tma_slots",
               "barrier_offset", "barrier_bytes")
# CUTLASS's DecompositionMode, in declaration order.
DECOMPOSITIONS = {"heuristic": 0, "data_parallel": 1, "split_k": 2, "stream_k": 3}

# NVRTC has no C++ standard library; CUTLASS 3.x names a few std:: traits (cuda::std has them).
BEFORE_INCLUDES = """\
#include <cuda/std/type_traits>
#include <cuda/std/cstdint>
namespace std {
using cuda::std::is_const_v;
using cuda::std::is_integral_v;
using cuda::std::is_pointer_v;
using cuda::std::void_t;
}"""

# `const auto [m, n, k, l] = shape` needs tuple_size of a const cute::tuple, which the
# standard library would provide generically.
AFTER_INCLUDES = """\
namespace std {
template <class... T>
struct tuple_size<const cute::tuple<T...>> : tuple_size<cute::tuple<T...>> {};
template <decltype(sizeof(0)) I, class... T>
struct tuple_element<I, const cute::tuple<T...>> {
  using type = const typename tuple_element<I, cute::tuple<T...>>::type;
};
}"""

BUILT_EPILOGUE = """\
using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassSparseTensorOp, TileShape, ClusterShape,
    ${epilogue_tile}, ${accumulator}, ${compute},
    ${source_c}, ${layout_c}, ${alignment_c},
    ElementC, ${layout_c}, ${alignment_c},
    ${epilogue_schedule}, ${fusion}>::CollectiveOp;"""

BUILT_MAINLOOP = """\
using ${mainloop_type} = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassSparseTensorOp,
    ElementA, cutlass::layout::RowMajor, ${alignment_a},
    ElementB, ${layout_b}, ${alignment_b},
    ${accumulator}, TileShape, ClusterShape,
    ${stages},
    ${kernel_schedule}>::CollectiveOp;"""

TEMPLATE = """\
// ${name}
// Emitted by cutlass_sparse: 2:4 sparse GEMM, CUTLASS 3.x (wgmma.sp + TMA), family sm90.
${gdc}${before_includes}
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

${after_includes}
using namespace cute;${fusion_decl}

using ElementA = ${element};
using ElementB = ${element_b};
using ElementC = ${element_c};
using TileShape = Shape<_${tm}, _${tn}, _${tk}>;
using ClusterShape = Shape<_${cm}, _${cn}, _${ck}>;

${collective_epilogue}${stage_search}

${collective_mainloop}

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue, ${tile_scheduler}>;
using Params = typename GemmKernel::Params;
using SparseConfig = typename CollectiveMainloop::SparseConfig;
namespace expected { ${sparse_config_decl} }
static_assert(cute::is_same_v<SparseConfig, expected::SparseConfig>,
              "this tile reads a different sparse layout than the sm90 compressor writes (metadata atom K)");

extern "C" __constant__ int ${name}_shared_bytes = int(GemmKernel::SharedStorageSize);
extern "C" __constant__ int ${name}_threads = int(GemmKernel::MaxThreadsPerBlock);
extern "C" __constant__ int ${name}_params_bytes = int(sizeof(Params));

${setup_struct}

// A leading-dimension stride of a CuTe (rows, cols, batch) stride with one static unit mode.
template <class Stride>
CUTE_HOST_DEVICE Stride leading(long long ld) {
  Stride stride{};
  if constexpr (cute::is_static<cute::remove_cvref_t<decltype(get<0>(stride))>>::value) {
    get<1>(stride) = ld;
  } else {
    get<0>(stride) = ld;
  }
  return stride;
}

// Turn each recipe slot into a TMA descriptor: template copy + tensormap.replace. A slot is
// a recipe of this launch (its nonce): Params' padding may hold an earlier setup's.
__device__ int encode_tma_slots(unsigned char* params, int size, unsigned char const* templates,
                                unsigned char* recipes_out, unsigned int nonce) {
  int slot = 0;
  for (int offset = 0; offset + 128 <= size; offset += 64) {
    unsigned long long const* q = reinterpret_cast<unsigned long long const*>(params + offset);
    if (q[0] != ::cutlass_sparse_tma::kMagic ||
        reinterpret_cast<uint32_t const*>(params + offset + 112)[0] != nonce) continue;
    unsigned char recipe[128];
    for (int i = 0; i < 128; ++i) recipe[i] = params[offset + i];
    if (recipes_out != nullptr) {
      for (int i = 0; i < 128; ++i) recipes_out[slot * 128 + i] = recipe[i];
    }
    if (templates != nullptr) {
      unsigned long long const* rq = reinterpret_cast<unsigned long long const*>(recipe);
      uint32_t const* rw = reinterpret_cast<uint32_t const*>(recipe + 48);
      int rank = recipe[109];
      for (int i = 0; i < 128; ++i) params[offset + i] = templates[slot * 128 + i];
      unsigned long long desc = reinterpret_cast<unsigned long long>(params + offset);
      asm volatile("tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;" :: "l"(desc), "l"(rq[1]) : "memory");
      if (rank > 0) asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 0, %1;" :: "l"(desc), "r"(rw[0]) : "memory");
      if (rank > 1) asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 1, %1;" :: "l"(desc), "r"(rw[1]) : "memory");
      if (rank > 2) asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 2, %1;" :: "l"(desc), "r"(rw[2]) : "memory");
      if (rank > 3) asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 3, %1;" :: "l"(desc), "r"(rw[3]) : "memory");
      if (rank > 4) asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 4, %1;" :: "l"(desc), "r"(rw[4]) : "memory");
      if (rank > 1) asm volatile("tensormap.replace.tile.global_stride.global.b1024.b64 [%0], 0, %1;" :: "l"(desc), "l"(rq[2]) : "memory");
      if (rank > 2) asm volatile("tensormap.replace.tile.global_stride.global.b1024.b64 [%0], 1, %1;" :: "l"(desc), "l"(rq[3]) : "memory");
      if (rank > 3) asm volatile("tensormap.replace.tile.global_stride.global.b1024.b64 [%0], 2, %1;" :: "l"(desc), "l"(rq[4]) : "memory");
      if (rank > 4) asm volatile("tensormap.replace.tile.global_stride.global.b1024.b64 [%0], 3, %1;" :: "l"(desc), "l"(rq[5]) : "memory");
    }
    ++slot;
    offset += 64;  // a descriptor is 128 bytes
  }
  asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory");
  return slot;
}

extern "C" __global__ void ${name}_setup(${setup_name} const args) {
  ::cutlass_sparse_tma::recipe_nonce = args.nonce;
  auto problem = make_shape(args.m, args.n, args.k, 1);
  cutlass::KernelHardwareInfo hw_info;
  hw_info.device_id = 0;
  hw_info.sm_count = args.sm_count;
  typename GemmKernel::Arguments arguments{
      cutlass::gemm::GemmUniversalMode::kGemm,
      problem,
      {static_cast<ElementA const *>(args.a), SparseConfig::fill_layoutA(problem),
       static_cast<ElementB const *>(args.b), leading<typename GemmKernel::StrideB>(args.ldb),
       static_cast<typename CollectiveMainloop::ElementE const *>(args.e), SparseConfig::fill_layoutE(problem)},
      {${thread_init},
       static_cast<ElementC const *>(args.c), leading<typename GemmKernel::StrideC>(args.ldc),
       static_cast<ElementC *>(args.d), leading<typename GemmKernel::StrideD>(args.ldd)},
      hw_info};
  arguments.scheduler.max_swizzle_size = args.swizzle;
  arguments.scheduler.raster_order = static_cast<decltype(arguments.scheduler.raster_order)>(args.raster);
${scheduler_arguments}
${set_activation_arg}
  Params params = GemmKernel::to_underlying_arguments(arguments, args.workspace);
  unsigned char* out = static_cast<unsigned char *>(args.params_out);
  unsigned char const* raw = reinterpret_cast<unsigned char const *>(&params);
  for (int i = 0; i < int(sizeof(Params)); ++i) out[i] = raw[i];
  int slots = encode_tma_slots(out, int(sizeof(Params)), static_cast<unsigned char const *>(args.templates),
                               static_cast<unsigned char *>(args.recipes_out), args.nonce);
  if (args.info_out == nullptr) return;   // a repeat: the host knows all of this already
  dim3 grid = GemmKernel::get_grid_shape(params);
  args.info_out[0] = grid.x;
  args.info_out[1] = grid.y;
  args.info_out[2] = grid.z;
  args.info_out[3] = (long long)GemmKernel::get_workspace_size(arguments);
  args.info_out[4] = GemmKernel::can_implement(arguments) ? 1 : 0;
  args.info_out[5] = slots;
  long long barrier_offset = 0, barrier_bytes = 0;
${barrier_region}
  args.info_out[6] = barrier_offset;
  args.info_out[7] = barrier_bytes;
}

extern "C" __global__ void
__launch_bounds__(GemmKernel::MaxThreadsPerBlock, GemmKernel::MinBlocksPerMultiprocessor)
__cluster_dims__(${cm}, ${cn}, ${ck})
${name}(__grid_constant__ Params const params, Params const *from_device) {
  extern __shared__ __align__(128) char shared_storage[];
  GemmKernel op;
  // Params come by value (a host copy patched with the call's pointers: no device buffer,
  // no copy, safe to capture in a graph) or, before the host has a copy of this shape's,
  // from the buffer the setup entry wrote. One body serves both: one instantiation.
  op(from_device != nullptr ? *from_device : params, shared_storage);
}
"""


# Kernels without C, stages automatic: CUTLASS's count (StageCountAutoCarveout) reserves
# more than such a kernel needs (fp8 128x256x128 with bf16 D got 4 stages in 185 KB; 5 fit
# in the 227 KB exactly and ran 3% faster at 8192^3, docs/sweep_void_c_h100.log). So take
# one stage more wherever the whole kernel's shared memory still fits.
AUTO_STAGES = ("cutlass::gemm::collective::StageCountAutoCarveout<"
               "static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>")
STAGE_SEARCH = """

template <class StageCount>
using MainloopWith = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassSparseTensorOp,
    ElementA, cutlass::layout::RowMajor, ${alignment_a},
    ElementB, ${layout_b}, ${alignment_b},
    ${accumulator}, TileShape, ClusterShape,
    StageCount,
    ${kernel_schedule}>::CollectiveOp;
constexpr int AutoStages = MainloopWith<cutlass::gemm::collective::StageCountAutoCarveout<
    static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>>::DispatchPolicy::Stages;
constexpr bool OneMoreStageFits = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, MainloopWith<cutlass::gemm::collective::StageCount<AutoStages + 1>>,
    CollectiveEpilogue, ${tile_scheduler}>::SharedStorageSize <= cutlass::gemm::collective::detail::sm90_smem_capacity_bytes;"""
SEARCHED_STAGES = "cutlass::gemm::collective::StageCount<OneMoreStageFits ? AutoStages + 1 : AutoStages>"


GDC = """\
// Programmatic dependent launch: the kernel waits on the previous grid (griddepcontrol.wait)
// before its first global access and lets the next start after its last mainloop, so a
// GEMM's prologue overlaps the previous GEMM's epilogue (launch.pdl).
#define CUTLASS_ENABLE_GDC_FOR_SM90
"""


def emit(config: SparseGemmConfig) -> Emitted:
    if config.family != "sm90":
        raise ValueError(f"the sm90 emitter cannot emit family {config.family!r}")
    kernel_schedule, epilogue_schedule = config.schedules
    setup = setup_layout(config)
    scheduler = sm90_scheduler.snippets(config)
    mainloop = {"alignment_a": config.alignment_a, "alignment_b": config.alignment_b,
                "layout_b": LayoutTag[config.tensor_b.layout],
                "accumulator": DataTypeTag[config.math_instruction.element_accumulator],
                "kernel_schedule": KernelScheduleTag[kernel_schedule]}
    stage_search = ""
    if config.stages:
        stages = f"cutlass::gemm::collective::StageCount<{config.stages}>"
    elif config.reads_c:
        stages = AUTO_STAGES
    else:
        stage_search = substitute(STAGE_SEARCH, {**mainloop, "tile_scheduler": scheduler["tile_scheduler"]})
        stages = SEARCHED_STAGES
    snippets = _epilogue_snippets(config, setup)
    fusion = snippets.pop("fusion")   # CUTLASS's epilogue's; the rest goes into the setup entry
    source = substitute(TEMPLATE, {
        "name": config.name,
        "collective_epilogue": _collective_epilogue(config, mainloop["accumulator"], epilogue_schedule, fusion),
        "gdc": GDC,
        "element": DataTypeTag[config.tensor_a.element],
        "element_b": DataTypeTag[config.tensor_b.element],
        "element_c": DataTypeTag[config.tensor_c.element],
        "tm": config.threadblock[0], "tn": config.threadblock[1], "tk": config.threadblock[2],
        "cm": config.cluster[0], "cn": config.cluster[1], "ck": config.cluster[2],
        "collective_mainloop": _collective_mainloop(config, mainloop, stages),
        "stage_search": stage_search,
        **scheduler,
        **snippets,
        "setup_struct": setup.cpp(),
        "setup_name": setup.name,
        "sparse_config_decl": sparse_config_decl(DataTypeTag[config.tensor_a.element], config.atom_k),
        "before_includes": BEFORE_INCLUDES, "after_includes": AFTER_INCLUDES,
    })
    return Emitted(source, {config.name: ("params_bytes", 8), f"{config.name}_setup": setup.dtype.itemsize},
                   ("shared_bytes", "threads", "params_bytes"), nvrtc_headers.patched_headers(
                       config.mma_in_flight, (config.load_registers, config.consumer_registers) if config.load_registers else None,
                       config.tile_scheduler == "streamk"),
                   ("--device-int128",))


def _collective_mainloop(config: SparseGemmConfig, mainloop: dict, stages: str) -> str:
    """The source defining CollectiveMainloop: CUTLASS's builder's, or that wrapped in our own
    producer and consumers (emit.sm90_lean_mainloop)."""
    if not config.takes_lean_mainloop:
        return substitute(BUILT_MAINLOOP, {**mainloop, "stages": stages, "mainloop_type": "CollectiveMainloop"})
    built = substitute(BUILT_MAINLOOP, {**mainloop, "stages": stages, "mainloop_type": "BuiltMainloop"})
    return f"{sm90_lean_mainloop.LEAN_MAINLOOP}\n{built}\n{sm90_lean_mainloop.wrapped(config, 'BuiltMainloop')}"


def _collective_epilogue(config: SparseGemmConfig, accumulator: str, epilogue_schedule, fusion: str) -> str:
    """The source defining CollectiveEpilogue: the staged store of our own, or CUTLASS's
    builder's epilogue."""
    if config.stores_staged:
        return sm90_staged_epilogue.collective(config)
    return substitute(BUILT_EPILOGUE, {
        "accumulator": accumulator,
        "compute": epilogue.compute_type(config.element_out),
        "layout_c": LayoutTag[config.tensor_c.layout],
        # C's element as the epilogue reads it; void: no C buffers in shared memory, which
        # leaves room for one more mainloop stage (beta = 0 kernels). The direct store keeps
        # no buffers either way; its builder wants the fusion's C type here, and the fusion
        # names D's (it could name void in both: the kernels measured were built this way,
        # and beta = 0 skips C at run time).
        "source_c": "ElementC" if config.reads_c or config.stores_directly else "void",
        "alignment_c": config.alignment_c,
        "epilogue_tile": ("cutlass::epilogue::collective::EpilogueTileAuto" if not config.epilogue_tile else
                          "Shape<" + ", ".join(f"_{e}" for e in config.epilogue_tile) + ">"),
        "epilogue_schedule": EpilogueScheduleTag[epilogue_schedule],
        "fusion": fusion})


# Scaled kernels (issue 15: quantized weights) read two more pointers: float32 scales, one
# per row of D (the weight's output features) and one per column (tokens); either may be
# null (scale 1). Other kernels keep SETUP, so their sources and cached binaries stay.
SETUP_SCALED = arguments.StructLayout("CutlassSparseSm90ScaledSetup", SETUP.fields + (
    ("row_scales", "void const *", np.uint64),
    ("column_scales", "void const *", np.uint64),
    ("row_bias", "void const *", np.uint64),
    ("out_multiplier", "float", np.float32),   # 1 / out_scale, after the activation
    ("reserved_scaled", "int", np.int32),
))


def setup_layout(config: SparseGemmConfig) -> arguments.StructLayout:
    """The setup entry's argument struct for a kernel."""
    return SETUP_SCALED if config.scales != "none" else SETUP


def _epilogue_snippets(config: SparseGemmConfig, setup: arguments.StructLayout) -> dict:
    element_d = DataTypeTag[config.tensor_c.element]
    if config.scales == "none":
        return {"fusion_decl": "", "fusion": epilogue.fusion_3x(config.activation, element_d,
                                                               epilogue.compute_type(config.element_out)),
                "thread_init": "{args.alpha, args.beta}",
                "set_activation_arg": epilogue.set_activation_arg_3x(config.activation, "arguments",
                                                                     "args.activation_arg")}
    return {"fusion_decl": "\n" + epilogue.scaled_fusion_3x(config.activation, element_d),
            "fusion": epilogue.SCALED_FUSION, "thread_init": "{}",
            "set_activation_arg": epilogue.set_scales_3x("arguments", "args")}


def sparse_config_decl(element: str, atom_k: int) -> str:
    """The Sm90GemmSparseConfig that both the compressor and the GEMM mainloop must use.
    CUTLASS's builder derives its metadata atom from the tile: atom K = min(tile K, 128)."""
    return (f"using SparseConfig = cutlass::Sm90GemmSparseConfig<cute::sparse_elem<2, {element}>, "
            f"cute::SM90::GMMA::Major::K, cute::sparse_elem<8, uint8_t>, cute::C<{atom_k}>>;")
