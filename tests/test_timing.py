"""reference.kernel_medians_ms on a stand-in for CuPy (no GPU): each contestant's median per
call, a spin before every timing, and turns that rotate (the order reversed every other
cycle), so no peer always runs first, last, or after the same peer."""
import sys
import types

from cutlass_sparse import reference


class _Clock:
    now = 0.0
    log = []


def _fake_cupy():
    class Event:
        def record(self):
            self.at = _Clock.now
            _Clock.log.append("event")

        def synchronize(self):
            pass

    class Kernel:
        def __init__(self, source, name):
            assert name == "cutlass_sparse_spin"

        def __call__(self, grid, block, args):
            _Clock.now += 20.0   # the spin runs before the start event: outside every timing
            _Clock.log.append("spin")

    cuda = types.SimpleNamespace(
        Event=Event, Device=lambda: types.SimpleNamespace(id=0),
        get_elapsed_time=lambda start, stop: stop.at - start.at,
        runtime=types.SimpleNamespace(getDeviceProperties=lambda i: {"clockRate": 1_000_000}))
    return types.SimpleNamespace(RawKernel=Kernel, cuda=cuda, int64=int)


def test_each_contestant_gets_its_own_median_and_the_turns_rotate(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    _Clock.log = []
    calls_per_timing, replays = 4, 6
    # a call's cost grows with the replay it falls in: replay r costs base * (r + 1) per call,
    # so the median (replay 3 of 0..5, sorted) is base * 4, the minimum base * 1
    costs = {"ours": 0.5, "dense": 0.75, "cslt": 1.0}
    counts = {name: 0 for name in costs}

    def contestant(name):
        def call():
            _Clock.log.append(name)
            replay = max(0, counts[name] - 1) // calls_per_timing   # the first call is the warm-up
            counts[name] += 1
            _Clock.now += costs[name] * (replay + 1)
        return call

    medians = reference.kernel_medians_ms({name: contestant(name) for name in costs}, calls=calls_per_timing,
                                          replays=replays)
    assert medians == {name: base * 4 for name, base in costs.items()}
    timed = _Clock.log[3:]                                      # after one warm-up call each
    blocks = [timed[i:i + 1 + 1 + calls_per_timing + 1] for i in range(0, len(timed), 7)]
    assert len(blocks) == replays * 3
    for block in blocks:   # spin, start event, the calls, stop event: the spin outside the timing
        assert block[:2] == ["spin", "event"] and block[-1] == "event" and len(set(block[2:-1])) == 1
    order = [block[2] for block in blocks]
    firsts = order[::3]
    assert firsts == ["ours", "dense", "cslt", "cslt", "dense", "ours"]
    followers = {(order[i], order[i + 1]) for i in range(len(order) - 1) if i % 3 != 2}
    assert ("ours", "dense") in followers and ("dense", "ours") in followers


def test_one_contestant_is_timed_as_before(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())

    def call():
        _Clock.now += 0.25
    assert reference.kernel_median_ms(call, calls=20, replays=5) == 0.25


def _checked(*names):
    """The profiler's checked candidates: (choice, status, call); a name ending in "!" fails
    when launched, one starting "x" was dropped by its check."""
    def call_of(name):
        def call():
            if name.endswith("!"):
                raise RuntimeError(f"launch of {name} failed")
            _Clock.now += {"a": 0.5, "b": 0.25}.get(name[0], 1.0)
        return call
    return [(name, "wrong: relative error 1e+00", None) if name.startswith("x") else (name, "ok", call_of(name))
            for name in names]


def test_the_profiler_times_its_candidates_taking_turns(monkeypatch):
    from cutlass_sparse.profiler import tune

    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    turns = []
    in_turns = reference.kernel_medians_ms
    monkeypatch.setattr(reference, "kernel_medians_ms", lambda fns, **kw: turns.append(list(fns)) or in_turns(fns, **kw))
    problem = types.SimpleNamespace(m=1000, n=1000, k=1000)
    rows = tune._time(problem, _checked("a", "x", "b"))
    assert turns == [[0, 2]]     # the two that passed their check, in one set of turns
    assert [(r.choice, r.ms, r.status) for r in rows] == [("a", 0.5, "ok"), ("x", None, "wrong: relative error 1e+00"),
                                                          ("b", 0.25, "ok")]
    assert rows[2].tflops == 2.0 * 1000 ** 3 / 0.25 / 1e9


def test_a_launch_that_fails_in_the_turns_drops_only_its_candidate(monkeypatch):
    from cutlass_sparse.profiler import tune

    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    rows = tune._time(types.SimpleNamespace(m=8, n=8, k=16), _checked("a", "c!", "b"))
    assert [(r.choice, r.ms) for r in rows] == [("a", 0.5), ("c!", None), ("b", 0.25)]
    assert rows[1].status == "failed: launch of c! failed"


def test_the_profilers_candidates_share_one_workspace(monkeypatch):
    # A workspace per stream-K plan, all alive while they take turns, would hold about
    # M x N x 4 bytes per split candidate at once (24 GiB at 16384^3): one, as large as the
    # largest, serves them all; a plan that needs none runs the user's own path (None).
    from cutlass_sparse.profiler import tune

    class Space:
        def __init__(self, nbytes, dtype):
            self.nbytes = nbytes

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(empty=Space, uint8="uint8"))
    monkeypatch.setattr(reference, "relative_error", lambda y, expected: 0.0)

    class Plan:
        def __init__(self, nbytes):
            self.workspace_bytes, self.got = nbytes, []

        def run(self, sw, x, y, c, workspace):
            self.got.append(workspace)

    monkeypatch.setattr(tune.plans, "make", lambda problem, choice: choice if isinstance(choice, Plan)
                        else (_ for _ in ()).throw(ValueError("no such tile")))
    problem = types.SimpleNamespace(element="f16")
    made = [tune._plan(problem, choice) for choice in (Plan(0), Plan(3 << 20), "c", Plan(1 << 20))]
    assert [nbytes for _, _, nbytes in made] == [0, 3 << 20, 0, 1 << 20]
    shared = tune.shared_workspace(nbytes for _, _, nbytes in made)
    assert shared.nbytes == 3 << 20
    y = types.SimpleNamespace(fill=lambda value: None)
    checked = [tune._check(problem, choice, plan, None, None, y, None, shared if nbytes else None)
               for choice, plan, nbytes in made]
    assert [status for _, status, _ in checked] == ["ok", "ok", "failed: no such tile", "ok"]
    for _, _, call in checked:
        if call:
            call()
    assert [plan.got for _, plan, _ in made if not isinstance(plan, str)] == [[None, None], [shared, shared],
                                                                             [shared, shared]]
    assert tune.shared_workspace([0, 0]) is None
