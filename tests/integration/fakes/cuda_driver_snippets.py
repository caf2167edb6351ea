# ruff: noqa: E501  (the snippets are program text run in a subprocess; CUDA C inside keeps its lines)
"""Python snippets that drive the fake libcuda.so.1 through ctypes, run in a fresh process each.

Kept as source text (the fakes read their environment once per process); test_cuda_driver.py runs them
with fake_env() and parses the JSON line they print.
"""

PRELUDE = r"""
import ctypes, json, os, struct, sys, time
from ctypes import byref, c_void_p, c_int, c_uint, c_size_t, c_uint64, c_float, c_char_p
CU = ctypes.CDLL("libcuda.so.1")
def ck(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} failed: {rc}")
ck(CU.cuInit(0), "cuInit")
dev = c_int()
ck(CU.cuDeviceGet(byref(dev), 0), "cuDeviceGet")
ctx = c_void_p()
ck(CU.cuDevicePrimaryCtxRetain(byref(ctx), dev), "retain")
ck(CU.cuCtxSetCurrent(ctx), "set current")

def image(name):
    # real NVRTC 12.9 output committed under images/ (make_images.py): sm_80/sm_75 cubins and PTX of
    # scale(float*, float, int), mangled(int*) = _Z7mangledPi, table (float[37]), use_table(float*)
    with open(os.path.join(os.environ["IMAGES"], name), "rb") as f:
        return f.read()

def fatbin(payload, kind, sm, flags=0x11, usize=0):
    # fatbin entry: kind, version 0x101, header 64, payload size, compressed size, sm at 28, flags at 40,
    # uncompressed size at 56; then the payload padded to 8 bytes
    pad = (-len(payload)) % 8
    entry = struct.pack("<HHIQII", kind, 0x101, 64, len(payload) + pad, len(payload), 0)
    entry += struct.pack("<I", 0) + struct.pack("<I", sm) + struct.pack("<II", 0, 0)
    entry += struct.pack("<Q", flags) + struct.pack("<Q", 0) + struct.pack("<Q", usize)
    assert len(entry) == 64
    body = entry + payload + b"\0" * pad
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body

def out(obj):
    print(json.dumps(obj))
"""

