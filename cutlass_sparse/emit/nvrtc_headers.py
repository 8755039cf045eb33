"""Small, checked patches to CUTLASS headers, handed to NVRTC as in-memory headers.

Two host-only steps stand between CUTLASS 3.x's Params construction and NVRTC:
- CuTe builds TMA descriptors with the driver's cuTensorMapEncodeTiled, which it skips
  under NVRTC and leaves the descriptor zeroed. The patch records, in the descriptor's
  128 bytes, exactly what it would have passed (a "recipe", see tma.py); the setup
  kernel later turns each recipe into a real descriptor.
- KernelHardwareInfo's SM-count query is host-only; under NVRTC the patch gives a stub
  (the caller always supplies the SM count).
- The stream-K scheduler computes its workspace sizes only on the host; the patch lets
  the setup entry compute them (they depend on the SM count, which the caller passes).
- Programmatic dependent launch (launch.pdl), two fixes: the ping-pong kernel's idle
  consumer warp group (no tile of its own) signals the next grid at its start, and the
  first signal of any thread triggers its CTA, so a grid of one tile per CTA let the next
  grid launch at once (4096x16x14336 ran 7% slower with PDL than without on the H100;
  with the signal left to the working warp group, 7% faster:
  docs/probe_pdl_h100.log); and the stream-K scheduler's is_last_tile (const) passes a
  member to a non-const reference, which does not compile once GDC is on.
- In-flight wgmma (opt-in, SparseGemmConfig.mma_in_flight): CUTLASS's sparse mainloop
  loads each k-tile's metadata into one register fragment that the wgmma reads, so it
  waits for every batch before the next load (K_PIPE_MMAS = 0: the tensor cores drain
  each k-tile). The patch gives it a second fragment and keeps one batch in flight, as
  the dense mainloop does (K_PIPE_MMAS = 1).
- uint128_t falls back to a breakpoint (a kernel fault) for 128-bit division unless it
  sees GCC on x86; NVRTC has __int128 on the device (--device-int128), so the patch
  turns the native type on. Without it the tile scheduler's FastDivmodU64 trapped for
  every divisor that is not a power of two (seen on the H100: tile counts of 3, 6, 11).

Each patch names the text it replaces; if a CUTLASS upgrade moves that text, building
the headers fails loudly instead of compiling something else.
"""
from __future__ import annotations

import functools

from .. import env

TMA_HEADER = "cute/atom/copy_traits_sm90_tma.hpp"
HW_INFO_HEADER = "cutlass/kernel_hardware_info.h"
UINT128_HEADER = "cutlass/uint128.h"
SCHEDULER_PARAMS_HEADER = "cutlass/gemm/kernel/tile_scheduler_params.h"
PINGPONG_HEADER = "cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_pingpong.hpp"
STREAM_K_HEADER = "cutlass/gemm/kernel/sm90_tile_scheduler_stream_k.hpp"
SPARSE_MAINLOOP_HEADER = "cutlass/gemm/collective/sm90_sparse_mma_tma_gmma_ss_warpspecialized.hpp"
COOPERATIVE_HEADER = "cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp"

