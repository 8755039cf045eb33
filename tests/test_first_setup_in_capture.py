"""sm90_prepare.on_device (a kernel's first setup on a device, which reads CUTLASS's recipes
back) where the calling stream captures a graph: the readback runs on a stream of its own in
relaxed capture mode, never on the capturing stream (session 35's stream stress: CuPy refused
the D2H copy there). Stand-ins for the streams and the capture mode (no GPU); the GPU test is
tests/test_gpu_graphs.py::test_a_kernels_first_use_on_the_device_inside_a_torch_capture."""
import contextlib
import types

import pytest

from cutlass_sparse.launch import sm90_prepare


@pytest.mark.parametrize("capturing", [False, True])
def test_the_first_setup_reads_back_off_a_capturing_stream(monkeypatch, capturing):
    cupy = pytest.importorskip("cupy")
    entered = []

    @contextlib.contextmanager
    def entering(name):
        entered.append(name)
        yield
        entered.append(f"/{name}")

    monkeypatch.setattr(cupy.cuda, "get_current_stream", lambda: types.SimpleNamespace(ptr=0x10))
    monkeypatch.setattr(sm90_prepare.graphs, "capturing", lambda ptr: capturing and ptr == 0x10)
    monkeypatch.setattr(sm90_prepare.events, "relaxed", lambda: entering("relaxed"))
    monkeypatch.setattr(sm90_prepare.device, "side_stream", lambda device_id: entering(f"stream {device_id}"))
    monkeypatch.setattr(sm90_prepare, "_on_device", lambda plan, pointers: entered.append("readback") or "prepared")
    plan = types.SimpleNamespace(problem=types.SimpleNamespace(device_id=3))
    assert sm90_prepare.on_device(plan, (0,) * 5) == "prepared"
    expected = ["relaxed", "stream 3", "readback", "/stream 3", "/relaxed"] if capturing else ["readback"]
    assert entered == expected