MODULES = r"""
res = {}
cubin = image("kernels.sm_80.cubin")
res["elf"] = [cubin[:4] == b"\x7fELF", cubin[0x30]]
mod = c_void_p()
ck(CU.cuModuleLoadData(byref(mod), cubin), "cuModuleLoadData")
f = c_void_p()
res["scale"] = CU.cuModuleGetFunction(byref(f), mod, b"scale")
res["unknown"] = CU.cuModuleGetFunction(byref(c_void_p()), mod, b"no_such_kernel")
res["mangled"] = CU.cuModuleGetFunction(byref(c_void_p()), mod, b"_Z7mangledPi")
f2 = c_void_p()
CU.cuModuleGetFunction(byref(f2), mod, b"scale")
res["same_handle"] = f.value == f2.value
dptr, size = c_uint64(), c_size_t()
res["global"] = CU.cuModuleGetGlobal_v2(byref(dptr), byref(size), mod, b"table")
res["global_size"] = size.value
vals = (c_float * 37)(*range(37))
back = (c_float * 37)()
ck(CU.cuMemcpyHtoD_v2(dptr, vals, 148), "HtoD global")
ck(CU.cuMemcpyDtoH_v2(back, dptr, 148), "DtoH global")
res["global_roundtrip"] = list(back) == list(vals)
attr = c_int()
ck(CU.cuFuncGetAttribute(byref(attr), 0, f), "max threads")  # CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
res["max_threads"] = attr.value
ck(CU.cuFuncGetAttribute(byref(attr), 6, f), "binary version")  # CU_FUNC_ATTRIBUTE_BINARY_VERSION
res["binary_version"] = attr.value

# a CUDA 13 cubin keeps its SM in e_flags bits 8-15 (EI_ABIVERSION 8): the same image marked that way
cubin13 = bytearray(cubin)
cubin13[8] = 8
cubin13[0x30:0x34] = struct.pack("<I", 0x6005004)
mod13 = c_void_p()
ck(CU.cuModuleLoadData(byref(mod13), bytes(cubin13)), "cuModuleLoadData(cuda 13 abi)")
f13 = c_void_p()
ck(CU.cuModuleGetFunction(byref(f13), mod13, b"scale"), "function 13")
ck(CU.cuFuncGetAttribute(byref(attr), 6, f13), "binary version 13")
res["binary_version_abi8"] = attr.value

ptx = image("kernels.ptx") + b"\0"
lib = c_void_p()
ck(CU.cuLibraryLoadData(byref(lib), ptx, None, None, 0, None, None, 0), "cuLibraryLoadData(ptx)")
k = c_void_p()
res["ptx_kernel"] = CU.cuLibraryGetKernel(byref(k), lib, b"use_table")
res["ptx_unknown"] = CU.cuLibraryGetKernel(byref(c_void_p()), lib, b"nope")
res["ptx_global"] = CU.cuLibraryGetGlobal(byref(dptr), byref(size), lib, b"table")
res["ptx_global_size"] = size.value
fn = c_void_p()
ck(CU.cuKernelGetFunction(byref(fn), k), "cuKernelGetFunction")
res["kernel_is_function"] = fn.value == k.value
m2 = c_void_p()
ck(CU.cuLibraryGetModule(byref(m2), lib), "cuLibraryGetModule")
res["module_of_library"] = CU.cuModuleGetFunction(byref(c_void_p()), m2, b"use_table")

# a fatbin holding sm_75 and sm_80 cubins, inside a __fatBinC_Wrapper_t, as cudart registers it
cubin75 = image("kernels.sm_75.cubin")
body75 = fatbin(cubin75, 2, 75)[16:]
body80 = fatbin(cubin, 2, 80)[16:]
image = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body75) + len(body80)) + body75 + body80
image_buf = ctypes.create_string_buffer(image, len(image))
wrapper = struct.pack("<IIQQ", 0x466243B1, 1, ctypes.addressof(image_buf), 0)
wrapper_buf = ctypes.create_string_buffer(wrapper, len(wrapper))
lib2 = c_void_p()
ck(CU.cuLibraryLoadData(byref(lib2), wrapper_buf, None, None, 0, None, None, 0), "cuLibraryLoadData(wrapper)")
res["wrapper_sm80"] = CU.cuLibraryGetKernel(byref(c_void_p()), lib2, b"scale")
res["wrapper_not_sm75"] = CU.cuLibraryGetKernel(byref(c_void_p()), lib2, b"scale75")

# compressed entries, compressed here with the system's liblz4 / libzstd
lz4 = ctypes.CDLL("liblz4.so.1")
dst = ctypes.create_string_buffer(len(cubin) * 2 + 1024)
n = lz4.LZ4_compress_default(cubin, dst, len(cubin), len(dst))
lib3 = c_void_p()
ck(CU.cuLibraryLoadData(byref(lib3), fatbin(dst.raw[:n], 2, 80, 0x2011, len(cubin)), None, None, 0, None, None, 0),
   "cuLibraryLoadData(lz4)")
res["lz4_known"] = CU.cuLibraryGetKernel(byref(c_void_p()), lib3, b"scale")
res["lz4_unknown"] = CU.cuLibraryGetKernel(byref(c_void_p()), lib3, b"nope")
zstd = ctypes.CDLL("libzstd.so.1")
zstd.ZSTD_compress.restype = c_size_t
n = zstd.ZSTD_compress(dst, len(dst), cubin, len(cubin), 3)
lib4 = c_void_p()
ck(CU.cuLibraryLoadData(byref(lib4), fatbin(dst.raw[:n], 2, 80, 0x8011, len(cubin)), None, None, 0, None, None, 0),
   "cuLibraryLoadData(zstd)")
res["zstd_known"] = CU.cuLibraryGetKernel(byref(c_void_p()), lib4, b"scale")
res["zstd_unknown"] = CU.cuLibraryGetKernel(byref(c_void_p()), lib4, b"nope")
res["zstd_global"] = CU.cuLibraryGetGlobal(byref(dptr), byref(size), lib4, b"table")
res["zstd_global_size"] = size.value
res["garbage"] = CU.cuModuleLoadData(byref(c_void_p()), b"not an image at all\0")
ck(CU.cuModuleUnload(mod), "cuModuleUnload")
res["after_unload"] = CU.cuModuleGetFunction(byref(c_void_p()), mod, b"scale")
out(res)
"""

