"""The stream-K twin of the 128x256x64 2x1 tile where a part-empty last wave splits
(sm90_choice.tail_twin), without a GPU: CUTLASS's stream-K arithmetic copied to the host,
the fitted rule against what the H100 measured, and a range of N holding both kernels.
The twins' results are checked on the GPU (tests/test_gpu_tail_twin.py) and their speed
by scripts/device/probe_streamk.py (docs/probe_streamk_h100_session32.log)."""
import dataclasses

import pytest

from cutlass_sparse.build import kernels
from cutlass_sparse.describe import selection
from cutlass_sparse.describe.problem import Problem
from cutlass_sparse.launch import grid, sm90_choice
from cutlass_sparse.plan import plans, presets

TILE, CLUSTER = (128, 256, 64), (2, 1)
# (M, N, K) -> the workspace CUTLASS's heuristic decomposition asked for on the H100 (the
# setup entry's report, f16, 128x256x64 2x1 stream-K, swizzle 1; docs/probe_streamk_h100_session3*.log):
# 128 x 256 fp32 partials per stream-K tile plus 2 x 32 barrier bits per tile, 128-byte rounded
MEASURED_WORKSPACE = {
    (3584, 4096, 18944): 24118784, (5120, 2048, 13824): 24643072, (18944, 1024, 3584): 25691776,
    (4608, 2048, 8192): 20448512, (6656, 4096, 4096): 22545792,
    (4096, 1280, 8192): 20972800, (4096, 1536, 8192): 25167360, (6144, 1536, 4096): 20448512,
    (4096, 2048, 14336): 0, (6144, 2048, 4096): 0, (13824, 2048, 5120): 0, (8448, 8192, 8192): 0,
    (4096, 4096, 4096): 0, (5120, 4096, 27648): 0, (28672, 2048, 8192): 0,
}


