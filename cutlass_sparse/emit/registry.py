"""One emitter per kernel kind, chosen by the description's family."""
from __future__ import annotations

from . import line_copy, reduction, sm80, sm90, sm90_compressor
from .emitted import Emitted

EMITTERS = {"sm80": sm80.emit, "sm90": sm90.emit, "sm90_compressor": sm90_compressor.emit,
            "sm80_reduction": reduction.emit, "line_copy": line_copy.emit}


def emit(config) -> Emitted:
    """The C++ (and what its cubin must contain) for any kernel description."""
    try:
        emitter = EMITTERS[config.family]
    except KeyError:
        raise ValueError(f"no emitter for kernel family {config.family!r}") from None
    return emitter(config)
