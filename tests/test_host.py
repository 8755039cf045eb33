"""What the machine gives a job (cutlass_sparse.host) and how many compiles warm-up runs at
once (build.warmup.jobs_for): CPU masks, cgroup v1 and v2 limits as Slurm and Kubernetes set
them, on fake cgroup trees."""
import dataclasses
from pathlib import Path

import pytest

from cutlass_sparse import host
from cutlass_sparse.build import warmup
from cutlass_sparse.describe import selection
from cutlass_sparse.describe.helper_kernels import CompressorConfig, LineCopyConfig

GiB = 1 << 30


def v2_tree(tmp_path: Path, path: str, levels: dict[str, dict[str, str]]) -> Path:
    """A unified hierarchy at tmp_path/cg (files per level, '' the root) and a
    /proc/self/cgroup naming `path`."""
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    for level, files in levels.items():
        directory = root / level
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text)
    proc = tmp_path / "cgroup"
    proc.write_text(f"0::{path}\n")
    return proc


def test_v2_the_tightest_level_binds(tmp_path):
    # a Kubernetes pod: the pod's level limits 16 GiB and 4 CPUs, the container's 24 GiB
    # and no CPU limit; 2 GiB in use at the pod's level
    proc = v2_tree(tmp_path, "/kubepods/pod1/ctr", {
        "kubepods/pod1": {"memory.max": f"{16 * GiB}\n", "memory.current": f"{2 * GiB}\n",
                          "cpu.max": "400000 100000\n"},
        "kubepods/pod1/ctr": {"memory.max": f"{24 * GiB}\n", "memory.current": f"{GiB}\n", "cpu.max": "max 100000\n"},
    })
    root = tmp_path / "cg"
    assert host.cgroup_memory_headroom(root, proc) == 14 * GiB
    assert host.cgroup_cpu_quota(root, proc) == 4.0


def test_v2_memory_high_binds_below_memory_max(tmp_path):
    # systemd's MemoryHigh (or a pod's memory.high): throttling starts there, not at max
    proc = v2_tree(tmp_path, "/system.slice/warm.service", {
        "system.slice/warm.service": {"memory.max": "max\n", "memory.high": f"{8 * GiB}\n",
                                      "memory.current": f"{GiB}\n"},
        "system.slice": {"memory.max": f"{32 * GiB}\n", "memory.high": "max\n", "memory.current": f"{3 * GiB}\n"},
    })
    assert host.cgroup_memory_headroom(tmp_path / "cg", proc) == 7 * GiB


def test_v2_without_limits_says_nothing(tmp_path):
    proc = v2_tree(tmp_path, "/user.slice", {"user.slice": {"memory.max": "max\n", "cpu.max": "max 100000\n"}})
    root = tmp_path / "cg"
    assert host.cgroup_memory_headroom(root, proc) is None
    assert host.cgroup_cpu_quota(root, proc) is None


