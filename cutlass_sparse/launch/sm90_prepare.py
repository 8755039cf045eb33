"""What an sm90 problem shape needs besides pointers: TMA descriptor templates, the launch
grid and the workspace. On the host for a persistent-scheduler kernel, or a stream-K one
in the heuristic decomposition (the tail twin, sm90_choice), whose templates this device
has (launch.grid computes CUTLASS's grid and stream-K workspace); else from one setup
launch, which synchronizes, reads what CUTLASS reports, and maps the kernel's pointers in
Params (sm90_params) on the way (the tail twin's workspace among them)."""
from __future__ import annotations

import threading
from dataclasses import dataclass

from ..emit.sm90 import INFO_FIELDS, SETUP_SCALED, setup_layout
from .. import events
from . import device, graphs, grid, sm90_params, tma
from .sm90_choice import TAIL_TWIN


@dataclass(frozen=True)
class Prepared:
    """What one problem signature needs besides pointers: descriptor templates, the grid, and
    the workspace (bytes, and the barrier region that is zeroed before every launch)."""

    templates: object
    grid: tuple[int, int, int]
    workspace_bytes: int
    barrier_offset: int
    barrier_bytes: int


# Per (kernel, device): TMA descriptor templates. A descriptor's rank, box, element
# strides, swizzle and type come from the kernel's static layouts (make_tma_copy_desc);
# only address, sizes and strides vary, and the setup entry replaces those on the device.
_templates: dict[tuple[str, int], object] = {}
# Per (kernel, device, sizes, leading dimensions, scheduling, swizzle, raster order): grid
# and workspace.
# (kernel, device) whose host stream-K figures (host_stream_k) one setup has confirmed: until
# then a shape the host copy covers still runs the synchronizing setup, which checks them.
_stream_k_confirmed: set[tuple[str, int]] = set()
_prepared: dict[tuple, Prepared] = {}
_prepared_lock = threading.Lock()


def prepared(plan, pointers) -> Prepared:
    """The plan's problem shape's Prepared (kept per kernel, device, sizes, leading
    dimensions, scheduling, swizzle and raster order). pointers: stand-ins a setup may run with."""
    p = plan.problem
    # swizzle and raster order: the grid (a grid of the other order hung the kernel)
    shape_key = (plan.compiled.key, p.device_id, p.m, plan.n_k, p.k, plan.kernel_problem.x.ld, plan.ldc, plan.ldd,
                 plan.scheduling, plan.swizzle, plan.raster)
    prepared = _prepared.get(shape_key)
    if prepared is None:
        with _prepared_lock:
            prepared = _prepared.get(shape_key)
            if prepared is None:
                prepared = _prepared[shape_key] = _prepare(plan, pointers)
    return prepared


def host_grid(plan) -> tuple[int, int, int]:
    """The launch grid of the plan's persistent-scheduler kernel, computed here (launch.grid)."""
    k = plan.kernel_problem
    return grid.persistent_grid(k.m, k.n, plan.config.threadblock[:2], plan.config.cluster[:2],
                                k.sm_count, plan.swizzle, plan.raster)


def host_stream_k(plan) -> tuple | None:
    """(grid, workspace bytes, barrier offset, barrier bytes) of a stream-K kernel in the
    heuristic decomposition without a K split (the tail twin), computed here; None for any
    other scheduling (read back from the setup). The workspace holds the epilogue's (none:
    no fusion of ours asks for one), the partials, then the barriers."""
    if plan.scheduling != TAIL_TWIN:
        return None
    k, config = plan.kernel_problem, plan.config
    tiles, per_wave, split = grid.stream_k_tiles(k.m, k.n, k.k, config.threadblock, config.cluster[:2], k.sm_count,
                                                 plan.swizzle, plan.raster)
    if tiles < per_wave:   # CUTLASS may take its split-K variant there (not copied here): read back
        return None
    partials, barriers = grid.stream_k_workspace(split, config.threadblock)
    launch = grid.persistent_grid(k.m, k.n, config.threadblock[:2], config.cluster[:2], k.sm_count, plan.swizzle,
                                  plan.raster, truncate=False)
    return (launch, partials + barriers, partials, barriers) if split else (launch, 0, 0, 0)