TIMING = r"""
res = {}
cubin = image("kernels.sm_80.cubin")
mod, f = c_void_p(), c_void_p()
ck(CU.cuModuleLoadData(byref(mod), cubin), "load")
ck(CU.cuModuleGetFunction(byref(f), mod, b"scale"), "function")
s = c_void_p()
ck(CU.cuStreamCreate(byref(s), 1), "stream")
e0, e1, e2 = c_void_p(), c_void_p(), c_void_p()
for e in (e0, e1, e2):
    ck(CU.cuEventCreate(byref(e), 0), "event")
x = c_uint64()
ck(CU.cuMemAlloc_v2(byref(x), 4096), "alloc")
n, a = c_int(1024), c_float(2.0)
args = (c_void_p * 3)(ctypes.cast(byref(x), c_void_p), ctypes.cast(byref(a), c_void_p), ctypes.cast(byref(n), c_void_p))
sms = c_int()
ck(CU.cuDeviceGetAttribute(byref(sms), 16, dev), "SMs")  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
waves = 5
ck(CU.cuEventRecord(e0, s), "record")
ck(CU.cuLaunchKernel(f, sms.value * waves, 1, 1, 256, 1, 1, 0, s, args, None), "launch")
ck(CU.cuEventRecord(e1, s), "record")
res["stream_query_pending"] = CU.cuStreamQuery(s)
res["event_query_pending"] = CU.cuEventQuery(e1)
ms = c_float()
res["elapsed_pending"] = CU.cuEventElapsedTime(byref(ms), e0, e1)
ck(CU.cuStreamSynchronize(s), "sync")
res["stream_query_done"] = CU.cuStreamQuery(s)
ck(CU.cuEventElapsedTime(byref(ms), e0, e1), "elapsed")
res["kernel_ms"] = ms.value

# the same launch twice, captured into a graph and replayed
ck(CU.cuStreamBeginCapture_v2(s, 0), "begin capture")
status = c_int()
ck(CU.cuStreamIsCapturing(s, byref(status)), "is capturing")
res["capturing"] = status.value
t0 = time.monotonic()
for _ in range(2):
    ck(CU.cuLaunchKernel(f, sms.value * waves, 1, 1, 256, 1, 1, 0, s, args, None), "captured launch")
ck(CU.cuMemsetD32Async(x, 0x3F800000, 16, s), "captured memset")
res["capture_s"] = time.monotonic() - t0
g = c_void_p()
ck(CU.cuStreamEndCapture(s, byref(g)), "end capture")
nodes = c_size_t()
ck(CU.cuGraphGetNodes(g, None, byref(nodes)), "nodes")
res["nodes"] = nodes.value
ge = c_void_p()
ck(CU.cuGraphInstantiateWithFlags(byref(ge), g, c_uint64(0)), "instantiate")
ck(CU.cuEventRecord(e1, s), "record")
ck(CU.cuGraphLaunch(ge, s), "graph launch")
ck(CU.cuEventRecord(e2, s), "record")
ck(CU.cuEventSynchronize(e2), "event sync")
ck(CU.cuEventElapsedTime(byref(ms), e1, e2), "elapsed")
res["graph_ms"] = ms.value
back = (c_uint * 16)()
ck(CU.cuMemcpyDtoH_v2(back, x, 64), "DtoH")
res["graph_memset"] = all(v == 0x3F800000 for v in back)
ck(CU.cuGraphExecDestroy(ge), "exec destroy")
ck(CU.cuGraphDestroy(g), "graph destroy")
res["bad_stream"] = CU.cuStreamQuery(c_void_p(0x1234))
res["bad_event"] = CU.cuEventQuery(c_void_p(0x1234))
out(res)
"""

