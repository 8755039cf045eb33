"""The sm90 kernels' tile scheduler as emitted C++: CUTLASS's persistent scheduler, or its
stream-K scheduler (which also runs split-K) with the arguments and workspace region that
the setup entry sets and reports."""
from __future__ import annotations

from ..describe.description import SparseGemmConfig

# Stream-K/split-K reduce K slices through the workspace: partial tiles, then one barrier
# word per tile and warp group that must be zero before every launch (CUTLASS's host-side
# initialize_workspace does that with a memset; here the host zeroes the region this
# reports). The region follows the epilogue's and the scheduler's reduction workspace.
STREAMK_ARGUMENTS = """\
  arguments.scheduler.splits = args.splits;
  arguments.scheduler.decomposition_mode =
      static_cast<decltype(arguments.scheduler.decomposition_mode)>(args.decomposition);"""

STREAMK_BARRIER_REGION = """\
  {
    using Scheduler = typename GemmKernel::TileScheduler;
    auto problem_mnkl = make_shape(args.m, args.n, args.k, 1);
    dim3 blocks = Scheduler::get_tiled_cta_shape_mnl(problem_mnkl, TileShape{}, ClusterShape{});
    uint32_t k_tiles = uint32_t((args.k + size<2>(TileShape{}) - 1) / size<2>(TileShape{}));
    size_t barrier = 0, reduction = 0;
    Scheduler::Params::get_workspace_component_sizes(
        blocks, k_tiles, cutlass::gemm::to_gemm_coord(TileShape{}),
        cutlass::gemm::to_gemm_coord(ClusterShape{}), barrier, reduction, hw_info,
        arguments.scheduler.splits, arguments.scheduler.max_swizzle_size, arguments.scheduler.raster_order,
        arguments.scheduler.decomposition_mode, arguments.scheduler.reduction_mode,
        GemmKernel::NumMmaWarpGroups, cute::sizeof_bits<typename Scheduler::BarrierType>::value,
        cute::sizeof_bits<float>::value, CollectiveEpilogue::get_store_pipe_increment(TileShape{}));
    size_t epilogue = cutlass::round_nearest(CollectiveEpilogue::get_workspace_size(problem, arguments.epilogue),
                                             cutlass::MinWorkspaceAlignment);
    barrier_offset = (long long)(epilogue + reduction);
    barrier_bytes = (long long)barrier;
  }"""


def snippets(config: SparseGemmConfig) -> dict:
    """The setup entry's tile scheduler: its type, its arguments and the barrier region it reports."""
    if config.tile_scheduler == "streamk":
        return {"tile_scheduler": "cutlass::gemm::StreamKScheduler",
                "scheduler_arguments": STREAMK_ARGUMENTS, "barrier_region": STREAMK_BARRIER_REGION}
    return {"tile_scheduler": "cutlass::gemm::PersistentScheduler",
            "scheduler_arguments": "", "barrier_region": ""}
