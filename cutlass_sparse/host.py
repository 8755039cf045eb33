"""What this machine gives the process: usable CPUs and free memory, as CPU affinity and a
cgroup's limits (Slurm, Kubernetes, Docker) narrow them.

os.cpu_count() and /proc/meminfo speak of the whole host: a job array task given 8 of 96
cores and 16 GiB of 512 would otherwise start 96 compiles of about 5 GB each. Every figure
here is "None where the platform does not say", and callers fall back to the host's own.
"""
from __future__ import annotations

import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit value (9223372036854771712);
# any limit from here up means none
_V1_UNLIMITED = 1 << 60


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask), no more than its cgroup's CPU quota
    allows (Kubernetes' CPU limit is a quota, not a mask), at least one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, int(quota + 0.5))   # 1.5 CPUs of quota run 2 compiles, each at 75%
    return max(cpus, 1)


def available_bytes() -> int | None:
    """Memory free for new work: the host's MemAvailable, no more than the headroom under the
    process's cgroup memory limits; None where neither is known."""
    figures = [f for f in (meminfo_available(), cgroup_memory_headroom()) if f is not None]
    return min(figures) if figures else None


def compiles_at_once(peak_bytes: int) -> int:
    """How many compiles of peak_bytes each fit at once: one per usable CPU, as many as the
    free memory holds, at least one."""
    cpus, available = usable_cpus(), available_bytes()
    by_memory = cpus if available is None else available // max(peak_bytes, 1)
    return max(1, min(cpus, by_memory))


def meminfo_available() -> int | None:
    """The host's MemAvailable (else its free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def cgroup_memory_headroom(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int | None:
    """The least (limit - working set) over the process's cgroup and its ancestors (a parent's
    limit binds its children too); None where no level sets a limit. The working set is the
    usage less the inactive file cache, which the kernel reclaims before it kills (the figure
    kubelet evicts by): a cgroup's usage counts its page cache, so after reading large files
    it can sit at the limit with most of it free to take. cgroup v2's memory.high counts as a
    limit too: above it the kernel throttles and reclaims hard (systemd's MemoryHigh, some
    Kubernetes setups), which would stall a compile as surely as a kill would end it."""
    headrooms = []
    for directory, v2 in _cgroup_dirs("memory", root, proc_cgroup):
        limits = [_read_int(directory / name) for name in (("memory.max", "memory.high") if v2
                                                          else ("memory.limit_in_bytes",))]
        limit = min((value for value in limits if value is not None), default=None)
        if limit is None or limit >= _V1_UNLIMITED:
            continue
        usage = _read_int(directory / ("memory.current" if v2 else "memory.usage_in_bytes")) or 0
        reclaimable = _stat(directory / "memory.stat").get("inactive_file" if v2 else "total_inactive_file", 0)
        headrooms.append(max(limit - max(usage - reclaimable, 0), 0))
    return min(headrooms) if headrooms else None


def cgroup_cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """CPUs' worth of the least CPU quota over the process's cgroup and its ancestors; None
    where no level sets one."""
    quotas = []
    for directory, v2 in _cgroup_dirs("cpu", root, proc_cgroup):
        if v2:
            fields = _read_text(directory / "cpu.max").split()
            if len(fields) == 2 and fields[0] != "max" and fields[0].isdigit() and fields[1].isdigit():
                quotas.append(int(fields[0]) / max(int(fields[1]), 1))
        else:
            quota, period = _read_int(directory / "cpu.cfs_quota_us"), _read_int(directory / "cpu.cfs_period_us")
            if quota is not None and quota > 0 and period:
                quotas.append(quota / period)
    return min(quotas) if quotas else None


def _cgroup_dirs(controller: str, root: Path, proc_cgroup: Path) -> list[tuple[Path, bool]]:
    """(directory, is v2) for the process's cgroup of this controller and each ancestor up
    to the mount: the unified (v2) hierarchy if the process is in one, else the controller's v1."""
    text = _read_text(proc_cgroup)
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and (root / "cgroup.controllers").exists():
            return [(d, True) for d in _ancestors(root, path)]
        names = controllers.split(",")
        if controller in names:
            mount = root / controllers
            if not mount.is_dir():
                mount = root / controller
            return [(d, False) for d in _ancestors(mount, path)]
    return []


def _ancestors(mount: Path, path: str) -> list[Path]:
    parts = [p for p in path.strip("/").split("/") if p and p != ".."]
    return [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def _stat(path: Path) -> dict[str, int]:
    """A memory.stat file's "name value" lines."""
    fields = (line.split() for line in _read_text(path).splitlines())
    return {f[0]: int(f[1]) for f in fields if len(f) == 2 and f[1].isdigit()}


def _read_int(path: Path) -> int | None:
    text = _read_text(path).strip()
    return int(text) if text.isdigit() else None
