"""plan.stand_in: which default-family sm90 calls run on the sm80 family while their
GEMM compiles in a background process, and when they stop (no GPU: the background start
and the lock are replaced; the cache is an empty one of the test's own, so the sm90
kernel really is missing)."""
import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse.build import background, kernels
from cutlass_sparse.describe.problem import Problem
from cutlass_sparse.plan import plans, stand_in


@pytest.fixture
def cold(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", str(tmp_path / "cs.db"))
    for name in ("CUTLASS_SPARSE_NO_COMPILE", "CUTLASS_SPARSE_STAND_IN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(stand_in, "CHECK_EVERY_S", 0.0)
    monkeypatch.setattr(stand_in, "_capturing", lambda: False)                   # no stream to ask
    monkeypatch.setattr(plans, "recorded_choice", lambda problem, config: None)   # no GPU to name records by
    started, compiling = [], {"on": True}
    monkeypatch.setattr(background, "start", lambda items: started.append(items) or (4242, tmp_path / "log"))
    monkeypatch.setattr(background, "under_way", lambda config, arch: compiling["on"])
    monkeypatch.setattr(background, "running", lambda: len(stand_in._started))   # the fake starts no process
    stand_in.clear()
    plans.clear()
    yield started, compiling
    stand_in.clear()
    plans.clear()


def _problem(n=4096):
    return Problem.contiguous("sm90", 4096, n, 4096, element="f16", arch="sm_90", sm_count=132)


def test_a_missing_sm90_gemm_compiles_once_in_the_background_while_calls_stand_in(cold):
    started, compiling = cold
    kernel = stand_in.awaited_kernel(_problem())
    assert kernel is not None and kernel[0].family == "sm90" and kernel[1] == "sm_90a"
    assert started == [[kernel]]
    assert stand_in.awaited_kernel(_problem()) == kernel            # still compiling
    assert stand_in.awaited_kernel(_problem(4000)) == kernel        # another N of that kernel: no second start
    assert len(started) == 1 and stand_in.standing_in()


def test_calls_take_the_sm90_plan_once_the_kernel_is_cached(cold, monkeypatch):
    started, compiling = cold
    kernel = stand_in.awaited_kernel(_problem())
    sw = cs.compress(cs.prune_2to4(np.random.default_rng(1).standard_normal((64, 32)).astype(np.float16)),
                     layout="sm90")
    sw80 = stand_in.sm80_weight(sw, kernel)
    assert sw80.layout == "sm80" and stand_in.sm80_weight(sw, kernel) is sw80        # converted once
    np.testing.assert_array_equal(sw80.to_dense(), sw.to_dense())
    compiling["on"] = False
    real_cached = kernels.cached
    monkeypatch.setattr(kernels, "cached", lambda config, arch, cache=None:
                        (config, arch) == kernel or real_cached(config, arch, cache))
    assert stand_in.awaited_kernel(_problem()) is None
    assert not stand_in.standing_in() and stand_in._sm80_weights == {}      # the copies go with the stand-in
    assert stand_in.awaited_kernel(_problem(4000)) is None


def test_a_compile_that_ended_without_a_kernel_stops_the_stand_in(cold, monkeypatch):
    started, compiling = cold
    assert stand_in.awaited_kernel(_problem()) is not None
    compiling["on"] = False
    assert stand_in.awaited_kernel(_problem()) is not None    # just started: its process may not hold the lock yet
    monkeypatch.setattr(stand_in, "START_GRACE_S", 0.0)
    assert stand_in.awaited_kernel(_problem()) is None        # the sm90 plan compiles here and reports the failure


def test_no_stand_in_where_it_is_turned_off_or_not_needed(cold, monkeypatch):
    started, _ = cold
    sm80 = Problem.contiguous("sm80", 256, 256, 256, element="f16", arch="sm_90", sm_count=132)
    assert stand_in.awaited_kernel(sm80) is None
    monkeypatch.setenv("CUTLASS_SPARSE_STAND_IN", "0")
    assert stand_in.awaited_kernel(_problem()) is None
    monkeypatch.setenv("CUTLASS_SPARSE_STAND_IN", "1")
    monkeypatch.setenv("CUTLASS_SPARSE_NO_COMPILE", "1")
    assert stand_in.awaited_kernel(_problem()) is None
    monkeypatch.delenv("CUTLASS_SPARSE_NO_COMPILE")
    monkeypatch.setattr(kernels, "cached", lambda config, arch, cache=None: True)
    assert stand_in.awaited_kernel(_problem()) is None
    assert started == []


def test_compiles_beyond_what_memory_and_cores_allow_wait_in_line(cold, monkeypatch):
    # One sm90 compile holds about 5 GB: a loop needing three kernels on a machine with
    # room for one starts them one after another; every call stands in meanwhile.
    started, compiling = cold
    monkeypatch.setattr(stand_in, "max_compiles", lambda: 1)
    problems = [_problem(n) for n in (4096, 16, 128)]    # three tiles
    kernels_awaited = [stand_in.awaited_kernel(p) for p in problems]
    assert len(set(kernels_awaited)) == 3 and None not in kernels_awaited
    assert started == [[kernels_awaited[0]]]
    assert [stand_in.awaited_kernel(p) for p in problems[1:]] == kernels_awaited[1:]   # in line: no start
    assert len(started) == 1
    real_cached = kernels.cached
    landed = {kernels_awaited[0]}
    monkeypatch.setattr(kernels, "cached", lambda config, arch, cache=None:
                        (config, arch) in landed or real_cached(config, arch, cache))
    compiling["on"] = False
    # the first kernel landed; its problem is never called again, but any standing-in call
    # ends it and starts the next one in line
    assert stand_in.awaited_kernel(problems[2]) == kernels_awaited[2]
    assert started[1] == [kernels_awaited[1]] and len(started) == 2
    assert stand_in.awaited_kernel(problems[0]) is None
    compiling["on"] = True
    assert stand_in.awaited_kernel(problems[2]) == kernels_awaited[2] and len(started) == 2


def test_8_bit_weights_never_stand_in(cold):
    started, _ = cold
    for element, out in (("s8", "s32"), ("e4m3", "bf16")):
        problem = Problem.contiguous("sm90", 4096, 4096, 4096, element=element, element_out=out, layout_b="col",
                                     arch="sm_90", sm_count=132)
        assert stand_in.awaited_kernel(problem) is None
    assert started == []


def test_a_failed_start_or_conversion_ends_the_stand_in_for_good(cold, monkeypatch):
    started, compiling = cold

    def refuse(items):
        raise OSError("no room")

    monkeypatch.setattr(background, "start", refuse)
    assert stand_in.awaited_kernel(_problem()) is None
    assert stand_in.awaited_kernel(_problem()) is None and not stand_in.standing_in()   # not tried again
    stand_in.clear()
    monkeypatch.setattr(background, "start", lambda items: started.append(items) or (4242, "log"))
    kernel = stand_in.awaited_kernel(_problem())
    assert kernel is not None

    class Broken:
        shape, dtype, element = (64, 32), np.dtype(np.float16), "f16"

        def to_dense(self):
            raise MemoryError("out of memory converting")

    assert stand_in.sm80_weight(Broken(), kernel) is None
    assert stand_in.awaited_kernel(_problem()) is None and kernel in stand_in._failed


def test_max_compiles_follows_cores_and_available_memory(monkeypatch):
    from cutlass_sparse import host

    monkeypatch.setattr(host, "usable_cpus", lambda: 16)
    available = {"bytes": 12 << 30}
    monkeypatch.setattr(host, "available_bytes", lambda: available["bytes"])
    assert stand_in.max_compiles() == 2
    available["bytes"] = 1 << 30
    assert stand_in.max_compiles() == 1
    monkeypatch.setattr(host, "usable_cpus", lambda: 2)
    available["bytes"] = 100 << 30
    assert stand_in.max_compiles() == 2


def test_a_landed_kernel_ends_its_stand_ins_whatever_call_comes_next(cold, monkeypatch):
    # the problem that stood in is never called again (a warm-up's N): the next call of any
    # default-family sm90 problem ends its stand-in, and the sm80 copies go
    started, compiling = cold
    kernel = stand_in.awaited_kernel(_problem())
    sw = cs.compress(np.zeros((64, 32), dtype=np.float16), layout="sm90")
    stand_in.sm80_weight(sw, kernel)
    compiling["on"] = False
    real_cached = kernels.cached
    monkeypatch.setattr(kernels, "cached", lambda config, arch, cache=None:
                        (config, arch) == kernel or real_cached(config, arch, cache))
    assert stand_in.awaited_kernel(_problem(4000)) is None      # another problem, its kernel cached
    assert not stand_in.standing_in() and stand_in._sm80_weights == {}


def test_errors_looking_at_a_compile_never_reach_the_call(cold, monkeypatch):
    started, _ = cold
    kernel = stand_in.awaited_kernel(_problem())

    def unreadable(config, arch):
        raise PermissionError("lock directory unreadable")

    monkeypatch.setattr(background, "under_way", unreadable)
    monkeypatch.setattr(stand_in, "START_GRACE_S", 0.0)
    assert stand_in.awaited_kernel(_problem()) is None and kernel in stand_in._failed


def test_another_n_of_a_pending_kernel_stands_in_without_looking_at_the_cache(cold, monkeypatch):
    started, _ = cold
    kernel = stand_in.awaited_kernel(_problem())
    looked = []
    real_cached = kernels.cached
    monkeypatch.setattr(kernels, "cached", lambda config, arch, cache=None:
                        looked.append(config) or real_cached(config, arch, cache))
    monkeypatch.setattr(stand_in, "CHECK_EVERY_S", 3600.0)
    assert [stand_in.awaited_kernel(_problem(n)) for n in (3000, 3500, 4000)] == [kernel] * 3
    assert looked == [] and len(started) == 1