VMM = r"""
res = {}
total = c_size_t()
ck(CU.cuDeviceTotalMem_v2(byref(total), dev), "total")
free0, t = c_size_t(), c_size_t()
ck(CU.cuMemGetInfo_v2(byref(free0), byref(t)), "meminfo")

class Loc(ctypes.Structure):
    _fields_ = [("type", c_int), ("id", c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", c_int), ("requestedHandleTypes", c_int), ("location", Loc), ("win32", c_void_p),
                ("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]
class Access(ctypes.Structure):
    _fields_ = [("location", Loc), ("flags", c_int)]
prop = Prop(type=1, location=Loc(type=1, id=0))  # PINNED on device 0
gran = c_size_t()
ck(CU.cuMemGetAllocationGranularity(byref(gran), byref(prop), 0), "granularity")
res["granularity"] = gran.value
reserve = (total.value * 9 // 8 + gran.value - 1) // gran.value * gran.value  # PyTorch's 1.125 x total
va = c_uint64()
res["reserve"] = CU.cuMemAddressReserve(byref(va), c_size_t(reserve), c_size_t(0), c_uint64(0), c_uint64(0))
free1 = c_size_t()
ck(CU.cuMemGetInfo_v2(byref(free1), byref(t)), "meminfo")
res["reserve_takes_no_memory"] = free1.value == free0.value
h = c_uint64()
size = 20 << 20
ck(CU.cuMemCreate(byref(h), c_size_t(size), byref(prop), c_uint64(0)), "create")
ck(CU.cuMemGetInfo_v2(byref(free1), byref(t)), "meminfo")
res["create_charged"] = free0.value - free1.value
ck(CU.cuMemMap(va, c_size_t(size), c_size_t(0), h, c_uint64(0)), "map")
acc = Access(location=Loc(type=1, id=0), flags=3)
ck(CU.cuMemSetAccess(va, c_size_t(size), byref(acc), c_size_t(1)), "access")
data = ctypes.create_string_buffer(b"expandable" * 100)
ck(CU.cuMemcpyHtoD_v2(c_uint64(va.value + 12345), data, len(data)), "HtoD")
back = ctypes.create_string_buffer(len(data))
ck(CU.cuMemcpyDtoH_v2(back, c_uint64(va.value + 12345), len(data)), "DtoH")
res["vmm_roundtrip"] = back.raw == data.raw
h2 = c_uint64()
ck(CU.cuMemRetainAllocationHandle(byref(h2), c_void_p(va.value + 4096)), "retain handle")
res["retained_same"] = h2.value == h.value
p2 = Prop()
ck(CU.cuMemGetAllocationPropertiesFromHandle(byref(p2), h), "props")
res["prop_device"] = p2.location.id
ck(CU.cuMemRelease(h2), "release retained")
res["unmapped_copy"] = CU.cuMemcpyHtoD_v2(c_uint64(va.value + size + 10), data, 10)
ck(CU.cuMemUnmap(va, c_size_t(size)), "unmap")
ck(CU.cuMemRelease(h), "release")
ck(CU.cuMemGetInfo_v2(byref(free1), byref(t)), "meminfo")
res["released"] = free1.value == free0.value
ck(CU.cuMemAddressFree(va, c_size_t(reserve)), "address free")

# a pool with a release threshold keeps freed memory charged until trimmed (PyTorch's cudaMallocAsync)
pool = c_void_p()
ck(CU.cuDeviceGetDefaultMemPool(byref(pool), dev), "default pool")
thr = c_uint64(2**64 - 1)
ck(CU.cuMemPoolSetAttribute(pool, 4, byref(thr)), "threshold")  # CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
p = c_uint64()
ck(CU.cuMemAllocAsync(byref(p), c_size_t(30 << 20), None), "alloc async")
ck(CU.cuMemFreeAsync(p, None), "free async")
ck(CU.cuMemGetInfo_v2(byref(free1), byref(t)), "meminfo")
res["pool_keeps"] = free0.value - free1.value
reserved = c_uint64()
ck(CU.cuMemPoolGetAttribute(pool, 5, byref(reserved)), "reserved")  # RESERVED_MEM_CURRENT
res["pool_reserved"] = reserved.value
p3 = c_uint64()
ck(CU.cuMemAllocAsync(byref(p3), c_size_t(30 << 20), None), "alloc async again")
res["pool_reuses"] = p3.value == p.value
ck(CU.cuMemFreeAsync(p3, None), "free async")
ck(CU.cuMemPoolTrimTo(pool, c_size_t(0)), "trim")
ck(CU.cuMemGetInfo_v2(byref(free1), byref(t)), "meminfo")
res["pool_trimmed"] = free1.value == free0.value
res["bad_pool"] = CU.cuMemAllocFromPoolAsync(byref(p), c_size_t(4096), c_void_p(0x1000), None)
out(res)
"""

