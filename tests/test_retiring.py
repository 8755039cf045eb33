"""launch.retiring: buffers read on other streams kept until the events recorded on those
streams are done (CPU: fake events stand in for CUDA's)."""
import numpy as np

from cutlass_sparse.launch import retiring


class FakeEvent:
    def __init__(self):
        self.finished = False


def test_held_objects_go_when_their_streams_are_done_whatever_they_compare_like(monkeypatch):
    recorded = {}

    def record(ptr, device):
        recorded.setdefault(ptr, []).append(FakeEvent())
        return recorded[ptr][-1]

    monkeypatch.setattr(retiring, "_recorded", record)
    monkeypatch.setattr(retiring.events, "done", lambda event: event.finished)
    kept = retiring.Retiring()
    first, second = (np.zeros(4), np.ones(4)), (np.ones(4), np.zeros(4))   # == of arrays has no truth value
    kept.add(first, (1,), device=0)    # on a busy stream
    kept.add(second, (2,), device=0)
    recorded[2][0].finished = True      # the second stream's launch is done, the first's is not
    kept.add((np.ones(3),), (1,), device=0)
    assert len(kept) == 2               # the second went; the first and the new one wait on stream 1
    recorded[1][1].finished = True      # a later event of stream 1 reads done before an earlier one:
    kept.drop_done()                    # not asked, since stream 1 completes in order
    assert len(kept) == 2
    recorded[1][0].finished = True
    kept.drop_done()
    assert len(kept) == 0


def test_a_capturing_stream_is_asked_again_later(monkeypatch):
    events = iter([None, FakeEvent()])  # None: the stream was capturing at first
    monkeypatch.setattr(retiring, "_recorded", lambda ptr, device: next(events))
    monkeypatch.setattr(retiring.events, "done", lambda event: True)
    kept = retiring.Retiring()
    kept.add(object(), (5,), device=0)
    assert len(kept) == 1
    kept.drop_done()
    assert len(kept) == 0
