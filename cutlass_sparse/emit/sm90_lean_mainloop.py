"""The sm90 sparse mainloop with a producer and consumer of our own (SparseGemmConfig.lean_mainloop).

CUTLASS's sparse mainloop partitions its tiles with CuTe's generic layout algebra (TMA
partitions, the metadata's thread-value layouts): instantiating that for the sparse layouts
is about a third of an sm90 GEMM's compile time and a quarter of its memory (the default
kernel: 36.4 s and 3.39 GiB with it, 23.7 s and 2.45 GiB without; docs/compile_time.md,
session 39).
LeanMainloop keeps everything else of CUTLASS's collective (types, Params and its TMA
descriptors, shared storage, pipeline, tails) and replaces `load` and `mma`:

- the producer issues each TMA box itself, at the coordinate CuTe's own TMA tensor gives
  for the box's first element (so the descriptor's dimension order is CuTe's), into the
  shared-memory address CuTe's own layout gives. Which boxes a k-tile takes is the one
  thing derived here (`boxes`), from the rule by which CuTe's make_tma_copy sizes a box:
  the widest run of the shared-memory layout that is contiguous in global memory, cut along
  its last dimension among the CTAs a multicast serves;
- each consumer thread reads its 32-bit metadata word per k-block at an offset read off the
  metadata's shared-memory layout, for the thread-to-row map of wgmma.sp (CuTe's
  GMMA::ELayout_64x32), and issues CuTe's wgmma.sp atom directly.

scripts/lean_mainloop_oracle.py compiles CUTLASS's producer and consumer and ours on the
host (g++) and checks, for every catalog tile that takes this mainloop, that both issue the
same TMA instructions (descriptor, coordinates, shared-memory address, multicast mask) and
read the same metadata bytes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .template import substitute

if TYPE_CHECKING:
    from ..describe.description import SparseGemmConfig

# A swizzle atom's row: 128 bytes (SW128), the widest run one TMA box takes along the
# contiguous dimension; narrower operands take the narrower atom that fits them.
SWIZZLE_BYTES = 128
# Bytes of an element of A and B (LeanMainloop reads 16-bit operands: its metadata map is
# wgmma.sp k32's).
ELEMENT_BYTES = 2


class Boxes(NamedTuple):
    """Where one operand's TMA boxes start in its tile (the C++ Boxes' arguments, in order):
    count boxes a k-tile, box j at (j * step_row, j * step_k), shifted by (rank * rank_row,
    rank * rank_k) for the CTA's place along the cluster mode of its multicast."""
    count: int
    step_row: int
    step_k: int
    rank_row: int
    rank_k: int

