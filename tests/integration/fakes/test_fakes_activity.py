"""Kernel time, utilization and device memory of the fake GPUs, as the fake libcuda feeds them and the
fake NVML reports them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fakes_support import PRELUDE

MS = 1_000_000


def test_kernels_on_one_gpu_run_one_after_another(fake_run):
    result = fake_run(f"""
        now = LIB.fake_now_ns()
        a = LIB.fake_kernel_submit(0, 1000, 108 * 2, 50 * {MS})   # 2 waves on 108 SMs
        b = LIB.fake_kernel_submit(0, 1001, 1, 10 * {MS})         # queued behind a
        c = LIB.fake_kernel_submit(0, 1000, 109, 10 * {MS})       # 2 waves
        other = LIB.fake_kernel_submit(1, 1000, 1, 10 * {MS})     # another GPU is idle
        out(dict(a=a - now, b=b - a, c=c - b, other=other - now,
                 last=[LIB.fake_kernel_last_end(0, 1000) == c, LIB.fake_kernel_last_end(0, 1001) == b,
                       LIB.fake_kernel_last_end(0, 4242)]))
        """, gpus="2xA100-80GB")
    assert 100 * MS <= result["a"] < 105 * MS
    assert result["b"] == 10 * MS and result["c"] == 20 * MS
    assert 10 * MS <= result["other"] < 15 * MS
    assert result["last"] == [True, True, 0]


def test_utilization_reports_the_busy_share_of_the_last_second(fake_run):
    result = fake_run(f"""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        idle = N.nvmlDeviceGetUtilizationRates(h).gpu
        t0 = LIB.fake_now_ns()
        wall0 = int(time.time() * 1e6)
        LIB.fake_kernel_submit(0, 1000, 40, 300 * {MS})   # T4: 40 SMs, one wave
        LIB.fake_kernel_submit(0, 1001, 40, 100 * {MS})
        while LIB.fake_now_ns() < t0 + 500 * {MS}:
            time.sleep(0.01)
        gpu = N.nvmlDeviceGetUtilizationRates(h).gpu
        per_pid = {{s.pid: s.smUtil for s in N.nvmlDeviceGetProcessUtilization(h, wall0)}}
        try:
            N.nvmlDeviceGetProcessUtilization(h, int(time.time() * 1e6) + 10**6)
            later = "samples"
        except N.NVMLError as e:
            later = type(e).__name__
        out(dict(idle=idle, gpu=gpu, per_pid=per_pid, direct=LIB.fake_utilization(0, 1001, t0), later=later))
        """, gpus="1xT4")
    assert result["idle"] == 0
    assert 35 <= result["gpu"] <= 45  # 400 ms of kernels in the last 1 s window
    # since lastSeen (t0, 0.5 s ago): 300 ms and 100 ms of 500 ms
    assert 55 <= result["per_pid"]["1000"] <= 65 and 15 <= result["per_pid"]["1001"] <= 25
    assert 15 <= result["direct"] <= 25
    assert result["later"] == "NVMLError_NotFound"


def test_memory_is_accounted_per_process_and_capped_at_the_total(fake_run):
    result = fake_run("""
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        me = os.getpid()
        total = N.nvmlDeviceGetMemoryInfo(h).total
        ok = LIB.fake_mem_reserve(0, me, 1 << 30)
        too_much = LIB.fake_mem_reserve(0, me, total)
        mem = N.nvmlDeviceGetMemoryInfo(h)
        procs = [(p.pid, p.usedGpuMemory) for p in N.nvmlDeviceGetComputeRunningProcesses(h)]
        LIB.fake_mem_release(0, me, 1 << 30)
        out(dict(ok=ok, too_much=too_much, used=mem.used, free=mem.free, total=mem.total, procs=procs,
                 me=me, after=N.nvmlDeviceGetMemoryInfo(h).used,
                 procs_after=len(N.nvmlDeviceGetComputeRunningProcesses(h))))
        """, gpus="1xL4")
    assert result["ok"] == 0 and result["too_much"] == -1
    assert result["used"] == 1 << 30 and result["free"] == result["total"] - (1 << 30)
    assert result["procs"] == [[result["me"], 1 << 30]]
    assert result["after"] == 0 and result["procs_after"] == 0


def test_memory_of_a_killed_process_is_freed(fake_nvml, fake_run, state_file):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARVE_FAKE_")}
    env.update(CARVE_FAKE_GPUS="1xA100-80GB", CARVE_FAKE_STATE=str(state_file))
    holder = subprocess.Popen([sys.executable, "-c", PRELUDE + """
