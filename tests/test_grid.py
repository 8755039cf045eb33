"""The host's copy of CUTLASS's persistent-scheduler grid (launch.grid), on cases worked
out by hand from tile_scheduler_params.h. On the GPU, Sm90Plan also checks it against
the grid CUTLASS's own setup reports, for each kernel's first problem."""
import pytest

from cutlass_sparse.launch import grid


@pytest.mark.parametrize("m, n, tile, cluster, swizzle, expected", [
    # 4096 x 16, 64x32 tiles, no cluster: 64 x 1 tiles, raster along N (tiles_n <= tiles_m),
    # one cluster of one along x, the tiles (64) along y
    (4096, 16, (64, 32), (1, 1), 1, (1, 64, 1)),
    # 64 x 4096: 1 x 128 tiles, more along N: raster along M, grid along x (128 < 132 SMs)
    (64, 4096, (64, 32), (1, 1), 1, (128, 1, 1)),
    # 64 x 8192: 256 tiles, capped by the 132 SMs
    (64, 8192, (64, 32), (1, 1), 1, (132, 1, 1)),
    # 4096^3, 256x128 tiles, cluster 1x2: 16 x 32 blocks, raster along M (32 > 16);
    # swizzle 4 -> log 2 (min(16, 32) >= 3): padded 16 x 32 = 512 blocks; cluster size 2:
    # per-GPC 18 - 0 = 18, 7 GPCs = 126, residual 132 % 18 = 6 -> 132; x = min(132 // 2, 512 // 2)
    (4096, 4096, (256, 128), (1, 2), 4, (66, 2, 1)),
    # 4096 x 512 with 128x128 tiles, cluster 1x2: 32 x 4 blocks, raster along N, y = min(132, 128)
    (4096, 512, (128, 128), (1, 2), 1, (1, 128, 1)),
    # a 2x1 cluster over an odd M tile count: rounded up to whole clusters (3 -> 4 blocks)
    (384, 128, (128, 128), (2, 1), 1, (2, 2, 1)),
])
def test_persistent_grid_matches_cutlass_arithmetic(m, n, tile, cluster, swizzle, expected):
    assert grid.persistent_grid(m, n, tile, cluster, 132, swizzle) == expected


def test_cluster_occupancy_leaves_partial_gpcs():
    # cluster of 4 on 132 SMs: 7 GPCs x (18 - 2) = 112, residual 6 -> 4: 116
    assert grid.max_cta_occupancy(4, 132) == 116
    assert grid.max_cta_occupancy(2, 132) == 132
    # fewer SMs than a GPC holds: one GPC of 18 - 2 = 16, capped by the 10 SMs
    assert grid.max_cta_occupancy(8, 10) == 10
