"""The problems the GPU tests run, in one place, so their kernels can be compiled ahead
of time on a machine without a GPU and carried to the GPU machine:

    CUTLASS_SPARSE_CACHE=... python -m tests.gpu_cases --arch sm_90 [--jobs N]
"""
import argparse
import dataclasses
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import any_shape_cases  # noqa: E402

# (M, N, K): tile multiples, ragged M/N/K, tiny, K = 16, large K, decode-like N.
SHAPES = [
    (128, 128, 128), (256, 512, 1024), (2048, 2048, 2048), (1000, 24, 100), (7, 3, 16),
    (1, 1, 16), (33, 17, 48), (256, 8, 4096), (64, 512, 16), (130, 130, 130), (96, 64, 16384),
    (300, 1000, 256), (512, 16, 4096), (2, 2, 32), (64, 6, 64), (1024, 1, 1024), (45, 200, 72),
    (160, 96, 2000), (4096, 128, 4096), (1376, 64, 512), (31, 33, 35),
]
# sm90 (TMA): K a multiple of 16, row-major N a multiple of 8.
SM90_SHAPES = [
    (128, 128, 128), (256, 512, 1024), (1000, 64, 512), (4096, 16, 4096), (4096, 128, 4096),
    (300, 8, 256), (2048, 2048, 2048), (33, 24, 128), (64, 64, 64), (512, 96, 16), (1376, 512, 4096),
]
DTYPES = ["f16", "bf16"]
LAYOUTS = ["row", "col"]
# Extra (shape, dtype, out dtype, layout) combinations used by the other GPU tests.
EXTRA = [((96, 40, 128), "f16", "f16", "row"), ((50, 40, 128), "f16", "f16", "row"),
         ((96, 40, 128), "f16", "f32", "row"), ((96, 40, 128), "bf16", "f32", "col"),
         ((200, 64, 256), "f16", "f16", "row"), ((200, 64, 256), "f16", "f16", "col"),
         ((128, 32, 64), "f16", "f16", "row"), ((128, 32, 64), "f16", "f16", "col"),
         ((64, 48, 128), "f16", "f16", "row")]


def cases():
    for shape in SHAPES:
        for dtype in DTYPES:
            for layout in LAYOUTS:
                yield shape, dtype, dtype, layout
    yield from EXTRA