LEAN_MAINLOOP = r"""
namespace cutlass_sparse {

// Where one operand's TMA boxes start in its tile, in the tile's logical (rows, K)
// coordinates: Count boxes a k-tile, box j at (j * StepRow, j * StepK), shifted by the CTA's
// share of a multicast (rank * RankRow, rank * RankK; rank: the CTA's place along the cluster
// mode the operand is multicast over). From sm90_lean_mainloop.boxes.
template <int Count, int StepRow, int StepK, int RankRow, int RankK>
struct Boxes {
  static constexpr int count = Count;
  CUTLASS_HOST_DEVICE static int row(int j, int rank) { return j * StepRow + rank * RankRow; }
  CUTLASS_HOST_DEVICE static int k(int j, int rank) { return j * StepK + rank * RankK; }
};

// One TMA load of the box at a CuTe TMA coordinate (an ArithmeticTuple of rank 2 to 5).
template <bool Multicast, class Coord>
CUTLASS_DEVICE void tma_load(void const* desc, uint64_t* barrier, uint16_t mask, void* smem, Coord const& c) {
  using namespace cute;
  constexpr int Rank = int(tuple_size<Coord>::value);
  constexpr uint64_t hint = uint64_t(TMA::CacheHintSm90::EVICT_NORMAL);
  if constexpr (Multicast) {
    if constexpr (Rank == 2) { SM90_TMA_LOAD_MULTICAST_2D::copy(desc, barrier, mask, hint, smem, get<0>(c), get<1>(c)); }
    else if constexpr (Rank == 3) { SM90_TMA_LOAD_MULTICAST_3D::copy(desc, barrier, mask, hint, smem, get<0>(c), get<1>(c), get<2>(c)); }
    else if constexpr (Rank == 4) { SM90_TMA_LOAD_MULTICAST_4D::copy(desc, barrier, mask, hint, smem, get<0>(c), get<1>(c), get<2>(c), get<3>(c)); }
    else { static_assert(Rank == 5, "TMA coordinates of rank 2 to 5");
      SM90_TMA_LOAD_MULTICAST_5D::copy(desc, barrier, mask, hint, smem, get<0>(c), get<1>(c), get<2>(c), get<3>(c), get<4>(c)); }
  } else {
    if constexpr (Rank == 2) { SM90_TMA_LOAD_2D::copy(desc, barrier, hint, smem, get<0>(c), get<1>(c)); }
    else if constexpr (Rank == 3) { SM90_TMA_LOAD_3D::copy(desc, barrier, hint, smem, get<0>(c), get<1>(c), get<2>(c)); }
    else if constexpr (Rank == 4) { SM90_TMA_LOAD_4D::copy(desc, barrier, hint, smem, get<0>(c), get<1>(c), get<2>(c), get<3>(c)); }
    else { static_assert(Rank == 5, "TMA coordinates of rank 2 to 5");
      SM90_TMA_LOAD_5D::copy(desc, barrier, hint, smem, get<0>(c), get<1>(c), get<2>(c), get<3>(c), get<4>(c)); }
  }
}

// CUTLASS's sparse sm90 mainloop (types, Params and TMA descriptors, shared storage,
// pipeline, tails) with a producer and consumers of our own that issue the same
// instructions without CuTe's partitioning algebra, about half of the GEMM's compile.
template <class Base, class BoxesA, class BoxesE, class BoxesB>
struct LeanMainloop : Base {
  using typename Base::Params;
  using typename Base::TensorStorage;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TiledMma;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::SmemLayoutE;
  using typename Base::ElementEMma;
  using ClusterShape = typename Base::DispatchPolicy::ClusterShape;
  static constexpr bool MulticastA = cute::is_same_v<typename Base::GmemTiledCopyA, cute::SM90_TMA_LOAD_MULTICAST>;
  static constexpr bool MulticastB = cute::is_same_v<typename Base::GmemTiledCopyB, cute::SM90_TMA_LOAD_MULTICAST>;
  static constexpr int WarpGroups = int(cute::size(TiledMma{})) / 128;
  static_assert(Base::K_PIPE_MMAS == 0 || Base::K_PIPE_MMAS == 1, "drained, or one wgmma batch in flight");

  // A tile element's shared-memory address (swizzled as the TMA unit writes it).
  template <class Tensor>
  CUTLASS_HOST_DEVICE static void* address(Tensor const& tensor, int row, int k, int stage) {
    return (void*)cute::raw_pointer_cast(tensor.data() + tensor.layout()(row, k, stage));
  }

  // One k-tile's boxes into one stage. rank_m, rank_n: the CTA's place in its cluster (A and
  // E are multicast along N, B along M).
  template <class TensorA, class TensorB, class TensorE>
  CUTLASS_HOST_DEVICE static void load_stage(Params const& params, uint64_t* barrier, TensorStorage& smem,
                                             TensorA const& gA_mkl, TensorB const& gB_nkl, TensorE const& gE_mkl,
                                             int m, int n, int k, int l, int stage, int rank_m, int rank_n,
                                             uint16_t mask_a, uint16_t mask_b) {
    using namespace cute;
    Tensor sA = make_tensor(make_smem_ptr(smem.smem_A.begin()), SmemLayoutA{});
    Tensor sE = make_tensor(make_smem_ptr(smem.smem_E.begin()), SmemLayoutE{});
    Tensor sB = make_tensor(make_smem_ptr(smem.smem_B.begin()), SmemLayoutB{});
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < BoxesA::count; ++j) {
      int const r = BoxesA::row(j, rank_n), c = BoxesA::k(j, rank_n);
      tma_load<MulticastA>(params.tma_load_a.get_tma_descriptor(), barrier, mask_a, address(sA, r, c, stage),
                           gA_mkl(r, c, m, k, l));
    }
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < BoxesE::count; ++j) {
      int const r = BoxesE::row(j, rank_n), c = BoxesE::k(j, rank_n);
      tma_load<MulticastA>(params.tma_load_e.get_tma_descriptor(), barrier, mask_a, address(sE, r, c, stage),
                           gE_mkl(r, c, m, k, l));
    }
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < BoxesB::count; ++j) {
      int const r = BoxesB::row(j, rank_m), c = BoxesB::k(j, rank_m);
      tma_load<MulticastB>(params.tma_load_b.get_tma_descriptor(), barrier, mask_b, address(sB, r, c, stage),
                           gB_nkl(r, c, n, k, l));
    }
  }

  // The producer (one elected thread of the warp): CUTLASS's load, box by box.
  template <class TensorA, class TensorB, class TensorE, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState write_state,
                           cute::tuple<TensorA, TensorB, TensorE> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int, uint32_t block_rank_in_cluster,
                           TensorStorage& smem) {
    using namespace cute;
    if (!cute::elect_one_sync()) {
      return;
    }
    auto cta_layout = make_layout(ClusterShape{});
    auto cta_coord = cta_layout.get_flat_coord(block_rank_in_cluster);
    uint16_t const mask_a = create_tma_multicast_mask<1>(cta_layout, cta_coord);
    uint16_t const mask_b = create_tma_multicast_mask<0>(cta_layout, cta_coord);
    auto [m, n, k_coord, l] = blk_coord;
    CUTLASS_PRAGMA_NO_UNROLL
    for ( ; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(write_state);
      load_stage(params, pipeline.producer_get_barrier(write_state), smem, get<0>(load_inputs), get<1>(load_inputs),
                 get<2>(load_inputs), m, n, *k_tile_iter, l, write_state.index(), get<0>(cta_coord),
                 get<1>(cta_coord), mask_a, mask_b);
      ++k_tile_iter;
      ++write_state;
    }
  }

  // This consumer thread's metadata word for the wgmma atom atom_m along M and k-block
  // k_block: its byte offset in a stage's metadata. wgmma.sp's map for a 16-bit A (CuTe's
  // GMMA::ELayout_64x32): thread t of a warp group holds rows t/4 % 8 + 16 * (t/32) and 8
  // rows on, 16 K-columns from 16 * (t % 2) of each 32-column k-block, 4 bytes (static_assert
  // in mma); warp groups, then atoms, stack along M in 64 rows.
  CUTLASS_HOST_DEVICE static int metadata_offset(int thread_idx, int atom_m, int k_block) {
    int const t = thread_idx % 128;
    int const row = 64 * (thread_idx / 128) + 64 * WarpGroups * atom_m + 16 * (t / 32) + (t / 4) % 8;
    return int(SmemLayoutE{}.layout_b()(row, 32 * k_block + 16 * (t % 2), 0)) / ElementEMma::sparsity;
  }

  // How many k-blocks' words lie side by side (a power of two, at most 4: one 16-byte read).
  template <int KBlocks>
  static constexpr int metadata_run() {
    constexpr auto layout_e = SmemLayoutE{}.layout_b();
    int run = 1;
    while (run < 4 && 2 * run <= KBlocks && KBlocks % (2 * run) == 0) {
      for (int kb = run; kb < 2 * run; ++kb) {
        if (int(layout_e(0, 32 * kb, 0)) - int(layout_e(0, 0, 0)) != 4 * kb * ElementEMma::sparsity) {
          return run;
        }
      }
      run *= 2;
    }
    return run;
  }

  template <class Accumulators, size_t... I>
  CUTLASS_DEVICE static void wgmma(uint64_t desc_a, uint64_t desc_b, Accumulators&& accumulators, uint32_t metadata,
                                   cute::GMMA::ScaleOut scale, cute::index_sequence<I...>) {
    TiledMma::Atom::MMA_Op::fma(desc_a, desc_b, accumulators(I)..., metadata, scale);
  }

  // The consumers: CUTLASS's mma (drained) or its in-flight variant (emit.nvrtc_headers),
  // the metadata read as one 32-bit word per thread, atom and k-block.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState read_state, FrgTensorC& accum, int k_tile_count,
                          int thread_idx, TensorStorage& smem, Params const&) {
    using namespace cute;
    static_assert(cute::is_same_v<typename TiledMma::Atom::Traits::ELayout, GMMA::ELayout_64x32>,
                  "metadata of a 16-bit A (wgmma.sp k32)");
    constexpr auto layout_e = SmemLayoutE{}.layout_b();
    constexpr int Sparsity = ElementEMma::sparsity;
    static_assert(int(layout_e(8, 0, 0)) - int(layout_e(0, 0, 0)) == 2 * Sparsity &&
                  int(layout_e(0, 8, 0)) - int(layout_e(0, 0, 0)) == Sparsity,
                  "a thread's metadata of a k-block: one 32-bit word (rows r and r + 8, 16 columns)");
    constexpr int StageBytes = int(layout_e(0, 0, 1)) / Sparsity;

    Tensor sA = make_tensor(make_smem_ptr(smem.smem_A.begin()), SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(smem.smem_B.begin()), SmemLayoutB{});
    int const warp_group = __shfl_sync(0xFFFFFFFF, thread_idx / 128, 0);
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_thread_slice(warp_group * 128);
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));   // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));   // (MMA,MMA_N,MMA_K,PIPE)
    constexpr int AtomsM = int(size<1>(tCrA));
    constexpr int KBlocks = int(size<2>(tCrA));
    static_assert(int(size<1>(tCrB)) == 1, "one wgmma atom across the tile's N");
    constexpr int Registers = int(size<0>(FrgTensorC{}));

    unsigned char const* metadata = reinterpret_cast<unsigned char const*>(raw_pointer_cast(smem.smem_E.begin()));
    // Words of Run k-blocks side by side are read in one vector (CUTLASS's copy vectorizes too).
    constexpr int Run = metadata_run<KBlocks>();
    using Vector = cute::conditional_t<Run == 4, uint4, cute::conditional_t<Run == 2, uint2, uint32_t>>;
    int offsets[AtomsM][KBlocks / Run];
    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < AtomsM; ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int g = 0; g < KBlocks / Run; ++g) {
        offsets[mm][g] = metadata_offset(thread_idx, mm, g * Run);
      }
    }
    // In flight, two fragments of metadata words: one k-tile's wgmmas read one while the next
    // k-tile's words load into the other (registers cannot be indexed at run time, hence two
    // k-tiles a trip, as in the in-flight patch).
    Vector words[1 + Base::K_PIPE_MMAS][AtomsM][KBlocks / Run];
    PipelineState release_state = read_state;
    GMMA::ScaleOut scale = GMMA::ScaleOut::Zero;
    warpgroup_fence_operand(accum);

    auto issue_k_tile = [&](auto fragment) {
      constexpr int F = decltype(fragment)::value;
      pipeline.consumer_wait(read_state, pipeline.consumer_try_wait(read_state));
      int const stage = read_state.index();
      CUTLASS_PRAGMA_UNROLL
      for (int mm = 0; mm < AtomsM; ++mm) {
        CUTLASS_PRAGMA_UNROLL
        for (int g = 0; g < KBlocks / Run; ++g) {
          words[F][mm][g] = *reinterpret_cast<Vector const*>(metadata + stage * StageBytes + offsets[mm][g]);
        }
      }
      warpgroup_fence_operand(accum);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < KBlocks; ++kb) {
        CUTLASS_PRAGMA_UNROLL
        for (int mm = 0; mm < AtomsM; ++mm) {
          uint32_t const word = reinterpret_cast<uint32_t const*>(&words[F][mm][kb / Run])[kb % Run];
          wgmma(tCrA(0, mm, kb, stage).desc_, tCrB(0, 0, kb, stage).desc_, accum(_, mm, 0), word, scale,
                cute::make_index_sequence<Registers>{});
        }
        scale = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      ++read_state;
    };
    auto retire = [&](auto in_flight) {
      warpgroup_wait<decltype(in_flight)::value>();
      warpgroup_fence_operand(accum);
      pipeline.consumer_release(release_state);
      ++release_state;
    };

    if constexpr (Base::K_PIPE_MMAS == 0) {
      CUTLASS_PRAGMA_NO_UNROLL
      for ( ; k_tile_count > 0; --k_tile_count) {
        issue_k_tile(cute::Int<0>{});
        retire(cute::Int<0>{});
      }
    } else {
      if (k_tile_count > 0) {
        issue_k_tile(cute::Int<0>{});   // left in flight: mma_tail waits for it and releases its stage
        --k_tile_count;
      }
      CUTLASS_PRAGMA_NO_UNROLL
      for ( ; k_tile_count > 1; k_tile_count -= 2) {
        issue_k_tile(cute::Int<1>{});
        retire(cute::Int<1>{});
        issue_k_tile(cute::Int<0>{});
        retire(cute::Int<1>{});
      }
      if (k_tile_count > 0) {
        issue_k_tile(cute::Int<1>{});
        retire(cute::Int<1>{});
      }
    }
    warpgroup_fence_operand(accum);
  }
};

}  // namespace cutlass_sparse
"""

