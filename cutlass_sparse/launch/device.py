"""Facts about a CUDA device, asked once per device (CuPy's attribute calls cost tens of
microseconds, a call's whole budget), and its side stream."""
from __future__ import annotations

import functools


@functools.cache
def facts(device_id: int) -> tuple[str, int]:
    """(arch, SM count) of a device: ("sm_90", 132) on an H100."""
    import cupy

    runtime = cupy.cuda.runtime
    cc = cupy.cuda.Device(device_id).compute_capability
    return f"sm_{cc}", runtime.deviceGetAttribute(runtime.cudaDevAttrMultiProcessorCount, device_id)


@functools.cache
def identity(device_id: int) -> tuple[str, str]:
    """(name, compute capability) of a device, as profiler records name it."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    return props["name"].decode(), cupy.cuda.Device(device_id).compute_capability


def sm90_target(arch: str, device_id: int = 0) -> str:
    """The sm90 family's compile target for a device's arch ("sm_90" -> "sm_90a"), or a
    clear error where it cannot run."""
    if arch != "sm_90":
        raise ValueError(f"the sm90 kernel family needs a compute capability 9.0 GPU; device {device_id} "
                         f"is {arch}: use family='sm80' (compress(..., layout='sm80'))")
    return "sm_90a"


_side_streams: dict[int, object] = {}


def side_stream(device_id: int):
    """A non-blocking stream per device for work no call waits on (sm90_params.build_ahead)
    and for the readbacks a capture cannot hold (sm90_prepare.on_device)."""
    stream = _side_streams.get(device_id)
    if stream is None:
        import cupy

        with cupy.cuda.Device(device_id):
            stream = _side_streams.setdefault(device_id, cupy.cuda.Stream(non_blocking=True))
    return stream
