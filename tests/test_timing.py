"""reference.kernel_medians_ms on a stand-in for CuPy (no GPU): each contestant's median per
call, and turns that rotate, so no peer always runs first or last after the others."""
import sys
import types

from cutlass_sparse import reference


class _Clock:
    now = 0.0


def _fake_cupy():
    class Event:
        def record(self):
            self.at = _Clock.now

        def synchronize(self):
            pass

    class Kernel:
        def __init__(self, source, name):
            assert name == "cutlass_sparse_spin"

        def __call__(self, grid, block, args):
            _Clock.now += 20.0   # the spin runs before the start event: outside every timing

    cuda = types.SimpleNamespace(
        Event=Event, Device=lambda: types.SimpleNamespace(id=0),
        get_elapsed_time=lambda start, stop: stop.at - start.at,
        runtime=types.SimpleNamespace(getDeviceProperties=lambda i: {"clockRate": 1_000_000}))
    return types.SimpleNamespace(RawKernel=Kernel, cuda=cuda, int64=int)


def test_each_contestant_gets_its_own_median_and_the_first_turn_rotates(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    order = []

    def contestant(name, ms):
        def call():
            order.append(name)
            _Clock.now += ms
        return call

    costs = {"ours": 1.0, "dense": 1.5, "cslt": 2.0}
    fns = {name: contestant(name, ms) for name, ms in costs.items()}
    medians = reference.kernel_medians_ms(fns, calls=4, replays=6)
    assert medians == costs
    timed = order[3:]                                  # after one warm-up call each
    assert len(timed) == 6 * 3 * 4
    firsts = [timed[r * 12] for r in range(6)]         # who opened each replay
    assert firsts == ["ours", "dense", "cslt", "ours", "dense", "cslt"]
    lasts = [timed[r * 12 + 11] for r in range(6)]
    assert sorted(set(lasts)) == ["cslt", "dense", "ours"]


def test_one_contestant_is_timed_as_before(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())

    def call():
        _Clock.now += 0.25
    assert reference.kernel_median_ms(call, calls=20, replays=5) == 0.25