# sm90 split-K: (M, N, K) whose K splits raggedly into 2, 3 and 8 slices of 128-wide tiles.
SM90_SPLIT_SHAPES = [(256, 64, 1040), (1000, 136, 3008)]
SPLITS = [1, 2, 3, 8]
# sm80 split-K: K padded to 64-wide tiles splits raggedly (1000 -> 16 tiles, 520 -> 9).
SM80_SPLIT_SHAPES = [(256, 72, 1000), (300, 40, 520)]
ACTIVATIONS = ["identity", "relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "hardswish"]


def sm90_streamk_config(dtype="f16", layout="row"):
    from cutlass_sparse.describe import catalog

    fam = catalog.load("sm90")
    tile = next(t for t in fam.tiles if t[5] == "streamk")
    return fam.config(tile, dtype, dtype, layout, 8, 8)


def sm90_configs(sm_count: int = 132):
    """test_gpu_sm90's kernels: cs.matmul without C runs kernels without C (reads_c False)."""
    from cutlass_sparse.describe import catalog, selection

    fam = catalog.load("sm90")
    for m, n, k in SM90_SHAPES + [(256, 64, 256), (200, 64, 256), (128, 64, 128), (200, 64, 256)]:
        for dtype in DTYPES:
            for layout in LAYOUTS:
                tile, _ = selection.choose_sm90(m, n, k, sm_count)
                yield fam.config(tile, dtype, dtype, layout, 8, 8, reads_c=False)
    yield sm90_streamk_config()
    tile, _ = selection.choose_sm90(256, 64, 256, sm_count)
    yield fam.config(tile, "bf16", "f32", "row", 8, 4)   # test_alpha_beta_and_f32_output: beta * C
    for atom in (64, 128):   # test_metadata_atoms_convert_exactly_and_both_kinds_of_tile_run
        tile = next(t for t in fam.tiles if min(t[0][2], 128) == atom and t[5] == "persistent")
        for dtype in DTYPES:
            yield fam.config(tile, dtype, dtype, "row", 8, 8)
    for dtype in DTYPES:
        yield from sm90_k256_configs(dtype)
        yield from sm90_in_flight_configs(dtype)
        yield from sm90_large_only_configs(dtype)
    yield from sm90_large_only_c_configs()
    yield from (config for config, _ in sm90_staged_cases())


# (M, N, K) for kernels with wgmma in flight: 1, 2, 3, 6 and 7 k-tiles of 64 (the mainloop
# takes two a trip, so odd and even counts end differently) and 1-3 of 128 and 256, with
# fewer and more tiles than SMs (a CTA's pipeline state carries from tile to tile, and both
# ping-pong warp groups take tiles)
IN_FLIGHT_SHAPES = [(512, 512, 64), (512, 512, 128), (512, 512, 192), (512, 512, 384), (4096, 2048, 448),
                    (4096, 2048, 768), (1376, 512, 4096), (1024, 16, 256), (1024, 16, 512), (4096, 16, 768)]


def sm90_in_flight_configs(dtype: str):
    """The sm90 catalog's tiles with wgmma in flight (SparseGemmConfig.mma_in_flight), without C."""
    from cutlass_sparse.describe import catalog

    fam = catalog.load("sm90")
    return [fam.config(tile, dtype, dtype, "row", 8, 8, reads_c=False) for tile in fam.in_flight]


# (M, N, K) for the tiles kept to the largest problems (catalog min_m, min_k), run by name at
# small ones: partial tiles along M, N and K, and more tiles than SMs (17 x 11 = 187 tiles)
LARGE_ONLY_SHAPES = [(300, 200, 320), (4352, 2100, 1088)]


def sm90_large_only_configs(dtype: str):
    """The sm90 catalog's tiles kept to the largest problems (min_m, min_k), without C."""
    from cutlass_sparse.describe import catalog

    fam = catalog.load("sm90")
    return [fam.config(tile, dtype, dtype, "row", 8, 8, reads_c=False) for tile, _ in fam.mk_bounds]


def sm90_large_only_c_configs():
    """The same tiles reading C: f16 out, and bf16 in with an f32 out (alignment 4)."""
    from cutlass_sparse.describe import catalog

    fam = catalog.load("sm90")
    return [fam.config(tile, element, out, "row", 8, 8 if out == element else 4)
            for tile, _ in fam.mk_bounds for element, out in (("f16", "f16"), ("bf16", "f32"))]


# (M, N, K) for the staged epilogue: partial tiles along M and N, one tile, and more tiles
# than SMs (34 x 8 = 272 of 128x256: each CTA stores several tiles through its chunk)
STAGED_SHAPES = [(300, 200, 320), (128, 256, 64), (4352, 2048, 256), (40, 8, 128)]


def sm90_staged_cases():
    """(kernel, D layout) for test_staged_epilogue: kernels without C whose epilogue is
    the staged store (SparseGemmConfig.staged_store): the default tile in both dtypes and D
    layouts (stmatrix, and .trans for a column-major D), with x column-major, and the tiles
    of 128 rows and K 128 and of 256 rows (two M blocks a thread, a narrower chunk)."""
    import dataclasses

    from cutlass_sparse.describe import catalog

    fam = catalog.load("sm90")
    tile = {t[0] + t[3]: t for t in fam.tiles if t[4] == "cooperative" and t[5] == "persistent"}
    default, k128, tall = tile[(128, 256, 64, 2, 1, 1)], tile[(128, 128, 128, 1, 2, 1)], tile[(256, 192, 64, 2, 1, 1)]
    for t, dtype, out, layout_b, layout_d in (
            (default, "f16", "f16", "row", "row"), (default, "bf16", "bf16", "row", "row"),
            (default, "f16", "f16", "row", "col"), (default, "bf16", "bf16", "col", "col"),
            (k128, "bf16", "bf16", "row", "row"), (k128, "f16", "f16", "col", "col"),
            (tall, "f16", "f16", "row", "row"), (tall, "bf16", "bf16", "row", "col")):
        config = fam.config(t, dtype, out, layout_b, 8, 8, reads_c=False)
        yield dataclasses.replace(config, layout_c=layout_d, staged_store=True), layout_d


def sm90_k256_configs(dtype: str):
    """The sm90 catalog's tile-K-256 kernels without C (test_k256_tiles_take_a_k_that_256_does_not_divide)."""
    from cutlass_sparse.describe import catalog

    fam = catalog.load("sm90")
    return [fam.config(t, dtype, dtype, "row", 8, 8, reads_c=False) for t in fam.tiles if t[0][2] == 256]


def issue4_configs(family: str, sm_count: int = 132):
    """Kernels the epilogue / split-K / batched / linear / plan tests use (so the warm-up
    compiles them in parallel; anything missed compiles on first use)."""
    import dataclasses

    from cutlass_sparse.describe import catalog, selection

    from cutlass_sparse.describe.problem import Split
    from cutlass_sparse.describe.helper_kernels import ReductionConfig

    def base(m, n, k, dtype, layout):
        if family == "sm90":
            tile, _ = selection.choose_sm90(m, n, k, sm_count)
            return catalog.load("sm90").config(tile, dtype, dtype, layout, 8, 8)
        return selection.config_for_shape(m, n, k, dtype, dtype, layout, sm_count)

    for activation in ACTIVATIONS:
        yield dataclasses.replace(base(256, 64, 512, "f16", "row"), activation=activation)
    yield dataclasses.replace(base(200, 64, 256, "f16", "row"), activation="relu")
    if family == "sm90":   # cs.linear writes D column-major on sm90: its kernels are planned (linear_problems)
        # sm90 runs a kernel without C where the call has no C (no bias, beta 0): both kinds
        for activation in ACTIVATIONS:
            yield dataclasses.replace(base(256, 64, 512, "f16", "row"), activation=activation, reads_c=False)
        return
    yield dataclasses.replace(base(192, 40, 256, "f16", "col"), activation="silu")     # linear
    for m, n, k in SM80_SPLIT_SHAPES:
        config = base(m, n, k, "f16", "row")
        yield config
        yield selection.gemm_variant(config, Split(2, "parallel"), "identity")
        yield ReductionConfig("f16", selection.reduction_alignment("f16", n), "identity")
    config = base(200, 48, 1000, "bf16", "col")
    yield dataclasses.replace(config, activation="gelu")
    yield selection.gemm_variant(config, Split(3, "parallel"), "gelu")
    yield ReductionConfig("bf16", selection.reduction_alignment("bf16", 48), "gelu")
    for m, n, k in ((200, 40, 100), (256, 64, 512)):
        for layout in LAYOUTS:
            for activation in ("tanh", "identity"):
                yield dataclasses.replace(base(m, n, k, "bf16", layout), activation=activation)
    for m, n, k in ((256, 64, 512), (200, 40, 1000), (33, 8, 128), (1024, 128, 4096), (128, 64, 256)):
        yield selection.config_for_shape(m, n, k, "s8", "s32", "col", sm_count)
    yield selection.config_for_shape(128, 64, 256, "s8", "s8", "col", sm_count)
    for m, n, k in ((256, 64, 512), (200, 40, 1000), (33, 8, 72)):
        for layout in LAYOUTS:
            yield selection.config_for_shape(m, n, k, "tf32", "f32", layout, sm_count)


def configs(sm_count: int = 132):
    """The sm80 kernels test_gpu_matmul's cases run, as cs.matmul's plans pick them."""
    from cutlass_sparse.describe.problem import Problem

    problems = [Problem.contiguous("sm80", m, n, k, element=dtype, element_out=out, layout_b=layout,
                                   sm_count=sm_count) for (m, n, k), dtype, out, layout in cases()]
    return [config for config, _ in planned_configs(problems)]


def planned_configs(problems) -> list[tuple[object, str]]:
    """(kernel, arch) that cs.matmul's family plans pick for these problems, found on a
    machine without a GPU by making each plan with the compile step recorded, not run."""
    from unittest import mock

    from cutlass_sparse.build import kernels
    from cutlass_sparse.launch import sm80
    from cutlass_sparse.plan import plans

    seen = []

    def record(config, arch, cache=None):
        seen.append((config, kernels.normalize_arch(arch)))
        return kernels.CompiledKernel(config, arch, f"planned-{config.name}-{arch}", b"",
                                      {"shared_bytes": 0, "threads": 128, "params_bytes": 8})

    plans.clear()
    with mock.patch.object(kernels, "get", record):
        for problem in problems:
            plans.make(problem)
    plans.clear()   # the plans hold stand-in kernels
    sm80.resolve.cache_clear()
    sm80.resolve_reduction.cache_clear()
    return list(dict.fromkeys(seen))


def session_configs(sm_count: int = 132, tests_only: bool = False) -> list[tuple[object, str]]:
    """(kernel, arch) for everything scripts/device/gpu_session.sh runs: the GPU tests, the
    split-K sweep, the benchmark, the profiler tables and the host-overhead script. Compiled
    on the CPU machine and carried, so device time is not spent compiling. The tests' kernels
    come first, the benchmark's and the 8-bit sweep's last: a warm-up cut short (a time limit)
    still serves the tests. tests_only: without the benchmark's and the sweep's own."""
    import importlib.util

    from cutlass_sparse.describe.problem import Problem
    from cutlass_sparse.plan import records
    from cutlass_sparse.profiler import tune
    from cutlass_sparse.describe.helper_kernels import CompressorConfig, LineCopyConfig

    def script(name):
        path = Path(__file__).resolve().parent.parent / "scripts" / name
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    sm80_items = list(configs(sm_count)) + list(issue4_configs("sm80", sm_count))
    sm90_items = [CompressorConfig(d, atom_k=a) for d in DTYPES for a in (64, 128)] + list(sm90_configs(sm_count))
    sm90_items += list(issue4_configs("sm90", sm_count))
    for family, (m, n, k) in [("sm80", (512, 16, 1024)), ("sm80", (256, 256, 256)), ("sm90", (1024, 16, 1024)),
                              ("sm90", (4096, 4096, 4096)), ("sm90", (4096, 16, 4096))]:   # profiler
        choices = records.candidates(family, k)
        items = tune.candidate_configs(choices, Problem.contiguous(family, m, n, k, sm_count=sm_count))
        (sm80_items if family == "sm80" else sm90_items).extend(items)
    bench = [selection_config(m, n, k, dtype, "sm90", sm_count) for dtype in DTYPES   # scripts/bench.py
             for m, n, k in script("bench.py").DEFAULT_SHAPES + script("bench.py").LLM_SHAPES]
    for family in ("sm80", "sm90"):   # scripts/host_overhead.py, scripts/run_gemm.py
        for m, n, k in ((128, 64, 128), (4096, 4096, 4096), (8192, 8192, 8192), (14336, 16, 4096), (4096, 128, 4096)):
            (sm80_items if family == "sm80" else sm90_items).append(
                selection_config(m, n, k, "f16", family, sm_count))
    sm90_items += [CompressorConfig("e4m3"), CompressorConfig("s8")]   # tests/test_gpu_fp8.py, test_gpu_int8.py
    sm90_items.append(LineCopyConfig())   # launch.staging: odd N, misaligned views
    sweep = script("device/sweep_8bit.py")
    swept = planned_configs([any_shape_cases.problem_of(case, sm_count)
                             for family in ("sm80", "sm90") for case in any_shape_cases.cases(family)]
                            + eager_problems(script("bench_eager.py"), sm_count) + linear_problems(sm_count)
                            + vector_bias_problems(sm_count)
                            + quantized_problems(sm_count, bench=True)
                            + quantized_problems(sm_count, bench=True, element="s8")
                            + pdl_problems(sm_count) + graph_problems(sm_count) + tail_twin_problems(sm_count))
    last = [] if tests_only else [(c, "sm_90a") for c in bench + sweep.CANDIDATES + sweep.SCALED + sweep.CANDIDATES_S8]
    unique = list(dict.fromkeys([(c, "sm_90") for c in sm80_items] + [(c, "sm_90a") for c in sm90_items] + swept
                                + last))
    return unique


def pdl_problems(sm_count: int = 132):
    """tests/test_gpu_pdl.py's chains and scripts/device/probe_pdl.py's shapes (row-major x)."""
    from cutlass_sparse.describe.problem import Problem

    shapes = [(512, n, 256, "relu") for n in (16, 64)] + [(256, n, 512, "identity") for n in (16, 32, 64)]
    shapes += [(m, n, k, "identity") for m, n, k in ((4096, 16, 4096), (14336, 16, 4096), (4096, 16, 14336),
                                                       (4096, 128, 4096), (4096, 512, 4096), (8192, 8192, 8192))]
    return [Problem.contiguous("sm90", m, n, k, activation=activation, sm_count=sm_count)
            for m, n, k, activation in shapes]


def quantized_problems(sm_count: int = 132, bench: bool = False, element: str = "e4m3", shapes=()):
    """What cs.linear_fp8 / cs.linear_int8 plan in tests/test_gpu_fp8.py / test_gpu_int8.py
    (bench: in scripts/bench.py --dtypes e4m3,s8 [--llm] as well; shapes: and bench.py --shapes
    of these (M, N, K))."""
    import dataclasses

    from cutlass_sparse.cli.bench import FP8_SHAPES, LLM_SHAPES
    from cutlass_sparse.cli.bench_quantized import OUT
    from cutlass_sparse.describe.problem import Epilogue, Problem

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    test = importlib.import_module("test_gpu_fp8" if element == "e4m3" else "test_gpu_int8")
    cases = [(shape, out, "identity") for shape in test.CASES for out in test.TOLERANCE] + \
        [((512, 64, 512), "bf16", "silu")]
    if element == "e4m3":   # e4m3 out for a following fp8 layer (and requantized after silu, with a bias)
        cases += [((512, 256, 1024), "e4m3", "identity"), ((4096, 7, 4096), "e4m3", "identity"),
                  ((512, 64, 512), "e4m3", "silu")]
    if element == "s8":   # the raw int32 product, int8 requantized, the input checks' layer, the bias test
        cases += [(shape, "s32", "identity") for shape in test.CASES + [(128, 32, 4096), (512, 64, 512)]]
        cases += [((256, 64, 512), "s8", "identity"), ((128, 8, 64), "bf16", "identity"),
                  ((256, 64, 512), "bf16", "silu")]
    cases += [((256, 16, 224), "bf16", "identity")]   # test_gpu_fp8's K = 200, padded to 224
    if element == "e4m3":   # test_gpu_fp8's [2, 3, K] activations, and the stream-K twin's shapes
        cases += [((256, 6, 512), "bf16", "identity")] + [(shape, "bf16", "identity") for shape in test.TWIN_CASES]
    if bench:
        cases += [(shape, OUT[element], "identity") for shape in FP8_SHAPES + LLM_SHAPES]
    cases += [(tuple(shape), OUT[element], "identity") for shape in shapes]
    problems = [dataclasses.replace(
        Problem.contiguous("sm90", m, n, k, element=element, element_out=out, layout_b="col", out_layout="col",
                           sm_count=sm_count),
        epilogue=Epilogue(activation=activation, scales="none" if out == "s32" else "row_col"))
        for (m, n, k), out, activation in cases]
    if element == "e4m3":   # e5m2 activations (test_gpu_fp8's e5m2 tests, the torch one at 512x64x512)
        problems += [dataclasses.replace(
            Problem.contiguous("sm90", m, n, k, element=element, element_out="bf16", layout_b="col",
                               out_layout="col", sm_count=sm_count),
            epilogue=Epilogue(scales="row_col"), element_x="e5m2")
            for m, n, k in test.E5M2_CASES + [(512, 64, 512)] + (list(FP8_SHAPES) if bench else [])]
    return problems


def selection_config(m, n, k, dtype, family, sm_count):
    from cutlass_sparse.describe import selection

    return selection.config_for_shape(m, n, k, dtype, dtype, "row", sm_count, family)


def linear_problem(m, n, k, activation="identity", sm_count=132, element="f16"):
    """What cs.linear asks of the sm90 family: x.T column-major; D as linear_out_layout says."""
    from cutlass_sparse.describe import dtypes, selection
    from cutlass_sparse.describe.problem import Problem

    layout = selection.linear_out_layout(n, dtypes.numpy_dtype(element).itemsize)
    return Problem.contiguous("sm90", m, n, k, element=element, layout_b="col", activation=activation,
                              sm_count=sm_count, out_layout="col" if layout == "col" else None)


def vector_bias_problems(sm_count: int = 132):
    """sm90 cs.matmul calls with a row bias (the scaled epilogue's vector, no C):
    test_gpu_epilogue_split_k's test_bias and test_gpu_graphs' bias case."""
    from cutlass_sparse.describe.problem import Problem

    return [Problem.contiguous("sm90", m, n, k, activation="relu", sm_count=sm_count).with_bias()
            for m, n, k in ((200, 64, 256), (256, 64, 512))]


def linear_problems(sm_count: int = 132):
    """The sm90 cs.linear calls of the GPU tests (test_gpu_epilogue_split_k, test_gpu_torch),
    with a bias (a C with the bias folded in) and without."""
    problems = [linear_problem(192, 40, 256, "silu", sm_count)] + [
        linear_problem(256, 7, 512, "relu", sm_count, element) for element in DTYPES]
    # test_gpu_torch's [..., K] x: 10, 12 and 1 tokens, plain and with a bias and relu
    problems += [linear_problem(256, n, 512, activation, sm_count) for n in (10, 12, 1)
                 for activation in ("identity", "relu")]
    return problems + [p.with_bias() for p in problems]


def selection_layout(tokens: int, element: str = "f16") -> str:
    from cutlass_sparse.describe import dtypes, selection

    return selection.linear_out_layout(tokens, dtypes.numpy_dtype(element).itemsize)


# tests/test_gpu_tail_twin.py: 36 x 8 tiles of 128x256 (2.18 waves) run the stream-K twin;
# N 1792 (7 N tiles, 1.91 waves) in the same range of N runs the persistent kernel
TAIL_TWIN_M, TAIL_TWIN_N, TAIL_TWIN_K, TAIL_PERSISTENT_N = 4608, 2048, 4096, 1792


def tail_twin_problems(sm_count: int = 132):
    """tests/test_gpu_tail_twin.py's calls: x row- and column-major (cs.linear's), a bias
    with relu, C, and the persistent kernel of the same range."""
    from cutlass_sparse.describe.problem import Problem

    def problem(n=TAIL_TWIN_N, element="f16", layout="row", activation="identity"):
        return Problem.contiguous("sm90", TAIL_TWIN_M, n, TAIL_TWIN_K, element=element, layout_b=layout,
                                  activation=activation, sm_count=sm_count)

    plain = [problem(element=e, layout=layout) for e in DTYPES for layout in LAYOUTS]
    plain += [problem(n, "bf16") for n in (TAIL_PERSISTENT_N, TAIL_TWIN_N - 8)]
    with_c = problem().with_(c=problem().x, epilogue=dataclasses.replace(problem().epilogue, beta=-1.5))
    return plain + [problem(activation="relu").with_bias(), with_c]


def graph_problems(sm_count: int = 132):
    """tests/test_gpu_graphs.py's problems not run elsewhere (row-major x, N odd)."""
    from cutlass_sparse.describe.problem import Problem

    return [Problem.contiguous("sm90", 256, 255, 4096, sm_count=sm_count)]


def eager_problems(bench, sm_count: int = 132):
    """The sm90 problems scripts/bench_eager.py runs (cs.linear reads x.T column-major and
    writes D column-major, so a down-projection reads the up-projection's result
    column-major too)."""
    from cutlass_sparse.describe.problem import Problem

    def problem(m, n, k, layout):
        return Problem.contiguous("sm90", m, n, k, layout_b=layout, sm_count=sm_count)

    m, n, k = bench.HOST_SHAPE
    found = [problem(m, n, k, "row"), problem(m, n, k, "col"), linear_problem(m, n, k, sm_count=sm_count)]
    for width, hidden in bench.MLP_SHAPES:
        for tokens in bench.TOKENS + bench.DECODE_TOKENS:   # down reads up's D: row-major x where D is
            down_x = "row" if selection_layout(tokens) == "row" else "col"
            found += [linear_problem(hidden, tokens, width, bench.ACTIVATION, sm_count),
                      linear_problem(width, tokens, hidden, sm_count=sm_count) if down_x == "col" else
                      Problem.contiguous("sm90", width, tokens, hidden, layout_b="row", sm_count=sm_count)]
    for m, n, k in bench.ODD_PAIRS:
        found += [problem(m, n, k, "row"), problem(m, n + 1, k, "row")]
    found += [linear_problem(4096, n, 4096, sm_count=sm_count) for n in bench.NEW_N]
    return found


if __name__ == "__main__":
    from cutlass_sparse.build import warmup

    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--sm-count", type=int, default=132)
    parser.add_argument("--family", default="sm80", choices=["sm80", "sm90", "session", "tests"],
                        help="session: every kernel of scripts/device/gpu_session.sh, each for its arch; "
                             "tests: the GPU tests' alone")
    args = parser.parse_args()
    if args.family in ("session", "tests"):
        items = session_configs(args.sm_count, tests_only=args.family == "tests")
        results = []
        for arch in ("sm_90", "sm_90a"):
            results += warmup.compile_all([c for c, a in items if a == arch], arch, args.jobs)
    elif args.family == "sm90":
        from cutlass_sparse.describe.helper_kernels import CompressorConfig

        wanted = [CompressorConfig(d) for d in DTYPES] + list(sm90_configs(args.sm_count))
        wanted += list(issue4_configs("sm90", args.sm_count))
        results = warmup.compile_all(wanted, args.arch, args.jobs)
    else:
        wanted = list(configs(args.sm_count)) + list(issue4_configs("sm80", args.sm_count))
        results = warmup.compile_all(wanted, args.arch, args.jobs)
    for name, _, status, seconds in results:
        print(f"{status:10s} {seconds:6.1f} s  {name}")
    sys.exit(any(status.startswith("failed") for _, _, status, _ in results))