WRAPPED = """\
using CollectiveMainloop = cutlass_sparse::LeanMainloop<${built},
    cutlass_sparse::Boxes<${boxes_a}>, cutlass_sparse::Boxes<${boxes_e}>, cutlass_sparse::Boxes<${boxes_b}>>;"""


def boxes(config: "SparseGemmConfig") -> tuple[Boxes, Boxes, Boxes]:
    """The TMA boxes of A, E and B a k-tile takes, in each tile's logical (rows, K)
    coordinates (rows: M for A and E, N for B).

    CuTe's make_tma_copy makes a box of the shared-memory layout's widest run that global
    memory holds contiguously: one swizzle atom along the contiguous dimension (at most 128
    bytes), then the whole tile along the other (the builder tiles that dimension first);
    further atoms along the contiguous dimension are further boxes. A multicast cuts the box
    along its last dimension (rows for A and E, N-major B's K, K-major B's N) among the CTAs
    of the cluster mode it serves: A and E over the cluster's N, B over its M.
    """
    rows_a, columns_b, k = config.threadblock
    cluster_m, cluster_n = config.cluster[0], config.cluster[1]
    atom = SWIZZLE_BYTES // ELEMENT_BYTES
    # A is K-major, compressed: a row of a k-tile holds k / 2 elements.
    a_run = min(k // 2, atom)
    box_a = Boxes((k // 2) // a_run, 0, 2 * a_run, rows_a // cluster_n, 0)
    box_e = Boxes(1, 0, 0, rows_a // cluster_n, 0)
    if config.layout_b == "row":   # x row-major: B N-major
        run = min(columns_b, atom)
        box_b = Boxes(columns_b // run, run, 0, 0, k // cluster_m)
    else:
        run = min(k, atom)
        box_b = Boxes(k // run, 0, run, columns_b // cluster_m, 0)
    return box_a, box_e, box_b


def wrapped(config: "SparseGemmConfig", built: str) -> str:
    """The source defining CollectiveMainloop as CUTLASS's mainloop `built` (a type the
    source names) in LeanMainloop (LEAN_MAINLOOP defines it), with this tile's TMA boxes."""
    box_a, box_e, box_b = boxes(config)
    return substitute(WRAPPED, {
        "built": built, "boxes_a": ", ".join(map(str, box_a)),
        "boxes_e": ", ".join(map(str, box_e)), "boxes_b": ", ".join(map(str, box_b))})
