"""Our own sm90 epilogue for kernels without C: D = alpha * accumulators, stored by TMA.

CUTLASS's TMA epilogue (its collective: fusion visitors, load and store pipelines, C) is
about 40% of an sm90 GEMM's compile time and memory (docs/compile_time.md, sessions 24 and
38); its register-to-global epilogue compiles as fast but stores 4 bytes per thread and row
and lost 13-26% at the large tiles, and so did a staging of our own that stored D from
shared memory with vector stores (2-5%, session 38). This one keeps what makes CUTLASS's
fast: each column chunk of the tile goes from the wgmma fragments into a swizzled
shared-memory buffer (two of them, one barrier a chunk) and one thread stores it with TMA,
asynchronously. It plugs into CUTLASS's warp-specialized kernels through their adapter for
epilogues without TMA (Sm90TmaWarpSpecializedAdapter), with a store_tail of its own.
"""
from __future__ import annotations

from cutlass_library.library import DataTypeTag, LayoutTag

from ..describe.description import SparseGemmConfig

# Shared memory the two chunk buffers may take: about the TMA epilogue's D buffers, so the
# mainloop keeps its stages.
CHUNK_BYTES = 16384

SOURCE = r"""
namespace cutlass_sparse {

// D = alpha * accumulators, written one column chunk of the tile at a time into a swizzled
// shared-memory buffer (two buffers, one barrier a chunk) and stored from there by TMA, as
// CUTLASS's TMA epilogue does, without its collective (fusion visitors, pipelines, C): that
// machinery is about 40% of an sm90 GEMM's compile. No C, no activation.
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
  static constexpr int Chunks = TileN / ChunkN;
  static_assert(TileN % ChunkN == 0 && ChunkN % 8 == 0, "chunks of whole 8-column fragment groups");
  static_assert(AlignmentD * int(sizeof(ElementD)) % 16 == 0, "TMA stores rows of whole 16-byte vectors");
  static_assert(sizeof(ElementD) == 2 && ChunkN % 16 == 0, "stmatrix writes 16-bit D, two 8-column blocks at a time");

  using ChunkShape = cute::Shape<cute::Int<TileM>, cute::Int<ChunkN>>;
  using SmemLayoutAtom = decltype(cutlass::epilogue::collective::detail::sm90_get_epilogue_smem_swizzle_layout_atom<
      StrideD, ElementD, ChunkShape>());
  using SmemLayoutChunk = decltype(cute::tile_to_shape(SmemLayoutAtom{}, ChunkShape{},
      cute::conditional_t<RowMajorD, cute::Step<cute::_1, cute::_2>, cute::Step<cute::_2, cute::_1>>{}));
  using TMA_D = decltype(cute::make_tma_copy(cute::SM90_TMA_STORE{},
      cute::make_tensor(cute::make_gmem_ptr<ElementD>(nullptr), cute::repeat_like(StrideD{}, int32_t(0)), StrideD{}),
      SmemLayoutChunk{}, ChunkShape{}, cute::_1{}));

  struct SharedStorage {
    alignas(1024) ElementD chunk[2][cute::cosize_v<SmemLayoutChunk>];
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
  struct Params {
    float alpha;
    TMA_D tma_store_d;
  };

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    auto tensor_d = cute::make_tensor(cute::make_gmem_ptr(args.ptr_D), cute::make_layout(cute::make_shape(M, N, L), args.dD));
    return {args.thread.alpha, cute::make_tma_copy_C_sm90(cute::SM90_TMA_STORE{}, tensor_d, SmemLayoutChunk{}, ChunkShape{})};
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
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators, TiledMma tiled_mma,
                                 ResidueMNK, int thread_idx, char* smem_buf) {
    using namespace cute;
    constexpr int Threads = int(size(TiledMma{}));
    constexpr int Values = int(size(FrgLayout{}));
    static_assert(Values % 2 == 0, "accumulators come in column pairs");
    // The wgmma fragment: warp groups stacked along M (64 rows each), one atom across the
    // tile's N; a thread holds (v0, i, nb) = column pair, row +8, 8-column block, then M blocks.
    constexpr int MmaM = TileM / (64 * (Threads / 128));
    static_assert(Threads == 256, "the cooperative schedule's two consumer warp groups, stacked along M");
    static_assert(int(size<0>(FrgLayout{})) == TileN / 2 && int(size<2>(FrgLayout{})) == 1,
                  "one wgmma atom across the tile's N");
    static_assert(Values == 4 * (TileN / 8) * MmaM, "a wgmma fragment of one atom across N");

    // This tile of D as TMA coordinates, in chunks; TMA clips what lies outside D.
    auto [M, N, K, L] = problem_shape_mnkl;
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    Tensor mD = params.tma_store_d.get_tma_tensor(make_shape(M, N, L));
    auto tile_mn = make_shape(Int<TileM>{}, Int<TileN>{});
    Tensor gD = local_tile(coalesce(mD, tile_mn), tile_mn, make_coord(m_coord, n_coord, l_coord));
    Tensor gD_chunks = flat_divide(gD, ChunkShape{});   // (TileM, ChunkN, 1, Chunks)
    SharedStorage& storage = *reinterpret_cast<SharedStorage*>(smem_buf);
    auto thread_tma = params.tma_store_d.get_slice(Int<0>{});
    bool const issuer = thread_idx == 0;
    cutlass::NumericConverter<ElementD, float> convert;

    CUTLASS_PRAGMA_UNROLL
    for (int chunk = 0; chunk < Chunks; ++chunk) {
      // The buffers alternate across tiles too: a buffer is written again only after the
      // barrier before which its last TMA store was waited for.
      int const parity = (stored_chunks + chunk) & 1;
      Tensor sD = make_tensor(make_smem_ptr(storage.chunk[parity]), SmemLayoutChunk{});
      int const c0 = chunk * ChunkN;
      // stmatrix: four 8x8 matrices a warp, rows +0 and +8 of column blocks nb and nb + 1;
      // thread l names line l % 8 of matrix l / 8 (a row of it, or with .trans for an
      // M-major D, a column), 8 elements that are one 16-byte swizzle unit.
      int const lane = thread_idx % 32;
      int const warp_rows = 64 * (thread_idx / 128) + 16 * ((thread_idx / 32) % 4);
      int const j = lane / 8;
      CUTLASS_PRAGMA_UNROLL
      for (int mm = 0; mm < MmaM; ++mm) {
        CUTLASS_PRAGMA_UNROLL
        for (int nb = c0 / 8; nb < (c0 + ChunkN) / 8; nb += 2) {
          int const base = mm * 4 * (TileN / 8) + 4 * nb;   // the fragment's (v0, i, nb) order
          uint32_t words[4];
          CUTLASS_PRAGMA_UNROLL
          for (int matrix = 0; matrix < 4; ++matrix) {   // (i, nb + matrix / 2) for i = matrix % 2
            int const v = base + 4 * (matrix / 2) + 2 * (matrix % 2);
            cutlass::Array<ElementD, 2> pair;
            pair[0] = convert(params.alpha * accumulators(v));
            pair[1] = convert(params.alpha * accumulators(v + 1));
            words[matrix] = reinterpret_cast<uint32_t const&>(pair);
          }
          int const row = 128 * mm + warp_rows + 8 * (j % 2);
          int const column = 8 * (nb + j / 2) - c0;
          if constexpr (RowMajorD) {
            uint32_t const address = cute::cast_smem_ptr_to_uint(raw_pointer_cast(&sD(row + lane % 8, column)));
            asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};"
                         :: "r"(address), "r"(words[0]), "r"(words[1]), "r"(words[2]), "r"(words[3]));
          } else {
            uint32_t const address = cute::cast_smem_ptr_to_uint(raw_pointer_cast(&sD(row, column + lane % 8)));
            asm volatile("stmatrix.sync.aligned.x4.trans.m8n8.shared.b16 [%0], {%1, %2, %3, %4};"
                         :: "r"(address), "r"(words[0]), "r"(words[1]), "r"(words[2]), "r"(words[3]));
          }
        }
      }
      cutlass::arch::fence_view_async_shared();   // the writes, visible to the TMA unit
      if (issuer) {
        cute::tma_store_wait<0>();   // the other buffer's store has read it
      }
      sync<Threads>();
      if (issuer) {
        copy(params.tma_store_d, thread_tma.partition_S(sD), thread_tma.partition_D(gD_chunks(_, _, 0, chunk)));
        cute::tma_store_arrive();
      }
    }
    stored_chunks += Chunks;
  }

  // Before the CTA exits: its last TMA store has read shared memory. Every consumer thread
  // waits (a no-op for those that committed no store), as CUTLASS's store pipeline does: the
  // issuing thread is consumer 0, which the kernel numbers modulo its 256 consumers.
  CUTLASS_DEVICE void drain() const {
    cute::tma_store_wait<0>();
  }

private:
  // The consumer warp groups' barrier (CUTLASS's id for epilogues). The memory clobber keeps
  // the compiler from moving shared-memory accesses across it (CUTLASS's NamedBarrier has none).
  template <int Threads>
  CUTLASS_DEVICE static void sync() {
    asm volatile("bar.sync %0, %1;" :: "r"(int(cutlass::arch::ReservedNamedBarriers::EpilogueBarrier)),
                 "r"(Threads) : "memory");
  }

  // The kernel's own Params, not a copy: TMA reads its descriptor there (a copy would sit in
  // local memory, where TMA cannot read).
  Params const& params;
  int stored_chunks = 0;
};

// CUTLASS's adapter for epilogues without TMA, with a store_tail that drains the last store.
template <class Epilogue>
class StagedAdapter : public cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue> {
  using Base = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue>;

public:
  using Base::Base;

  template <class... Pipelines>
  CUTLASS_DEVICE void store_tail(Pipelines...) {
    this->drain();
  }
};

}  // namespace cutlass_sparse
"""


def chunk_columns(config: SparseGemmConfig) -> int:
    """Columns of (16-bit) D per chunk: the most, in pairs of 8-column fragment blocks
    dividing the tile's N, whose two buffers fit CHUNK_BYTES."""
    tm, tn = config.threadblock[:2]
    fits = [c for c in range(16, tn + 1, 16) if tn % c == 0 and 2 * tm * c * 2 <= CHUNK_BYTES]
    return max(fits, default=16)


def collective(config: SparseGemmConfig) -> str:
    """The source that defines CollectiveEpilogue as the staged epilogue for this kernel."""
    element_d = DataTypeTag[config.tensor_c.element]
    layout_d = LayoutTag[config.tensor_c.layout]
    return (SOURCE + "\nusing CollectiveEpilogue = "
            f"cutlass_sparse::StagedAdapter<\n    cutlass_sparse::StagedEpilogue<{element_d}, {layout_d}, "
            f"TileShape, {config.alignment_c}, {chunk_columns(config)}>>;")