# Recipe layout inside the 128-byte descriptor (mirrored by tma.RECIPE_DTYPE).
RECIPE_HOOK = r"""
namespace cutlass_sparse_tma {
// "CSTMARCP": marks a descriptor slot that still holds a recipe, not an encoded map.
static constexpr unsigned long long kMagic = 0x50435241544D5343ull;
// The setup launch that writes a recipe (its argument's nonce, set before CuTe runs): a
// setup tells its own recipes from stale ones that an earlier setup left in local memory,
// which Params' padding can hold. In shared memory, so that setups of one module running at
// once on two streams each keep their own (the setup is one thread of one block); a
// `__device__` variable was one per module, and two setups overwrote each other's nonce.
__shared__ unsigned int recipe_nonce;
template <class T> CUTE_HOST_DEVICE constexpr unsigned char data_type() {
  // CUtensorMapDataType values (cuda.h), for the types CUTLASS's sparse kernels move.
  if constexpr (cute::is_same_v<T, uint8_t> || cute::is_same_v<T, int8_t> ||
                cute::is_same_v<T, cute::float_e4m3_t> || cute::is_same_v<T, cute::float_e5m2_t>) { return 0; }
  else if constexpr (cute::is_same_v<T, uint16_t>) { return 1; }
  else if constexpr (cute::is_same_v<T, uint32_t>) { return 2; }
  else if constexpr (cute::is_same_v<T, int32_t>) { return 3; }
  else if constexpr (cute::is_same_v<T, uint64_t>) { return 4; }
  else if constexpr (cute::is_same_v<T, int64_t>) { return 5; }
  else if constexpr (cute::is_same_v<T, cute::half_t>) { return 6; }
  else if constexpr (cute::is_same_v<T, float>) { return 7; }
  else if constexpr (cute::is_same_v<T, double>) { return 8; }
  else if constexpr (cute::is_same_v<T, cute::bfloat16_t>) { return 9; }
  else if constexpr (cute::is_same_v<T, cute::tfloat32_t>) { return 11; }
  else { return 255; }
}
template <class Desc>
CUTE_HOST_DEVICE void record(Desc* desc, unsigned char dtype, int rank, void* address,
                             cute::array<uint64_t, 5> const& dims, cute::array<uint64_t, 5> const& strides,
                             cute::array<uint32_t, 5> const& box, cute::array<uint32_t, 5> const& elem,
                             unsigned char swizzle_bits, unsigned char swizzle_base) {
  unsigned char* raw = reinterpret_cast<unsigned char*>(desc);
  for (int i = 0; i < 128; ++i) raw[i] = 0;
  unsigned long long* q = reinterpret_cast<unsigned long long*>(raw);
  q[0] = kMagic;
  q[1] = reinterpret_cast<unsigned long long>(address);
  for (int i = 0; i < 4; ++i) q[2 + i] = strides[i + 1];      // byte strides of dims 1..4
  uint32_t* w = reinterpret_cast<uint32_t*>(raw + 48);
  for (int i = 0; i < 5; ++i) w[i] = uint32_t(dims[i]);
  for (int i = 0; i < 5; ++i) w[5 + i] = box[i];
  for (int i = 0; i < 5; ++i) w[10 + i] = elem[i];
  raw[108] = dtype;
  raw[109] = (unsigned char)rank;
  raw[110] = swizzle_bits;
  raw[111] = swizzle_base;
  reinterpret_cast<uint32_t*>(raw + 112)[0] = recipe_nonce;
}
}  // namespace cutlass_sparse_tma
"""

_PATCHES = {
    TMA_HEADER: [
        ("namespace cute\n{\n\ntemplate <class GmemTmaBasisStrides_, class TmaGmemBasis_, class TmaSwizzle_>",
         RECIPE_HOOK + "\nnamespace cute\n{\n\ntemplate <class GmemTmaBasisStrides_, class TmaGmemBasis_, class TmaSwizzle_>"),
        ("  #endif // (__CUDACC_VER_MAJOR__ >= 12) && !defined(__CUDACC_RTC__)\n  auto recast_ratio",
         "  #else\n"
         "    ::cutlass_sparse_tma::record(&tma_desc, ::cutlass_sparse_tma::data_type<TmaInternalType>(), tma_dim,\n"
         "        gmem_address, gmem_prob_shape, gmem_prob_stride, smem_box_shape, smem_box_stride,\n"
         "        (unsigned char)get_tma_swizzle_bits(swizzle), (unsigned char)get_tma_swizzle_base(swizzle));\n"
         "  #endif // (__CUDACC_VER_MAJOR__ >= 12) && !defined(__CUDACC_RTC__)\n  auto recast_ratio"),
    ],
    UINT128_HEADER: [
        ("/// Optionally enable GCC's built-in type\n#if ",
         "/// Optionally enable GCC's built-in type\n#if defined(__CUDACC_RTC__)\n"
         "#define CUTLASS_UINT128_NATIVE  // cutlass_sparse: NVRTC with --device-int128\n#elif "),
    ],
    # The stream-K scheduler sizes its workspace only on the host (it would query the SM
    # count, which the caller supplies here); the setup entry needs those sizes.
    SCHEDULER_PARAMS_HEADER: [
        ("  #if !defined(__CUDACC_RTC__)\n  static void\n  get_workspace_component_sizes(",
         "  #if 1  // cutlass_sparse: also under NVRTC\n  static void\n  get_workspace_component_sizes("),
        ("    #if !defined(__CUDACC_RTC__)\n      get_workspace_component_sizes(",
         "    #if 1  // cutlass_sparse: also under NVRTC\n      get_workspace_component_sizes("),
    ],
    # PDL: an idle consumer warp group exits without signalling the next grid (the one with
    # a tile signals after its last mainloop).
    PINGPONG_HEADER: [
        ("        cutlass::arch::launch_dependent_grids();\n\n        return;\n",
         "        return;  // cutlass_sparse: no launch_dependents from an idle warp group\n"),
    ],
    # PDL: is_last_tile is const; its query takes the start unit by reference.
    STREAM_K_HEADER: [
        ("    return not get_current_work_for_linear_idx(\n        unit_iter_start_,\n",
         "    uint32_t unit_iter_start = unit_iter_start_;  // cutlass_sparse: a copy (this is const)\n"
         "    return not get_current_work_for_linear_idx(\n        unit_iter_start,\n"),
    ],
    HW_INFO_HEADER: [
        ("    return {device_id, sm_count, max_active_clusters};\n  }\n#endif\n};",
         "    return {device_id, sm_count, max_active_clusters};\n  }\n#else\n"
         "  // cutlass_sparse (NVRTC): Params are built on the device and the caller supplies sm_count.\n"
         "  CUTLASS_HOST_DEVICE static int query_device_multiprocessor_count(int = 0) { return 0; }\n"
         "#endif\n};"),
    ],
}