def shared_workspace_bytes(plan) -> int:
    """For a stream-K kernel in the heuristic decomposition (the tail twin): the most
    workspace it asks for at any shape, what the launches of a stream share
    (stream_workspaces); 0 for other plans. CUTLASS splits fewer tiles than a wave and a
    half: the last full wave and a tail under half a wave, or every tile where there are
    fewer than that (its split-K variant, under one wave, asks for no more)."""
    if plan.scheduling != TAIL_TWIN:
        return 0
    k, config = plan.kernel_problem, plan.config
    per_wave = grid.ctas_per_wave(k.m, k.n, config.threadblock, config.cluster[:2], k.sm_count)
    return sum(grid.stream_k_workspace(per_wave + per_wave // 2, config.threadblock))


def _prepare(plan, pointers) -> Prepared:
    """What a new problem shape needs: on the host for a persistent-scheduler kernel or
    the tail twin whose templates this device has; else from one synchronizing setup."""
    key = (plan.compiled.key, plan.problem.device_id)
    templates = _templates.get(key)
    if templates is not None and plan.config.tile_scheduler != "streamk":
        return Prepared(templates, host_grid(plan), 0, 0, 0)
    computed = host_stream_k(plan)
    if templates is not None and computed is not None and key in _stream_k_confirmed:
        return Prepared(templates, *computed)
    prepared = on_device(plan, pointers)
    _templates.setdefault(key, prepared.templates)
    return prepared


def on_device(plan, pointers) -> Prepared:
    """Run the setup leaving CuTe's TMA recipes, check what CUTLASS reports (and that the
    host's grid agrees), and encode the recipes into descriptor templates. Synchronizes: on
    a stream of its own, in relaxed capture mode, where the current stream captures a graph
    (a kernel's first use inside a capture: a cold kernel that lands mid-capture, say)."""
    import cupy

    if graphs.capturing(cupy.cuda.get_current_stream().ptr):
        with events.relaxed(), device.side_stream(plan.problem.device_id):
            return _on_device(plan, pointers)
    return _on_device(plan, pointers)


def _on_device(plan, pointers) -> Prepared:
    import cupy

    symbol = plan.compiled.symbol
    params = cupy.empty(plan.compiled.constants["params_bytes"], dtype=cupy.uint8)
    info_out = cupy.zeros(len(INFO_FIELDS), dtype=cupy.int64)
    recipes = cupy.zeros(16 * 128, dtype=cupy.uint8)
    block = plan._setup_arguments(pointers, params.data.ptr, 0, recipes.data.ptr, info_out.data.ptr)
    plan.queue_setup(block)
    info = dict(zip(INFO_FIELDS, (int(v) for v in info_out.get())))   # synchronizes
    k = plan.kernel_problem
    problem = f"{k.m}x{k.n}x{k.k}"
    if not info["can_implement"]:
        raise ValueError(f"CUTLASS cannot implement {problem} with {symbol}: use family='sm80'")
    if not 0 < info["tma_slots"] <= 16:
        raise RuntimeError(f"{symbol}: setup found {info['tma_slots']} TMA descriptor slots")
    reported = (info["grid_x"], info["grid_y"], info["grid_z"])
    if plan.config.tile_scheduler != "streamk" and host_grid(plan) != reported:
        raise RuntimeError(f"{symbol} {problem}: CUTLASS launches grid {reported}, launch.grid computed "
                           f"{host_grid(plan)}: the host's copy of the scheduler is out of date")
    computed = host_stream_k(plan)
    given = (reported, info["workspace_bytes"], info["barrier_offset"], info["barrier_bytes"])
    if computed is not None and computed != given:
        raise RuntimeError(f"{symbol} {problem}: CUTLASS's stream-K scheduler asks for (grid, workspace, barrier "
                           f"offset, barrier bytes) {given}, launch.grid computed {computed}: the host's copy of "
                           f"the scheduler is out of date")
    if computed is not None:
        _stream_k_confirmed.add((plan.compiled.key, plan.problem.device_id))
    templates = cupy.asarray(tma.templates(recipes.get().tobytes(), info["tma_slots"]))
    # landed before any stream's setup reads them (the copy is asynchronous on this stream)
    cupy.cuda.get_current_stream().synchronize()
    # the tail twin's launches patch their stream's workspace into a host copy too
    # (Sm90Plan._from_host); other stream-K launches keep the setup's Params
    stream_k = plan.config.tile_scheduler == "streamk"
    if not stream_k or computed is not None:
        sm90_params.pointer_maps[(plan.compiled.key, plan.problem.device_id)] = sm90_params.map_pointers(
            plan, templates, setup_layout(plan.config) is SETUP_SCALED, stream_k)
    return Prepared(templates, reported, info["workspace_bytes"], info["barrier_offset"], info["barrier_bytes"])
