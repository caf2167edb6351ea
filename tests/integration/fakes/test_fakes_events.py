"""The fake NVML's event API and memory-health queries, through unmodified pynvml (nvml.h semantics)."""

from __future__ import annotations

EVENTS = """
N.nvmlInit()
h = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
xid_file = os.environ["CARVE_FAKE_XID_FILE"]
with open(xid_file, "a") as f:
    f.write("0 79\\n")  # before registration: a set never sees it
s = N.nvmlEventSetCreate()
supported = N.nvmlDeviceGetSupportedEventTypes(h[0])
N.nvmlDeviceRegisterEvents(h[0], N.nvmlEventTypeXidCriticalError, s)
N.nvmlDeviceRegisterEvents(h[2], N.nvmlEventTypeXidCriticalError, s)
def wait(ms=100):
    try:
        d = N.nvmlEventSetWait_v2(s, ms)
    except N.NVMLError as e:
        return type(e).__name__
    return [N.nvmlDeviceGetIndex(d.device), d.eventType, d.eventData, d.gpuInstanceId, d.computeInstanceId]
first = wait()
with open(xid_file, "a") as f:
    f.write("1 48\\n")      # GPU 1 not registered: skipped
    f.write("garbage\\n")   # malformed: skipped
    f.write("2 94\\n0 6")   # the last line is incomplete until its newline
got = [wait(), wait()]
with open(xid_file, "a") as f:
    f.write("3\\n")
got.append(wait())
try:
    N.nvmlDeviceRegisterEvents(h[0], N.nvmlEventTypeAll, s)
    bad_mask = "ok"
except N.NVMLError as e:
    bad_mask = type(e).__name__
with open(os.environ["CARVE_FAKE_LOST_FILE"], "w") as f:
    f.write("2")
lost = wait()
N.nvmlEventSetFree(s)
out(dict(supported=supported, first=first, got=got, bad_mask=bad_mask, lost=lost))
"""


def test_xid_lines_become_events_of_registered_gpus_only(fake_run, tmp_path):
    xid = tmp_path / "xid"
    xid.write_text("")
    r = fake_run(
        EVENTS,
        gpus="2xA100-80GB,1xT4",
        CARVE_FAKE_XID_FILE=str(xid),
        CARVE_FAKE_LOST_FILE=str(tmp_path / "lost"),
    )
    xid_type = 0x8
    assert r["supported"] & xid_type
    assert r["first"] == "NVMLError_Timeout"
    unattributed = 0xFFFFFFFF
    assert r["got"] == [
        [2, xid_type, 94, unattributed, unattributed],
        "NVMLError_Timeout",  # "0 6" has no newline yet
        [0, xid_type, 63, unattributed, unattributed],
    ]
    assert r["bad_mask"] == "NVMLError_NotSupported"  # some requested types are not supported
    assert r["lost"] == "NVMLError_GpuIsLost"


PAGES = """
N.nvmlInit()
res = []
for i in range(N.nvmlDeviceGetCount()):
    h = N.nvmlDeviceGetHandleByIndex(i)
    row = {}
    try:
        row["remap"] = list(N.nvmlDeviceGetRemappedRows(h))
    except N.NVMLError as e:
        row["remap"] = type(e).__name__
    try:
        row["retired"] = N.nvmlDeviceGetRetiredPagesPendingStatus(h)
    except N.NVMLError as e:
        row["retired"] = type(e).__name__
    res.append(row)
out(res)
"""


def test_pages_pending_per_architecture(fake_run, tmp_path):
    pages = tmp_path / "pages"
    pages.write_text("0,2")
    r = fake_run(PAGES, gpus="2xA100-80GB,1xT4", CARVE_FAKE_PAGES_FILE=str(pages))
    assert r[0] == {"remap": [0, 1, 1, 0], "retired": "NVMLError_NotSupported"}  # Ampere: row remapping
    assert r[1] == {"remap": [0, 0, 0, 0], "retired": "NVMLError_NotSupported"}
    assert r[2] == {"remap": "NVMLError_NotSupported", "retired": 1}  # Turing: page retirement