# The sparse mainloop's consumer loop with one wgmma batch left in flight (see the module's
# docstring); replaces the text from the metadata fragment's retile to mma_tail.
# Known and left: the C++ comment on the first k-tile says mma_tail releases its stage, true
# only when it is the last k-tile (else the next retire_previous does). The text is part of
# every in-flight kernel's cache key: mend it with the next real change to this patch.
IN_FLIGHT_MAINLOOP = r"""    Tensor tErE  = smem_thr_copy_E.retile_D(tCrE);                      // (ECPY,ECPY_M,ECPY_K)
    // cutlass_sparse: a second metadata fragment. A k-tile's wgmma reads its metadata from
    // registers, so with one fragment the next k-tile's metadata load must wait for the whole
    // batch (CUTLASS: K_PIPE_MMAS = 0, the tensor cores drain every k-tile). With two, one
    // batch stays in flight while the next k-tile's metadata loads into the other fragment.
    Tensor tCrE_next = make_fragment_like<ElementEMma>(tCsE);
    Tensor tErE_next = smem_thr_copy_E.retile_D(tCrE_next);

    static_assert(K_PIPE_MMAS == 1 && K_PIPE_MMAS < K_PIPE_MAX, "one wgmma batch in flight");

    // Releases the stage of the k-tile before the one just issued, once at most one batch
    // (the one just issued) is left in flight.
    PipelineState smem_pipe_release = smem_pipe_read;

    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    warpgroup_fence_operand(accum);

    auto issue_k_tile = [&](auto& tErE_k) {
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      int read_stage = smem_pipe_read.index();
      copy(smem_tiled_copy_E, tEsE(_,_,_,read_stage), tErE_k);
      warpgroup_fence_operand(accum);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        cute::gemm(tiled_mma, make_zip_tensor(tCrA(_,_,k_block,read_stage), tErE_k(_,_,k_block)), tCrB(_,_,k_block,read_stage), accum);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      ++smem_pipe_read;
    };
    auto retire_previous = [&]() {
      warpgroup_wait<K_PIPE_MMAS>();
      warpgroup_fence_operand(accum);
      pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;
    };

    if (k_tile_count > 0) {
      issue_k_tile(tErE);           // left in flight: mma_tail waits for it and releases its stage
      --k_tile_count;
    }
    // Two k-tiles a trip, one per fragment (registers cannot be indexed at run time).
    CUTLASS_PRAGMA_NO_UNROLL
    for ( ; k_tile_count > 1; k_tile_count -= 2) {
      issue_k_tile(tErE_next);
      retire_previous();
      issue_k_tile(tErE);
      retire_previous();
    }
    if (k_tile_count > 0) {
      issue_k_tile(tErE_next);
      retire_previous();
    }

    warpgroup_fence_operand(accum);
  }

"""

# Patches for configurations with mma_in_flight only: other kernels keep their headers
# (and so their cache keys).
_IN_FLIGHT_PATCHES = {
    SPARSE_MAINLOOP_HEADER: [
        ("  static constexpr int K_PIPE_MMAS = 0;", "  static constexpr int K_PIPE_MMAS = 1;  // cutlass_sparse: in flight"),
        (("    Tensor tErE  = smem_thr_copy_E.retile_D(tCrE);",
          "  /// Perform a Consumer Epilogue to release all buffers"), IN_FLIGHT_MAINLOOP),
    ],
}


