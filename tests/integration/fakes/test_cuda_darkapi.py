"""The fake libcuda's export tables ("dark API", cuda-runtime-facts.md §2) and contexts, through ctypes.

The integrity check is recomputed here with an independent HMAC-MD2 (MD2 written from RFC 1319, its
S-table derived from pi and checked against the RFC's test vectors), over the record the runtime hashes: if
the fake's answer or the identity it hashes drifts, cudart fails with cudaErrorSoftwareValidityNotEstablished.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from cuda_runtime_support import fake_env
from fakes_support import NATIVE

KEY = bytes.fromhex("146ADDAE53A9A752AA0841360BF55A9F")


def pi_digits(n: int) -> list[int]:
    """Decimal digits of pi (Gibbons' spigot)."""
    q, r, t, k, m, x = 1, 0, 1, 1, 3, 3
    out: list[int] = []
    while len(out) < n:
        if 4 * q + r - t < m * t:
            out.append(m)
            q, r, m = 10 * q, 10 * (r - m * t), (10 * (3 * q + r)) // t - 10 * m
        else:
            m = (q * (7 * k + 2) + r * x) // (t * x)
            q, r, t, k, x = q * k, (2 * q + r) * x, t * x, k + 1, x + 2
    return out


def md2_sbox() -> list[int]:
    """RFC 1319's permutation "constructed from the digits of pi": Fisher-Yates with rejection sampling."""
    digits = iter(pi_digits(3000))

    def rand(n: int) -> int:
        while True:
            x, y = next(digits), 10
            if n > 10:
                x, y = x * 10 + next(digits), 100
            if n > 100:
                x, y = x * 10 + next(digits), 1000
            if x < n * (y // n):
                return x % n

    s = list(range(256))
    for i in range(2, 257):
        j = rand(i)
        s[j], s[i - 1] = s[i - 1], s[j]
    return s


S = md2_sbox()


def md2(msg: bytes) -> bytes:
    pad = 16 - len(msg) % 16
    msg += bytes([pad]) * pad
    c, last = [0] * 16, 0
    for i in range(0, len(msg), 16):
        for j in range(16):
            c[j] ^= S[msg[i + j] ^ last]
            last = c[j]
    msg += bytes(c)
    x = [0] * 48
    for i in range(0, len(msg), 16):
        for j in range(16):
            x[16 + j] = msg[i + j]
            x[32 + j] = x[16 + j] ^ x[j]
        t = 0
        for j in range(18):
            for k in range(48):
                x[k] ^= S[t]
                t = x[k]
            t = (t + j) % 256
    return bytes(x[:16])


def hmac_md2(key: bytes, msg: bytes) -> bytes:
    return md2(bytes(b ^ 0x5C for b in key) + md2(bytes(b ^ 0x36 for b in key) + msg))


def test_md2_matches_rfc_1319_vectors():
    assert md2(b"").hex() == "8350e5a3e24c153df2275c9f80692773"
    assert md2(b"abc").hex() == "da853b0d3f88d99b30283a69e6ded6bb"
    assert md2(b"message digest").hex() == "ab4f496bfb2a530b219ff33031fe06b0"


SNIPPET = r"""
import ctypes, json, os, struct
from ctypes import byref, c_void_p, c_int, c_uint, c_ulonglong, c_size_t, CFUNCTYPE, POINTER
CU = ctypes.CDLL("libcuda.so.1")
res = {}
out16 = (ctypes.c_ubyte * 16)()
for msg in (b"", b"abc", b"message digest"):
    CU.carveFakeMd2(msg, c_size_t(len(msg)), out16)
    res.setdefault("md2", []).append(bytes(out16).hex())
assert CU.cuInit(0) == 0
def table(uuid):
    t = c_void_p()
    rc = CU.cuGetExportTable(byref(t), (ctypes.c_ubyte * 16)(*bytes.fromhex(uuid.replace("-", ""))))
    return rc, t.value
def slot(t, i):
    return ctypes.cast(t, POINTER(c_void_p))[i]
res["unknown"] = table("f8cff951-2146-8b4e-b9e2-fb469e7c0dd9")
rc, cudart = table("6bd5fb6c-5bf4-e74a-8987-d93912fd9df9")
res["cudart_size"] = slot(cudart, 0)
rc, hooks = table("a094798c-2e74-2e74-93f2-0800200c0a66")
buf, size = c_void_p(), c_size_t()
CFUNCTYPE(None, POINTER(c_void_p), POINTER(c_size_t))(slot(hooks, 2))(byref(buf), byref(size))
res["hooks2"] = [bool(buf.value), size.value]
CFUNCTYPE(None, POINTER(c_void_p), POINTER(c_size_t))(slot(hooks, 6))(byref(buf), byref(size))
res["hooks6"] = [bool(buf.value), size.value]
res["tools_tls"] = table("42d85a81-23f6-cb47-8298-f6e78a3aecdc")[0]
res["checks"] = table("263e8860-7cd2-6143-92f6-bbd5006dfa7e")[0]

# CUDART slot 2: the primary context, the same handle cuDevicePrimaryCtxRetain gives
get_primary = CFUNCTYPE(c_int, POINTER(c_void_p), c_int)(slot(cudart, 2))
p1, p2 = c_void_p(), c_void_p()
res["slot2"] = get_primary(byref(p1), 1)
CU.cuDevicePrimaryCtxRetain(byref(p2), 1)
res["same_primary"] = p1.value == p2.value
flags, active = c_uint(), c_int()
CU.cuDevicePrimaryCtxGetState(1, byref(flags), byref(active))
res["active_after_retain"] = active.value

# context local storage: put(ctx, key, value, dtor), delete(ctx, key), get(value*, ctx, key)
rc, cls = table("c693336e-1121-df11-a8c3-68f355d89593")
DTOR = CFUNCTYPE(None, c_void_p, c_void_p, c_void_p)
dtors = []
dtor = DTOR(lambda ctx, key, value: dtors.append([ctx, key, value]))
put = CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, DTOR)(slot(cls, 0))
delete = CFUNCTYPE(c_int, c_void_p, c_void_p)(slot(cls, 1))
get = CFUNCTYPE(c_int, POINTER(c_void_p), c_void_p, c_void_p)(slot(cls, 2))
v = c_void_p()
res["put_no_ctx"] = put(None, 0x10, 0x20, dtor)
CU.cuCtxSetCurrent(p2)
res["get_missing"] = get(byref(v), None, 0x10)
res["put"] = put(None, 0x10, 0x20, dtor)
res["get"] = [get(byref(v), None, 0x10), v.value]
res["get_explicit_ctx"] = [get(byref(v), p2, 0x10), v.value]
ctx0 = c_void_p()
CU.cuDevicePrimaryCtxRetain(byref(ctx0), 0)
res["other_ctx_missing"] = get(byref(v), ctx0, 0x10)
put(None, 0x11, 0x21, dtor)
res["delete"] = delete(None, 0x11)
res["deleted"] = get(byref(v), None, 0x11)
res["reset"] = CU.cuDevicePrimaryCtxReset_v2(1)
res["dtors"] = dtors
res["after_reset"] = get(byref(v), None, 0x10)

# integrity check slot 1 for version % 10 == 0, 1 and 2
rc, integ = table("d4082055-bde6-704b-8d34-ba123c66e1f2")
fn_addr = slot(integ, 1)
check = CFUNCTYPE(c_int, c_uint, c_ulonglong, POINTER(c_ulonglong * 2))(fn_addr)
answers = {}
for version in (13050, 13051, 13052):
    o = (c_ulonglong * 2)()
    assert check(version, 1700000000, byref(o)) == 0
    answers[version] = struct.pack("<QQ", o[0], o[1]).hex()
libc = ctypes.CDLL(None)
libc.pthread_self.restype = ctypes.c_ulong
drv, n = c_int(), c_int()
CU.cuDriverGetVersion(byref(drv)); CU.cuDeviceGetCount(byref(n))
devices = []
for i in range(n.value):
    u = (ctypes.c_ubyte * 16)()
    CU.cuDeviceGetUuid(u, i)
    pci = []
    for attr in (50, 33, 34):  # PCI_DOMAIN_ID, PCI_BUS_ID, PCI_DEVICE_ID
        a = c_int(); CU.cuDeviceGetAttribute(byref(a), attr, i); pci.append(a.value)
    devices.append([bytes(u).hex(), pci])
res["integrity"] = {"answers": answers, "driver": drv.value, "pid": os.getpid(),
                    "tid": libc.pthread_self() & 0xffffffff, "cudart": cudart, "table": integ, "fn": fn_addr,
                    "devices": devices}

# contexts are per thread; push/pop nest
import threading
seen = {}
def other():
    c = c_void_p(); CU.cuCtxGetCurrent(byref(c)); seen["other"] = c.value
threading.Thread(target=other).start()
import time; time.sleep(0.2)
res["other_thread_ctx"] = seen["other"]
created = c_void_p()
CU.cuCtxCreate_v2(byref(created), 0, 0)
cur = c_void_p(); CU.cuCtxGetCurrent(byref(cur))
res["created_current"] = cur.value == created.value
popped = c_void_p()
CU.cuCtxPopCurrent_v2(byref(popped)); CU.cuCtxGetCurrent(byref(cur))
res["popped"] = [popped.value == created.value, cur.value == p2.value]
res["destroy_created"] = CU.cuCtxDestroy_v2(created)
res["destroy_primary"] = CU.cuCtxDestroy_v2(p2)
res["destroy_bogus"] = CU.cuCtxDestroy_v2(c_void_p(0x4321))
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def darkapi() -> dict:
    subprocess.run(["make", "-s", "-C", str(NATIVE), "build/fakes/libcuda.so.1"], check=True)
    proc = subprocess.run([sys.executable, "-c", SNIPPET], env=fake_env("2xA100-80GB"), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_fake_md2_matches_the_rfc(darkapi):
    assert darkapi["md2"] == [md2(m).hex() for m in (b"", b"abc", b"message digest")]


def test_tables_the_runtime_needs(darkapi):
    assert darkapi["unknown"] == [500, None], "unknown tables: CUDA_ERROR_NOT_FOUND and no table"
    assert darkapi["cudart_size"] == 13 * 8
    assert darkapi["hooks2"] == [True, 1024] and darkapi["hooks6"] == [True, 56]
    assert darkapi["tools_tls"] == 0 and darkapi["checks"] == 0


def test_primary_context_is_one_handle(darkapi):
    assert darkapi["slot2"] == 0 and darkapi["same_primary"]
    assert darkapi["active_after_retain"] == 1


def test_context_local_storage(darkapi):
    r = darkapi
    assert r["put_no_ctx"] != 0, "NULL means the current context, and there is none yet"
    assert r["get_missing"] == 400, "a missing key is an error (the runtime then builds its state)"
    assert r["put"] == 0 and r["get"] == [0, 0x20] and r["get_explicit_ctx"] == [0, 0x20]
    assert r["other_ctx_missing"] == 400, "storage is per context"
    assert r["delete"] == 0 and r["deleted"] == 400
    assert r["reset"] == 0
    assert [d[1:] for d in r["dtors"]] == [[0x10, 0x20]], "a primary context reset runs the destructors"
    assert r["after_reset"] == 400


def test_integrity_check_is_hmac_md2_of_the_callers_identity(darkapi):
    i = darkapi["integrity"]
    assert i["answers"]["13050"] == bytes.fromhex("5C67CB031C184133E8D14C1FAA83D38E").hex()
    assert i["answers"]["13051"] == bytes.fromhex("5C67CB031C184118E8D14C1FAA83D38E").hex()
    record = struct.pack("<IIIIQQQQ", i["driver"], 13052, i["pid"], i["tid"], i["cudart"], i["table"],
                         i["fn"], 1700000000)
    for uuid, (domain, bus, device) in i["devices"]:
        record += bytes.fromhex(uuid) + struct.pack("<iii", domain, bus, device)
    assert i["answers"]["13052"] == hmac_md2(KEY, record).hex()


def test_contexts_are_per_thread_and_nest(darkapi):
    r = darkapi
    assert r["other_thread_ctx"] is None, "a new thread has no current context"
    assert r["created_current"] and r["popped"] == [True, True]
    assert r["destroy_created"] == 0
    assert r["destroy_primary"] == 201 and r["destroy_bogus"] == 201  # CUDA_ERROR_INVALID_CONTEXT


def test_cuda_generator_runs_from_any_directory(tmp_path: Path):
    proc = subprocess.run([sys.executable, str(NATIVE / "fakes" / "gen_cuda_symbols.py")], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "FC_GEN_SYMBOLS" in proc.stdout