RESOLVE = r"""
# every (name, api, version, per-thread) row of the generated table: cuGetProcAddress_v2(api, version, flags)
# must hand out exactly what dlsym(name) gives
rows = [r.split(":") for r in os.environ["ROWS"].split(",")]
CU.cuGetProcAddress_v2.argtypes = [c_char_p, ctypes.POINTER(c_void_p), c_int, c_uint64, ctypes.POINTER(c_int)]
libdl = ctypes.CDLL("libdl.so.2")
libdl.dlsym.restype = c_void_p
libdl.dlsym.argtypes = [c_void_p, c_char_p]
unresolved, unexported, differ = [], [], []
for name, api, version, pt in rows:
    fn, status = c_void_p(), c_int()
    rc = CU.cuGetProcAddress_v2(api.encode(), byref(fn), int(version), 2 if pt == "1" else 0, byref(status))
    exported = libdl.dlsym(c_void_p(CU._handle), name.encode())
    if rc != 0 or not fn.value:
        unresolved.append(name)
    elif not exported:
        unexported.append(name)
    elif fn.value != exported:
        differ.append(name)
CU.cuGraphicsUnregisterResource.argtypes = [c_void_p]
out({"rows": len(rows), "unresolved": unresolved, "unexported": unexported, "differ": differ,
     "stub_rc": CU.cuGraphicsUnregisterResource(None),
     "old_abi": [n for n in ("cuDevicePrimaryCtxRelease", "cuEventElapsedTime", "cuMemcpyHtoD_v2",
                             "cuStreamGetCaptureInfo_v2", "cuGraphInstantiate", "cuKernelGetLibrary",
                             "cuMemsetD8_v2", "cuDevicePrimaryCtxGetState")
                 if not libdl.dlsym(c_void_p(CU._handle), n.encode())],
     "empty": CU.cuGetProcAddress_v2(b"", byref(c_void_p()), 0, 0, byref(c_int())),
     "unknown": CU.cuGetProcAddress_v2(b"cuNoSuchThing", byref(c_void_p()), 13000, 0, byref(c_int())),
     "old_version": CU.cuGetProcAddress_v2(b"cuMemAlloc", byref(c_void_p()), 1000, 0, byref(c_int()))})
"""