# Stream-K kernels only (their cache keys alone change): the stream-K scheduler keeps a copy
# of its Params (about 400 bytes of fast divisors) as a member, which the compiler holds in
# registers across the whole kernel; the producer warp group, at 40 registers, spills them
# (nvdisasm: 431 spill instructions in the producer, none in the persistent kernel; Nsight
# Compute: 525k local-memory requests at 4096^3, which miss the L1 that the mainloop's
# shared memory leaves). A pointer to the kernel's Params instead: each use reads them.
_STREAM_K_PATCHES = {
    STREAM_K_HEADER: [
        ("  Params scheduler_params;\n",
         "  Params const* scheduler_params = nullptr;  // cutlass_sparse: by pointer (see nvrtc_headers)\n"),
        ("scheduler_params(params_), block_id_in_cluster_", "scheduler_params(&params_), block_id_in_cluster_"),
        ("current_work_linear_idx_, block_id_in_cluster_, scheduler_params);",
         "current_work_linear_idx_, block_id_in_cluster_, *scheduler_params);"),
        ("block_id_in_cluster_, work_tile_info, scheduler_params);",
         "block_id_in_cluster_, work_tile_info, *scheduler_params);"),
        ("        block_id_in_cluster_,\n        scheduler_params\n    ).is_valid();",
         "        block_id_in_cluster_,\n        *scheduler_params\n    ).is_valid();"),
    ],
}


class HeaderPatchError(RuntimeError):
    pass


def _register_split(load: int, consumer: int) -> dict:
    """The cooperative kernel's setmaxnreg split (SparseGemmConfig.load_registers): only the
    kernels that ask for one get the patched header (and so a new cache key)."""
    return {COOPERATIVE_HEADER: [
        ("LoadRegisterRequirement = !HeavyRegisterPressure ? 40 : 24;",
         f"LoadRegisterRequirement = !HeavyRegisterPressure ? {load} : 24;  // cutlass_sparse"),
        ("MmaRegisterRequirement = !HeavyRegisterPressure ? 232 : 240;",
         f"MmaRegisterRequirement = !HeavyRegisterPressure ? {consumer} : 240;  // cutlass_sparse"),
    ]}


@functools.cache
def patched_headers(mma_in_flight: bool = False, registers: tuple[int, int] | None = None,
                    stream_k: bool = False) -> tuple[tuple[str, str], ...]:
    """(include name, patched text) for every patched CUTLASS header; mma_in_flight adds the
    sparse mainloop's (SparseGemmConfig.mma_in_flight), registers (producer, consumer) the
    cooperative kernel's register split (SparseGemmConfig.load_registers), stream_k the
    stream-K scheduler's Params by pointer."""
    wanted = [_IN_FLIGHT_PATCHES if mma_in_flight else {}, _register_split(*registers) if registers else {},
              _STREAM_K_PATCHES if stream_k else {}]
    extra: dict = {}
    for patch_set in wanted:
        for include, patches in patch_set.items():
            extra[include] = extra.get(include, []) + patches
    patch_sets = {include: _PATCHES.get(include, []) + extra.get(include, []) for include in {**_PATCHES, **extra}}
    return tuple((include, _patched(include, patches)) for include, patches in patch_sets.items())


def _patched(include: str, patches) -> str:
    """The header with each (old, new) applied; an old of two strings replaces the text from
    the first up to the second. Each piece of old text must occur exactly once."""
    text = (env.cutlass_root() / "include" / include).read_text()
    for old, new in patches:
        for piece in (old if isinstance(old, tuple) else (old,)):
            if text.count(piece) != 1:
                raise HeaderPatchError(
                    f"cannot patch {include}: expected text found {text.count(piece)} times "
                    f"(CUTLASS version changed?): {piece[:60]!r}")
        if isinstance(old, tuple):
            start, end = text.index(old[0]), text.index(old[1])
            if end <= start:
                raise HeaderPatchError(f"cannot patch {include}: {old[1][:60]!r} no longer follows {old[0][:60]!r}")
            text = text[:start] + new + text[end:]
        else:
            text = text.replace(old, new)
    return text
