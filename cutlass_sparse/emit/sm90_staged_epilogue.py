"""Our own sm90 epilogue for kernels without C: D = alpha * accumulators through shared memory.

CUTLASS's TMA epilogue (its shared-memory pipeline, TMA store and fusion visitors) is about
40% of an sm90 GEMM's compile time and memory (docs/compile_time.md, sessions 24 and 38);
its register-to-global epilogue compiles as fast but stores 4 bytes per thread and row and
lost 13-26% at the large tiles. This one writes each column chunk of the tile into shared
memory from the wgmma fragments, then stores it in 16-byte vectors along D's contiguous
extent, so each warp writes whole 128-byte lines. It plugs into CUTLASS's warp-specialized
kernels through their adapter for epilogues without TMA (Sm90TmaWarpSpecializedAdapter).
"""
from __future__ import annotations

from cutlass_library.library import DataTypeTag, LayoutTag

from ..describe.description import SparseGemmConfig

# Shared memory the two chunk buffers may take, their padding aside: about the TMA
# epilogue's (its D buffers), so the mainloop keeps its stages.
CHUNK_BYTES = 16384

SOURCE = r"""
namespace cutlass_sparse {

// D = alpha * accumulators, staged through shared memory one column chunk at a time so that
// each warp writes whole 128-byte lines of D. (A wgmma accumulator fragment holds two adjacent
// columns of 8-row groups: stored straight from registers, each warp's store covers 8 rows x
// 16 bytes.) Compiles in a fraction of CUTLASS's TMA epilogue; no C, no fusion.
template <class ElementD_, class LayoutD_, class TileShape_, int AlignmentD, int ChunkN>
class StagedEpilogue {
public:
  using ElementD = ElementD_;
  using ElementC = ElementD_;   // named by the kernel; nothing reads C
  using ElementAccumulator = float;
  using StrideD = cutlass::detail::TagToStrideC_t<LayoutD_>;
  using StrideC = StrideD;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;

  static constexpr bool RowMajorD = cute::is_same_v<LayoutD_, cutlass::layout::RowMajor>;
  static constexpr int TileM = cute::size<0>(TileShape_{});
  static constexpr int TileN = cute::size<1>(TileShape_{});
  static_assert(TileN % ChunkN == 0 && ChunkN % 8 == 0, "chunks of whole 8-column fragment groups");
  // The chunk in shared memory: lines along D's contiguous extent, padded by 8 elements so
  // that the fragment writes of one warp (8 rows x 4 threads x a column pair) fall in
  // distinct banks.
  static constexpr int Inner = RowMajorD ? ChunkN : TileM;
  static constexpr int Outer = RowMajorD ? TileM : ChunkN;
  static constexpr int Pad = 8;
  static constexpr int Pitch = Inner + Pad;
  static constexpr int Vector = (AlignmentD * int(sizeof(ElementD)) >= 16) ? 16 / int(sizeof(ElementD)) : AlignmentD;

  static constexpr int Chunks = TileN / ChunkN;

  struct SharedStorage {
    alignas(128) ElementD chunk[2][Outer * Pitch];
  };

  struct ThreadArguments {
    float alpha = 1.0f;
    float beta = 0.0f;
  };
  struct Arguments {
    ThreadArguments thread{};
    ElementC const* ptr_C = nullptr;
    StrideC dC{};
    ElementD* ptr_D = nullptr;
    StrideD dD{};
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) { return 0; }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.thread.beta == 0.0f;
  }

  CUTLASS_HOST_DEVICE StagedEpilogue(Params const& params_) : params(params_) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL,
            class FrgEngine, class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators, TiledMma tiled_mma,
                                 ResidueMNK residue_mnk, int thread_idx, char* smem_buf) {
    using namespace cute;
    constexpr int Threads = int(size(TiledMma{}));
    constexpr int Values = int(size(FrgLayout{}));
    static_assert(Values % 2 == 0, "accumulators come in column pairs");

    // Each accumulator's (row, column) in the tile. A TV layout is a sum over its thread and
    // value modes, so thread t's coordinates are thread 0's (known at compile time once
    // unrolled) plus t's offset: which chunk a value belongs to is static.
    auto tile_coords = make_identity_tensor(make_shape(Int<TileM>{}, Int<TileN>{}));
    auto mine = tiled_mma.get_slice(thread_idx).partition_C(tile_coords);
    auto first = tiled_mma.get_slice(0).partition_C(tile_coords);
    int const row_offset = int(get<0>(mine(0))) - int(get<0>(first(0)));
    int const col_offset = int(get<1>(mine(0))) - int(get<1>(first(0)));

    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    int const rows_left = int(get<0>(residue_mnk));
    int const cols_left = int(get<1>(residue_mnk));
    long long const row_stride = RowMajorD ? (long long)get<0>(params.dD) : 1;
    long long const col_stride = RowMajorD ? 1 : (long long)get<1>(params.dD);
    ElementD* tile_d = params.ptr_D + (long long)m_coord * TileM * row_stride
                       + (long long)n_coord * TileN * col_stride
                       + (long long)l_coord * (long long)get<2>(params.dD);
    long long const ld = RowMajorD ? row_stride : col_stride;
    SharedStorage& storage = *reinterpret_cast<SharedStorage*>(smem_buf);
    cutlass::NumericConverter<ElementD, float> convert;
    float const alpha = params.thread.alpha;
    constexpr int VectorsPerLine = Inner / Vector;
    constexpr int VectorsPerThread = (Outer * VectorsPerLine + Threads - 1) / Threads;
    using VectorType = cutlass::AlignedArray<ElementD, Vector>;

    CUTLASS_PRAGMA_UNROLL
    for (int chunk = 0; chunk < Chunks; ++chunk) {
      // Two buffers: the chunk written now is not the one some threads may still be reading,
      // so one barrier a chunk orders both (a buffer is written again only after the barrier
      // that follows its readers' next write).
      ElementD* buffer = storage.chunk[chunk % 2];
      int const c0 = chunk * ChunkN;
      // 1. this chunk's accumulators, scaled and converted, into shared memory
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < Values; i += 2) {
        int const col0 = int(get<1>(first(i)));
        if (col0 >= c0 && col0 < c0 + ChunkN) {
          int const r = int(get<0>(first(i))) + row_offset;
          int const c = col0 + col_offset - c0;
          ElementD d0 = convert(alpha * accumulators(i));
          ElementD d1 = convert(alpha * accumulators(i + 1));
          if constexpr (RowMajorD) {
            cutlass::Array<ElementD, 2> pair;
            pair[0] = d0;
            pair[1] = d1;
            *reinterpret_cast<cutlass::Array<ElementD, 2>*>(&buffer[r * Pitch + c]) = pair;
          } else {
            buffer[c * Pitch + r] = d0;
            buffer[(c + 1) * Pitch + r] = d1;
          }
        }
      }
      sync<Threads>();

      // 2. shared memory -> D in vectors along D's contiguous extent: every load first, then
      // every store (one load latency a chunk, not one a vector)
      int const inner_left = RowMajorD ? cols_left - c0 : rows_left;
      int const outer_left = RowMajorD ? rows_left : cols_left - c0;
      ElementD* chunk_d = tile_d + (long long)c0 * col_stride;
      if (inner_left >= Inner && outer_left >= Outer) {   // the chunk lies inside D
        VectorType vectors[VectorsPerThread];
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < VectorsPerThread; ++j) {
          int const v = thread_idx + j * Threads;
          if (v < Outer * VectorsPerLine) {
            vectors[j] = *reinterpret_cast<VectorType const*>(
                &buffer[(v / VectorsPerLine) * Pitch + (v % VectorsPerLine) * Vector]);
          }
        }
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < VectorsPerThread; ++j) {
          int const v = thread_idx + j * Threads;
          if (v < Outer * VectorsPerLine) {
            cutlass::arch::global_store<VectorType, sizeof(VectorType)>(
                vectors[j], chunk_d + (long long)(v / VectorsPerLine) * ld + (v % VectorsPerLine) * Vector, true);
          }
        }
      } else {   // an edge of D: whole vectors where they fit, elements after
        CUTLASS_PRAGMA_NO_UNROLL
        for (int v = thread_idx; v < Outer * VectorsPerLine; v += Threads) {
          int const line = v / VectorsPerLine;
          int const at = (v % VectorsPerLine) * Vector;
          if (line < outer_left) {
            ElementD const* from = &buffer[line * Pitch + at];
            ElementD* to = chunk_d + (long long)line * ld + at;
            if (at + Vector <= inner_left) {
              cutlass::arch::global_store<VectorType, sizeof(VectorType)>(
                  *reinterpret_cast<VectorType const*>(from), to, true);
            } else {
              for (int e = 0; e < Vector && at + e < inner_left; ++e) {
                to[e] = from[e];
              }
            }
          }
        }
      }
    }
    if constexpr (Chunks % 2 == 1) {
      sync<Threads>();   // the next tile's first chunk writes the buffer the last one read
    }
  }

private:
  // The consumer warp groups' barrier (CUTLASS's id for epilogues). The memory clobber keeps
  // the compiler from moving shared-memory accesses across it (CUTLASS's NamedBarrier has none).
  template <int Threads>
  CUTLASS_DEVICE static void sync() {
    asm volatile("bar.sync %0, %1;" :: "r"(int(cutlass::arch::ReservedNamedBarriers::EpilogueBarrier)),
                 "r"(Threads) : "memory");
  }

  Params params;
};

}  // namespace cutlass_sparse
"""


def chunk_columns(config: SparseGemmConfig) -> int:
    """Columns of D per chunk: the most, in whole 8-column fragment groups dividing the
    tile's N, whose two buffers fit CHUNK_BYTES."""
    tm, tn = config.threadblock[:2]
    size = {"f32": 4}.get(config.element_out, 2)
    fits = [c for c in range(8, tn + 1, 8) if tn % c == 0 and 2 * tm * c * size <= CHUNK_BYTES]
    return max(fits, default=8)


def collective(config: SparseGemmConfig) -> str:
    """The source that defines CollectiveEpilogue as the staged epilogue for this kernel."""
    element_d = DataTypeTag[config.tensor_c.element]
    layout_d = LayoutTag[config.tensor_c.layout]
    return (SOURCE + "\nusing CollectiveEpilogue = cutlass::epilogue::collective::detail::"
            f"Sm90TmaWarpSpecializedAdapter<\n    cutlass_sparse::StagedEpilogue<{element_d}, {layout_d}, "
            f"TileShape, {config.alignment_c}, {chunk_columns(config)}>>;")