def test_v1_slurm_job_step(tmp_path):
    # cgroup v1 as Slurm's task/cgroup plugin lays it out: memory and cpu,cpuacct hierarchies
    root = tmp_path / "cg"
    step = "slurm/uid_1000/job_42/step_0"
    (root / "memory" / step).mkdir(parents=True)
    (root / "memory" / "slurm/uid_1000/job_42" / "memory.limit_in_bytes").write_text(f"{8 * GiB}\n")
    (root / "memory" / "slurm/uid_1000/job_42" / "memory.usage_in_bytes").write_text(f"{GiB}\n")
    (root / "memory" / step / "memory.limit_in_bytes").write_text("9223372036854771712\n")   # unlimited
    (root / "cpu,cpuacct" / step).mkdir(parents=True)
    (root / "cpu,cpuacct" / step / "cpu.cfs_quota_us").write_text("200000\n")
    (root / "cpu,cpuacct" / step / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text(f"5:memory:/{step}\n4:cpu,cpuacct:/{step}\n1:name=systemd:/x\n")
    assert host.cgroup_memory_headroom(root, proc) == 7 * GiB
    assert host.cgroup_cpu_quota(root, proc) == 2.0


def test_reclaimable_page_cache_counts_as_free(tmp_path):
    # 15 GiB in use of 16, 12 GiB of it inactive file cache (a container that read its weights)
    stat = f"anon {2 * GiB}\nfile {13 * GiB}\ninactive_file {12 * GiB}\n"
    proc = v2_tree(tmp_path, "/pod", {"pod": {"memory.max": f"{16 * GiB}\n", "memory.current": f"{15 * GiB}\n",
                                              "memory.stat": stat}})
    assert host.cgroup_memory_headroom(tmp_path / "cg", proc) == 13 * GiB


def test_hybrid_host_reads_the_v1_controllers(tmp_path):
    # systemd's hybrid layout: v2 mounted at /sys/fs/cgroup/unified (no cgroup.controllers at
    # the root), the limits in the v1 hierarchies; /proc/self/cgroup lists both
    root = tmp_path / "cg"
    (root / "unified").mkdir(parents=True)
    (root / "unified" / "cgroup.controllers").write_text("")
    (root / "memory" / "job").mkdir(parents=True)
    (root / "memory" / "job" / "memory.limit_in_bytes").write_text(f"{4 * GiB}\n")
    (root / "memory" / "job" / "memory.usage_in_bytes").write_text("0\n")
    (root / "cpu,cpuacct").mkdir()
    (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")   # no quota
    (root / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/job\n3:cpu,cpuacct:/\n0::/job\n")
    assert host.cgroup_memory_headroom(root, proc) == 4 * GiB
    assert host.cgroup_cpu_quota(root, proc) is None


def test_a_container_sees_its_own_root_level(tmp_path):
    # v1 without a cgroup namespace: /proc/self/cgroup names the host's path, which the
    # container's mount does not have; the mount's own level holds the container's limit
    root = tmp_path / "cg"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{6 * GiB}\n")
    (root / "memory" / "memory.usage_in_bytes").write_text(f"{GiB}\n")
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/docker/0123abcd\n")
    assert host.cgroup_memory_headroom(root, proc) == 5 * GiB


def test_no_cgroup_information(tmp_path):
    assert host.cgroup_memory_headroom(tmp_path, tmp_path / "missing") is None
    assert host.cgroup_cpu_quota(tmp_path, tmp_path / "missing") is None


def test_this_machine_reports_no_more_than_the_host_has(monkeypatch):
    assert 1 <= host.usable_cpus() <= (host.os.cpu_count() or 1)
    meminfo = host.meminfo_available()   # one reading: MemAvailable moves with other work
    monkeypatch.setattr(host, "meminfo_available", lambda: meminfo)
    available = host.available_bytes()
    assert available is None or meminfo is None or available <= meminfo


def test_a_cpu_quota_caps_the_affinity_mask(monkeypatch):
    monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: set(range(96)), raising=False)
    monkeypatch.setattr(host, "cgroup_cpu_quota", lambda: 8.0)
    assert host.usable_cpus() == 8
    monkeypatch.setattr(host, "cgroup_cpu_quota", lambda: 0.2)
    assert host.usable_cpus() == 1
    monkeypatch.setattr(host, "cgroup_cpu_quota", lambda: None)
    assert host.usable_cpus() == 96


@pytest.fixture
def node(monkeypatch):
    """A 96-core node whose job may use `cpus` of them and `bytes` of memory."""
    machine = {"cpus": 96, "bytes": 16 * GiB}
    monkeypatch.setattr(host, "usable_cpus", lambda: machine["cpus"])
    monkeypatch.setattr(host, "available_bytes", lambda: machine["bytes"])
    return machine


def test_warmup_jobs_follow_the_heaviest_compile_and_the_memory(node):
    # with C and CUTLASS's mainloop: CUTLASS's TMA epilogue and mainloop (without C the
    # catalog's tiles store D directly or through the staged epilogue, and every 16-bit tile
    # takes our own mainloop, which compile in less memory)
    sm90 = [(dataclasses.replace(selection.config_for_shape(4096, n, 4096, "f16", "f16", "row", 132, "sm90"),
                                 reads_c=True, lean_mainloop=False), "sm_90a") for n in (16, 512, 4096)] * 20
    sm80 = [(selection.config_for_shape(4096, n, 4096, "f16", "f16", "row", 108, "sm80"), "sm_80")
            for n in (16, 512, 4096)] * 20
    assert warmup.jobs_for(sm90) == 3                 # 16 GiB / 5 GiB per sm90 GEMM
    assert warmup.jobs_for(sm80) == 32                # 16 GiB / 0.5 GiB
    assert warmup.jobs_for(sm80 + sm90[2:3]) == 3     # the heaviest kernel sets the share
    decode, staged = (selection.config_for_shape(4096, n, 4096, "f16", "f16", "row", 132, "sm90") for n in (16, 4096))
    assert decode.stores_directly and staged.stores_staged   # kernels without C, without CUTLASS's TMA epilogue
    assert warmup.jobs_for(sm80 + [(decode, "sm_90a"), (staged, "sm_90a")]) == 5      # and mainloop: 16 GiB / 3 GiB
    with_c = dataclasses.replace(staged, reads_c=True)   # CUTLASS's TMA epilogue, our mainloop
    assert warmup.jobs_for(sm80 + [(with_c, "sm_90a")]) == 4                           # 16 GiB / 4 GiB
    assert warmup.jobs_for([CompressorConfig("e4m3"), LineCopyConfig()]) == 2   # at most one per kernel
    assert warmup.jobs_for(sm90, requested=7) == 7    # the caller's number stands
    node["bytes"] = GiB                               # less than one compile's worth: still one
    assert warmup.jobs_for(sm90) == 1
    node["bytes"], node["cpus"] = 512 * GiB, 4
    assert warmup.jobs_for(sm90) == 4