LIB.fake_mem_reserve(0, os.getpid(), 2 << 30)
print("ready", flush=True)
time.sleep(60)
"""], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        query = """
            N.nvmlInit()
            h = N.nvmlDeviceGetHandleByIndex(0)
            status = N.nvmlDeviceSetMigMode(h, N.NVML_DEVICE_MIG_ENABLE)
            out(dict(used=N.nvmlDeviceGetMemoryInfo(h).used, status=status, mode=N.nvmlDeviceGetMigMode(h),
                     pids=[p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h)]))
            """
        busy = fake_run(query, state=state_file)
        assert busy["used"] == 2 << 30 and busy["pids"] == [holder.pid]
        assert busy["status"] == 19 and busy["mode"] == [0, 1]  # NVML_ERROR_IN_USE: pending, not current
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    time.sleep(0.05)
    idle = fake_run(query, state=state_file)
    assert idle == {"used": 0, "status": 0, "mode": [1, 1], "pids": []}


def _pid_namespace_holder(env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """A process in a pid namespace of its own (as a container's) that holds 2 GiB and runs a 300 ms
    kernel on GPU 0, then sleeps; returns the `unshare` process and the holder's pid on this side."""
    holder = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--pid", "--fork", sys.executable, "-c", PRELUDE + f"""
assert os.getpid() == 1
LIB.fake_mem_reserve(0, os.getpid(), 2 << 30)
LIB.fake_kernel_submit(0, os.getpid(), 108, 300 * {MS})
print("ready", flush=True)
time.sleep(60)
"""], env=env, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "ready"
    children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children").read_text().split()
    assert len(children) == 1, children
    return holder, int(children[0])


def test_a_process_of_another_pid_namespace_is_named_by_our_pid_and_forgotten_when_gone(
    fake_nvml, fake_run, state_file
):
    """NVML names a container's process by the host's pid and forgets its memory when it exits: the fake
    learns both from the slot's record lock (F_GETLK), whatever pid the process has in its namespace."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARVE_FAKE_")}
    env.update(CARVE_FAKE_GPUS="1xA100-80GB", CARVE_FAKE_STATE=str(state_file))
    query = """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        try:
            since = int(time.time() * 1e6) - 10**6
            util = {s.pid: s.smUtil for s in N.nvmlDeviceGetProcessUtilization(h, since)}
        except N.NVMLError_NotFound:
            util = {}
        out(dict(used=N.nvmlDeviceGetMemoryInfo(h).used, util=util,
                 pids=[p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h)]))
        """
    holder, pid = _pid_namespace_holder(env)
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        nspid = [line for line in status if line.startswith("NSpid:")]
        assert nspid == [f"NSpid:\t{pid}\t1"]  # pid 1 in its namespace
        busy = fake_run(query, state=state_file)
        assert busy["used"] == 2 << 30 and busy["pids"] == [pid]
        assert list(busy["util"]) == [str(pid)]  # the kernel's submitter, by our pid too
    finally:
        os.kill(pid, signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    # Its namespace is gone with it: nothing in this namespace could ever sweep its pid 1.
    assert fake_run(query, state=state_file) == {"used": 0, "util": {}, "pids": []}
