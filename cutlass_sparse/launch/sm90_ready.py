"""What an sm90 plan keeps per pointer set and hands to its launch (launch.sm90)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Ready:
    """A built launch: the address of the GEMM's kernelParams (the addresses of its two
    arguments: Params by value, or a placeholder record and the setup entry's buffer), its
    grid, and its workspace. by_value: Params by value, so the GEMM reads no global memory
    before it waits on the previous grid and may launch programmatically (launch.pdl)."""

    arguments: int
    grid: tuple[int, int, int]
    held: tuple                         # the ctypes objects `arguments` points into
    by_value: bool = True
    workspace: object = None
    barrier: tuple[int, int] = (0, 0)   # (byte offset, bytes) to zero before each launch
    params: object = None               # the setup's device buffer, kept alive while used
    captured: bool = False              # built in a graph capture: its Params exist after a replay only
    stream: int = 0                     # the stream whose memory pool gave params and workspace
    seen: bool = False                  # launched before (Sm90Plan.keep_again)
    # the workspace is its stream's shared one (stream_workspaces), for as long as the
    # launch lives, whether or not the table still finds it (stream_workspaces.clear)
    shared_workspace: bool = False