@pytest.mark.parametrize("shape", sorted(MEASURED_WORKSPACE))
def test_host_stream_k_tiles_give_the_workspace_cutlass_asked_for(shape):
    m, n, k = shape
    tiles, per_wave, split = grid.stream_k_tiles(m, n, k, TILE, CLUSTER, 132, 1)
    assert per_wave == 132 and tiles == -(-m // 128) * -(-n // 256)
    partials, barriers = grid.stream_k_workspace(split, TILE)
    assert partials == split * 128 * 256 * 4 and partials + barriers == MEASURED_WORKSPACE[shape]


# (M, N, K, dtype) -> twin / persistent TFLOP/s as measured (session 31 and 32 probes)
MEASURED_GAIN = {
    (4608, 2048, 4096, "f16"): 1.079, (4608, 2048, 8192, "f16"): 1.122, (4608, 2048, 14336, "f16"): 1.172,
    (4608, 2048, 28672, "f16"): 1.195, (4608, 2048, 8192, "bf16"): 1.134,
    (5120, 2048, 4096, "f16"): 0.943, (5120, 2048, 8192, "f16"): 0.998, (5120, 2048, 13824, "f16"): 1.039,
    (5120, 2048, 13824, "bf16"): 1.046, (5120, 2048, 28672, "f16"): 0.989, (5120, 2048, 28672, "bf16"): 1.004,
    (3584, 4096, 4096, "f16"): 0.941, (3584, 4096, 8192, "f16"): 1.017, (3584, 4096, 14336, "f16"): 1.044,
    (3584, 4096, 18944, "f16"): 1.066, (3584, 4096, 18944, "bf16"): 1.083,
    (18944, 1024, 3584, "f16"): 0.941, (18944, 1024, 8192, "f16"): 0.989, (18944, 1024, 14336, "f16"): 1.012,
    (6656, 4096, 4096, "f16"): 0.965, (6656, 4096, 8192, "f16"): 0.993, (6656, 4096, 14336, "f16"): 1.006,
    # under two waves (CUTLASS splits every tile) and more 2.18-wave rows, predicted before they ran
    (4096, 1280, 4096, "f16"): 1.079, (4096, 1280, 8192, "f16"): 1.231, (4096, 1280, 14336, "f16"): 1.293,
    (4096, 1536, 8192, "f16"): 1.066, (6144, 1536, 4096, "f16"): 1.062, (6144, 1536, 4096, "bf16"): 1.082,
    (4608, 2048, 4096, "bf16"): 1.094,
}


# e4m3 (bf16 out), twin / persistent TFLOP/s of the 128x256x128 2x1 tile, swizzle 1 (session 34,
# docs/probe_streamk_e4m3_h100_session34_call1.log)
MEASURED_GAIN_E4M3 = {
    (4608, 2048, 4096): 0.961, (4608, 2048, 8192): 1.119, (4608, 2048, 14336): 1.161, (4608, 2048, 28672): 1.212,
    (4096, 1280, 4096): 0.958, (4096, 1280, 8192): 1.155, (4096, 1280, 14336): 1.249,
    (3584, 4096, 4096): 0.894, (3584, 4096, 14336): 1.038, (3584, 4096, 18944): 1.053,
    (6656, 4096, 4096): 0.937, (6656, 4096, 14336): 1.017, (6144, 1536, 4096): 0.958, (4096, 1536, 8192): 0.982,
}


def _problem(m, n, k, dtype="f16", **changes):
    return Problem.contiguous("sm90", m, n, k, element=dtype, **changes)


@pytest.mark.parametrize("row", sorted(MEASURED_GAIN))
def test_the_rule_takes_the_twin_where_it_won_and_never_where_it_lost_more_than_noise(row):
    # the one misprediction: 5120x2048x28672, 1.07x predicted, 0.99-1.00x measured
    m, n, k, dtype = row
    config, scheduling = sm90_choice.resolve(_problem(m, n, k, dtype), None)
    took = scheduling.decomposition == "heuristic"
    if took:
        assert config.tile_scheduler == "streamk" and config.load_registers == 56 and config.threadblock == TILE
    assert not took or MEASURED_GAIN[row] > 0.985           # it loses no more than noise where it runs
    assert took or MEASURED_GAIN[row] < 1.05                 # and misses no large gain


@pytest.mark.parametrize("row", sorted(MEASURED_GAIN_E4M3))
def test_the_8_bit_rule_takes_the_fp8_twin_where_it_won_and_never_where_it_lost(row):
    m, n, k = row
    config, scheduling = sm90_choice.resolve(_problem(m, n, k, "e4m3", layout_b="col", element_out="bf16"), None)
    took = scheduling.decomposition == "heuristic"
    if took:
        assert config.tile_scheduler == "streamk" and config.load_registers == 56
        assert config.threadblock == (128, 256, 128) and config.cluster == (2, 1, 1)
    assert took == (MEASURED_GAIN_E4M3[row] > 1.03)


def test_the_8_bit_twin_pays_more_per_k_than_the_16_bit_one():
    # 2.18 waves at K 4096: the f16 twin gained 8%, the e4m3 one lost 4% (its mainloop is twice as fast)
    assert selection.tail_split_gain(2.18, 4096, 2) > selection.TAIL_GAIN > 1.0 > selection.tail_split_gain(2.18, 4096, 1)


def test_the_fitted_gain_is_not_taken_below_one_full_wave_or_without_a_split():
    assert grid.stream_k_tiles(1024, 2048, 8192, TILE, CLUSTER, 132, 1)[2] == 64   # CUTLASS would split ...
    assert sm90_choice.resolve(_problem(1024, 2048, 8192), None)[1].decomposition == "data_parallel"  # ... untimed
    # 2.91 waves: CUTLASS decomposes data-parallel (the tail is more than half a wave)
    assert sm90_choice.resolve(_problem(6144, 2048, 14336), None)[1].decomposition == "data_parallel"
    assert selection.tail_split_gain(2.18, 28672) > selection.tail_split_gain(2.18, 4096) > 1.0


def test_no_twin_for_a_split_the_caller_named_or_their_kernel_or_int8_inputs():
    problem = _problem(4608, 2048, 8192)
    chosen, _ = sm90_choice.resolve(problem, None)
    assert chosen.tile_scheduler == "streamk"
    persistent = selection.config_for_shape(4608, 2048, 8192, "f16", "f16", "row", 132, "sm90")
    assert persistent.tile_scheduler == "persistent"   # warm-up's view of the range's top is the catalog's
    config, scheduling = sm90_choice.resolve(problem, persistent)
    assert config.tile_scheduler == "persistent" and scheduling.decomposition == "data_parallel"
    _, scheduling = sm90_choice.resolve(problem.with_(split_k=2), None)
    assert scheduling == sm90_choice.Scheduling("split_k", 2)
    config, scheduling = sm90_choice.resolve(_problem(4608, 2048, 8192, "s8", layout_b="col", element_out="s8"),
                                             None)
    assert config.tile_scheduler == "persistent" and scheduling.decomposition == "data_parallel"   # unmeasured
    config, scheduling = sm90_choice.resolve(_problem(4608, 2048, 8192, "e4m3", layout_b="col", element_out="bf16"),
                                             None)
    assert config.tile_scheduler == "streamk" and config.threadblock == (128, 256, 128)


def _asked(problem):
    return kernels.first_asked(lambda: plans.make(problem))[0]


def test_a_range_of_n_holds_the_persistent_kernel_and_its_twin():
    # M 4608 (36 tiles), K 8192, N in (1024, 2048]: 5 N tiles (1.36 waves) and 8 (2.18) run
    # the twin; 6 and 7 (1.64 and 1.91 waves: the tail is over half a wave) do not split
    plans.clear()
    low, high = _problem(4608, 1792, 8192), _problem(4608, 2048, 8192)
    assert selection.n_range(1792) == selection.n_range(2048)
    assert plans.range_key(low, None, None) != plans.range_key(high, None, None)
    assert _asked(low).tile_scheduler == "persistent"
    assert _asked(high).tile_scheduler == "streamk"
    assert _asked(_problem(4608, 1800, 8192)).tile_scheduler == "streamk"
    assert _asked(_problem(4608, 1280, 8192)).tile_scheduler == "streamk"
    assert _asked(_problem(4608, 1288, 8192)).tile_scheduler == "persistent"


def test_warm_up_token_counts_stand_for_every_n_where_a_twin_may_run():
    # every kernel default selection picks for any N up to 2048 at shapes whose last wave
    # splits for some N is among those it picks for the preset's representatives
    shapes = ((4608, 8192), (3584, 18944))
    ns = presets.token_counts(2048, "sm90")

    def found(n_values):
        return {_asked(_problem(m, n, k, layout_b=layout)).name for n in n_values for m, k in shapes
                for layout in ("row", "col")}

    every = found(range(769, 2049))
    assert any("streamk" in name for name in every) and any("streamk" not in name for name in every)
    assert found(n for n in ns if n > 768) == every


def test_the_profiler_times_the_twin_where_its_scheduler_splits_and_records_it():
    from cutlass_sparse.plan.records import Choice, candidates
    from cutlass_sparse.profiler import tune

    for element, out, tile in (("f16", None, (128, 256, 64)), ("e4m3", "bf16", (128, 256, 128))):
        twins = [c for c in candidates("sm90", 8192, element, out) if c.twin]
        assert twins and {(c.tile[0], c.tile[3]) for c in twins} == {(tile, (2, 1, 1))}
    assert not any(c.twin for c in candidates("sm90", 8192, "s8", "s32"))
    splits, whole = _problem(4608, 2048, 8192), _problem(4096, 4096, 4096)
    assert any(c.twin for c in tune.profiled_choices(splits))
    assert not any(c.twin for c in tune.profiled_choices(whole))     # it would run data-parallel
    twin = next(c for c in tune.profiled_choices(splits) if c.twin and not c.swizzle)
    assert Choice.from_json(twin.to_json()) == twin and "stream-K twin" in twin.label
    old = {k: v for k, v in twin.to_json().items() if k != "twin"}   # a record from before twins
    assert Choice.from_json(old) == dataclasses.replace(twin, twin=False)
    config, scheduling = sm90_choice.resolve(splits, None, twin)
    assert scheduling.decomposition == "heuristic" and config == sm90_choice.resolve(splits, None)[0]
    # the profiler compiles the binary selection runs
    (compiled,) = tune.candidate_configs([twin], splits)
    assert kernels.key_for(compiled, "sm_90a") == kernels.key_for(_asked(splits), "sm_90a")


def test_the_streams_shared_workspace_holds_every_twin_shapes():
    # a twin launch takes its stream's shared workspace (stream_workspaces), sized once per
    # kernel and SM count: it must hold what CUTLASS asks for at any shape the twin runs
    from types import SimpleNamespace

    from cutlass_sparse.launch import sm90_prepare

    checked = set()
    for m in range(256, 20000, 640):
        for n in range(256, 8193, 256):
            problem = _problem(m, n, 8192)
            config, scheduling = sm90_choice.resolve(problem, None)
            if scheduling.decomposition != "heuristic":
                continue
            plan = SimpleNamespace(config=config, scheduling=scheduling, kernel_problem=problem,
                                   swizzle=config.swizzle, raster=config.raster)
            computed = sm90_prepare.host_stream_k(plan)
            bound = sm90_prepare.shared_workspace_bytes(plan)
            assert computed is not None and 0 < computed[1] <= bound
            checked.add(computed[1])
    assert len(checked) > 20


def test_range_key_resolves_no_kernel_for_the_heuristic(monkeypatch):
    # range_key runs for every new N: it answers the heuristic's twin question without
    # building a configuration (sm90_choice.runs_tail_twin)
    def refuse(*args, **kwargs):
        raise AssertionError("resolved")

    keys = {}
    monkeypatch.setattr(sm90_choice, "resolve", refuse)
    for m, n, k in ((4096, 24, 4096), (4096, 300, 4096), (14336, 512, 4096), (4608, 1792, 8192), (4608, 2048, 8192)):
        keys[n] = plans.range_key(_problem(m, n, k), None, None)
    assert keys[1792][-1] is False and keys[2048][-1] is True


def test_a_recorded_twin_runs_the_persistent_kernel_where_the_last_wave_does_not_split():
    from cutlass_sparse.profiler import tune

    twin = next(c for c in tune.profiled_choices(_problem(4608, 2048, 8192)) if c.twin and not c.swizzle)
    # the record serves its bucket: at 1536 tokens (1.64 waves, the tail over half a wave) it
    # must not run the stream-K kernel data-parallel
    whole = _problem(4608, 1536, 8192)
    config, scheduling = sm90_choice.resolve(whole, None, twin)
    assert config.tile_scheduler == "persistent" and scheduling.decomposition == "data_parallel"
    assert plans.range_key(whole, None, twin) != plans.range_key(_problem(4608, 2048, 8192), None, twin)


def test_threads_on_the_per_thread_default_stream_get_workspaces_of_their_own():
    import threading
    from types import SimpleNamespace

    from cutlass_sparse.launch import stream_workspaces

    seen = []
    for ptr in (stream_workspaces.PER_THREAD_STREAM, 0x1234):
        stream, both = SimpleNamespace(ptr=ptr), threading.Barrier(2)   # alive at once: idents differ

        def ask(s=stream, both=both):
            both.wait()
            seen.append(stream_workspaces.identity(s))
            both.wait()

        threads = [threading.Thread(target=ask) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    ptds, plain = seen[:2], seen[2:]
    assert ptds[0] != ptds[1]          # one handle, two concurrent streams
    assert plain[0] == plain[1]        # one stream: its launches run in turn


def test_range_keys_quick_answer_is_resolves():
    # plans.range_key asks sm90_choice.runs_tail_twin at every new N instead of resolving the
    # kernel: both must agree everywhere (sizes, both types, x and D layouts, N not in whole rows)
    import random

    rng = random.Random(5)
    checked = twins = 0
    for _ in range(3000):
        m, n, k = rng.randrange(128, 24000), rng.randrange(1, 9000), rng.choice((1024, 4096, 8192, 14336, 28672))
        dtype, layout = rng.choice(("f16", "bf16")), rng.choice(("row", "col"))
        out = rng.choice((None, "col")) if layout == "col" else None
        problem = _problem(m, n, k, dtype, layout_b=layout, out_layout=out)
        problem = problem.with_(n=sm90_choice.kernel_n(problem))
        assert sm90_choice.runs_tail_twin(problem) == (sm90_choice.resolve(problem, None)[1].decomposition ==
                                                       "heuristic"), problem
        checked += 1
        twins += sm90_choice.runs_tail_twin(problem)
    assert checked == 3000 and twins > 30


def test_a_streams_shared_workspace_lives_as_long_as_a_launch_holds_it(monkeypatch):
    # stream_workspaces keeps no buffer of its own: one per (device, stream, size) while some
    # launch holds it, so streams that come and go never leave two for one stream alive
    import sys
    import types

    from cutlass_sparse.launch import stream_workspaces

    class Buffer:   # a CuPy array's stand-in (weakly referenced, like cupy.ndarray)
        pass

    class Context:
        def __init__(self, ptr=0):
            self.ptr = ptr

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    made = []

    def empty(nbytes, dtype=None):
        made.append(Buffer())
        return made[-1]

    fake = types.SimpleNamespace(empty=empty, uint8="uint8", cuda=types.SimpleNamespace(Device=Context))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(stream_workspaces, "_buffers", stream_workspaces.weakref.WeakValueDictionary())
    one, two = Context(0x100), Context(0x200)
    held = stream_workspaces.for_stream(0, one, 1 << 20)          # a launch holds it
    assert stream_workspaces.for_stream(0, one, 1 << 20) is held    # the stream's next launch: the same
    assert stream_workspaces.for_stream(0, two, 1 << 20) is not held   # another stream: its own
    assert len(made) == 2
    made.clear()
    del held                                                        # no launch holds it any more
    assert stream_workspaces.for_stream(0, one, 1 << 20) is made[0]   # a new one, the old one gone
    assert len(stream_workspaces._buffers) == 1


# (dtype, M, N, K) -> (the finer tile selection picks, persistent; the 128x256 tile's twin),
# TFLOP/s measured in one process (docs/probe_streamk_8bit_h100_session34_call2.log, the two
# 3072 x 2048 rows; the rest docs/ab_twin_tile_h100_session34_call3.log)
FINER_OR_TWIN = {
    ("e4m3", 3072, 2048, 28672): (1595.8, 1934.6),
    ("e4m3", 3072, 2048, 8192): (1623.2, 1583.4),
    ("f16", 5120, 1024, 13824): (914.5, 1030.7), ("bf16", 5120, 1024, 13824): (931.4, 1058.8),
    ("f16", 4608, 1024, 14336): (831.5, 1047.3), ("f16", 3072, 1536, 8192): (711.8, 954.4),
    ("f16", 6144, 768, 13824): (827.0, 1032.0), ("f16", 11008, 512, 14336): (965.8, 1030.5),
    ("f16", 18944, 256, 13824): (774.2, 874.8), ("f16", 3072, 1536, 4096): (689.7, 797.5),
    ("bf16", 4608, 1024, 8192): (813.7, 970.6), ("e4m3", 4608, 1024, 14336): (1330.3, 1769.1),
    ("e4m3", 11008, 512, 28672): (1772.7, 1982.3), ("e4m3", 3072, 1536, 14336): (1275.3, 1793.2),
}


@pytest.mark.parametrize("row", sorted(FINER_OR_TWIN))
def test_another_tiles_twin_replaces_a_finer_pick_where_it_ran_faster(row):
    dtype, m, n, k = row
    problem = _problem(m, n, k, dtype, layout_b="col", element_out="bf16") if dtype == "e4m3" else \
        _problem(m, n, k, dtype)
    picked, _ = selection.choose_sm90(m, n, k, 132, None, dtype, problem.element_out)
    assert picked[0][:2] == (128, 128)
    config, scheduling = sm90_choice.resolve(problem, None)
    finer, twin = FINER_OR_TWIN[row]
    took = scheduling.decomposition == "heuristic"
    assert took == (twin > finer * 1.03)
    if took:
        assert config.threadblock[:2] == (128, 256) and config.tile_scheduler == "streamk"
        assert plans._runs_twin(problem, None)   # the range key says so too (sm90_choice.runs_tail_twin)


def test_the_pick_s_own_tile_in_other_clusters_is_not_replaced_by_its_twin():
    # 18944 x 512: 128x256 in 4x1 clusters (the cluster rule's pick); its 2x1 twin is unmeasured there
    problem = _problem(18944, 512, 28672)
    assert sm90_choice.resolve(problem, None)[0].cluster == (4, 1, 1)


def test_a_recorded_twin_keys_its_range_as_make_does(monkeypatch):
    """make puts the choice's split (1) into the problem before keying it: the twin flag must
    still tell a recorded twin's N that split from those that do not (review M2), and the
    eager path's build-ahead must find the N that share a recorded plan's kernel (review M1)."""
    from types import SimpleNamespace

    from cutlass_sparse.profiler import tune

    twin = next(c for c in tune.profiled_choices(_problem(4608, 2048, 8192)) if c.twin and not c.swizzle)

    def as_made(problem):
        return dataclasses.replace(problem, split_k=twin.split_k, split_k_mode=twin.split_k_mode)

    splits, whole = _problem(4608, 2048, 8192), _problem(4608, 1536, 8192)
    assert plans.range_key(as_made(splits), None, twin) != plans.range_key(as_made(whole), None, twin)
    plan = SimpleNamespace(config=SimpleNamespace(element="f16"), asked=(None, twin), problem=as_made(splits))
    others = [_problem(4608, n, 8192) for n in (1536, 1792, 1800, 2040)]
    assert [q.n for q in plans.sharing(plan, others)] == [1800, 2040]   # their tails split, as 2048's
    assert all(q.split_k is None for q in plans.sharing(plan, others))   # the caller's problems, as given
