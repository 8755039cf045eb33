"""The sm90 setup entry's recipe nonce belongs to one launch: CuTe's TMA recipe hook reads it
from the setup block's shared memory, so setups of one kernel may run at once on any streams
and are queued with no order between them (the GPU test: tests/test_gpu_concurrent_setups.py).
While it was a `__device__` variable of the module, two setups at once overwrote each other's
nonce and the GEMM faulted at its first TMA load (sessions 32-35)."""
import re
import types

from cutlass_sparse.emit import nvrtc_headers


def test_the_recipe_hooks_nonce_is_in_shared_memory():
    hook = nvrtc_headers.RECIPE_HOOK
    assert re.search(r"^__shared__ unsigned int recipe_nonce;$", hook, re.M)
    # no variable of the module's own: every launch of the module would share it
    assert not re.search(r"^\s*__device__\s+(?!.*\()", hook, re.M)


def test_a_plans_setup_goes_straight_to_its_stream():
    """Sm90Plan.queue_setup (a call's, build-ahead's, the first setup's and the pointer map's
    setups) launches the setup entry, one thread, on the stream it is given: no waits, no events."""
    from cutlass_sparse.launch.sm90 import Sm90Plan

    launches, looked_up = [], []

    class Loaded:
        compiled = types.SimpleNamespace(symbol="k")

        def function(self, device_id, symbol):
            looked_up.append((device_id, symbol))
            return lambda grid, block, args, shared, stream: launches.append((grid, block, args, shared, stream))

    plan = Sm90Plan.__new__(Sm90Plan)
    plan.loaded, plan.compiled, plan._setup = Loaded(), Loaded.compiled, None
    plan.problem = types.SimpleNamespace(device_id=3)
    plan.queue_setup(b"one", "stream a")
    plan.queue_setup(b"two", "stream b")
    assert looked_up == [(3, "k_setup")]   # looked up once per plan
    one_thread = ((1, 1, 1), (1, 1, 1))
    assert launches == [(*one_thread, (b"one",), 0, "stream a"), (*one_thread, (b"two",), 0, "stream b")]
