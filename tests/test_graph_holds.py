"""launch.graphs without a GPU: a hold lasts until its semaphore is posted (what the CUDA
user object's destructor does when the graph is destroyed), then its objects are dropped.
The GPU side (a captured graph keeping a call's buffers) is tests/test_gpu_graphs.py."""
import gc
import weakref

from cutlass_sparse.launch import graphs


class Buffer:   # a stand-in for a CuPy allocation: weakly referenced to see it dropped
    pass


def test_a_hold_lasts_until_its_semaphore_is_posted():
    before = graphs.release_finished()
    first, second = Buffer(), Buffer()
    watch = weakref.ref(first)
    sem_first, sem_second = graphs.new_semaphore(), graphs.new_semaphore()
    graphs.keep(sem_first, (first,))
    graphs.keep(sem_second, (second,))
    del first
    gc.collect()
    assert watch() is not None and graphs.release_finished() == before + 2   # nothing posted yet
    graphs._libc.sem_post(sem_first)                              # the first graph was destroyed
    assert graphs.release_finished() == before + 1
    gc.collect()
    assert watch() is None                                        # its buffer went back
    graphs._libc.sem_post(sem_second)
    assert graphs.release_finished() == before


def test_holding_for_no_objects_asks_nothing_of_cuda():
    # None entries are skipped and an empty hold returns before any CUDA call (no GPU here)
    assert graphs.hold(0) is False
    assert graphs.hold(0, None, None) is False