GRAPHS = r"""
# a graph built node by node: kernel, memset, memcpy; instantiated, launched, updated
res = {}
class KParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS (v2)
    _fields_ = [("func", c_void_p), ("gridDimX", c_uint), ("gridDimY", c_uint), ("gridDimZ", c_uint),
                ("blockDimX", c_uint), ("blockDimY", c_uint), ("blockDimZ", c_uint), ("sharedMemBytes", c_uint),
                ("kernelParams", c_void_p), ("extra", c_void_p), ("kern", c_void_p), ("ctx", c_void_p)]
class MsParams(ctypes.Structure):  # CUDA_MEMSET_NODE_PARAMS
    _fields_ = [("dst", c_uint64), ("pitch", c_size_t), ("value", c_uint), ("elementSize", c_uint),
                ("width", c_size_t), ("height", c_size_t)]
class Copy3D(ctypes.Structure):  # CUDA_MEMCPY3D
    _fields_ = [("srcXInBytes", c_size_t), ("srcY", c_size_t), ("srcZ", c_size_t), ("srcLOD", c_size_t),
                ("srcMemoryType", c_int), ("srcHost", c_void_p), ("srcDevice", c_uint64), ("srcArray", c_void_p),
                ("reserved0", c_void_p), ("srcPitch", c_size_t), ("srcHeight", c_size_t),
                ("dstXInBytes", c_size_t), ("dstY", c_size_t), ("dstZ", c_size_t), ("dstLOD", c_size_t),
                ("dstMemoryType", c_int), ("dstHost", c_void_p), ("dstDevice", c_uint64), ("dstArray", c_void_p),
                ("reserved1", c_void_p), ("dstPitch", c_size_t), ("dstHeight", c_size_t),
                ("WidthInBytes", c_size_t), ("Height", c_size_t), ("Depth", c_size_t)]
CU.carveFakeKernel.restype = c_void_p
kernel = c_void_p(CU.carveFakeKernel(c_uint64(3000000)))  # a kernel handle whose waves take 3 ms
sms = c_int()
ck(CU.cuDeviceGetAttribute(byref(sms), 16, dev), "SMs")
d = c_uint64()
ck(CU.cuMemAlloc_v2(byref(d), 8192), "alloc")
g = c_void_p()
ck(CU.cuGraphCreate(byref(g), 0), "create")
kn, mn, cn = c_void_p(), c_void_p(), c_void_p()
kp = KParams(func=kernel, gridDimX=sms.value * 2, gridDimY=1, gridDimZ=1, blockDimX=128, blockDimY=1, blockDimZ=1)
ck(CU.cuGraphAddKernelNode_v2(byref(kn), g, None, c_size_t(0), byref(kp)), "kernel node")
ms = MsParams(dst=d.value, pitch=0, value=0xAB, elementSize=1, width=4096, height=1)
ck(CU.cuGraphAddMemsetNode(byref(mn), g, byref(kn), c_size_t(1), byref(ms), ctx), "memset node")
src = ctypes.create_string_buffer(b"graph-copy" * 10)
cp = Copy3D(srcMemoryType=1, srcHost=ctypes.addressof(src), dstMemoryType=2, dstDevice=d.value + 4096,
            WidthInBytes=100, Height=1, Depth=1)
ck(CU.cuGraphAddMemcpyNode(byref(cn), g, byref(mn), c_size_t(1), byref(cp), ctx), "memcpy node")
types = []
for node in (kn, mn, cn):
    t = c_int(); ck(CU.cuGraphNodeGetType(node, byref(t)), "type"); types.append(t.value)
res["types"] = types
ge = c_void_p()
ck(CU.cuGraphInstantiateWithFlags(byref(ge), g, c_uint64(0)), "instantiate")
s = c_void_p()
ck(CU.cuStreamCreate(byref(s), 1), "stream")
e0, e1 = c_void_p(), c_void_p()
ck(CU.cuEventCreate(byref(e0), 0), "event"); ck(CU.cuEventCreate(byref(e1), 0), "event")
def timed_launch():
    ck(CU.cuEventRecord(e0, s), "record")
    ck(CU.cuGraphLaunch(ge, s), "launch")
    ck(CU.cuEventRecord(e1, s), "record")
    ck(CU.cuStreamSynchronize(s), "sync")
    ms_ = c_float()
    ck(CU.cuEventElapsedTime(byref(ms_), e0, e1), "elapsed")
    return ms_.value
res["ms"] = timed_launch()
back = ctypes.create_string_buffer(8192)
ck(CU.cuMemcpyDtoH_v2(back, d, 8192), "DtoH")
res["memset"] = back.raw[:4096] == b"\xab" * 4096
res["memcpy"] = back.raw[4096:4196] == src.raw[:100]
# the kernel's grid doubles in the graph; the executable graph takes it through cuGraphExecUpdate
kp.gridDimX = sms.value * 4
ck(CU.cuGraphKernelNodeSetParams_v2(kn, byref(kp)), "set params")
res["ms_before_update"] = timed_launch()
class UpdateInfo(ctypes.Structure):
    _fields_ = [("result", c_int), ("errorNode", c_void_p), ("errorFromNode", c_void_p)]
info = UpdateInfo()
res["update"] = CU.cuGraphExecUpdate_v2(ge, g, byref(info))
res["ms_after_update"] = timed_launch()
kp.gridDimX = sms.value
ck(CU.cuGraphExecKernelNodeSetParams_v2(ge, kn, byref(kp)), "exec set params")
res["ms_exec_set"] = timed_launch()
g2 = c_void_p()
ck(CU.cuGraphCreate(byref(g2), 0), "create other")
res["update_topology"] = CU.cuGraphExecUpdate_v2(ge, g2, byref(info))
res["update_result"] = info.result
ck(CU.cuGraphExecDestroy(ge), "exec destroy")
ck(CU.cuGraphDestroy(g), "destroy")
res["destroyed"] = CU.cuGraphGetNodes(g, None, byref(c_size_t()))
out(res)
"""
