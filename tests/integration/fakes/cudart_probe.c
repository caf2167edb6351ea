/*
 * cudart_probe.c: a CUDA runtime program (no device code) run on the fake libcuda by test_cudart_real.py.
 * Built with gcc against a PyPI cudart wheel's headers and linked to its libcudart.so.N, so the real
 * runtime's initialisation, dark-API checks and driver calls run unchanged.
 *
 * usage: cudart_probe <step>...; steps: init, props, memory, streams, async, graph, reset, hold. Each step prints
 * "key value" lines; a failing call prints "FAIL <step> <call> <error name>" and the program exits 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

static const char *g_step;

#define CK(call)                                                                                           \
    do {                                                                                                   \
        cudaError_t e_ = (call);                                                                           \
        if (e_ != cudaSuccess) {                                                                           \
            printf("FAIL %s %s %s\n", g_step, #call, cudaGetErrorName(e_));                                \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

static void step_init(void)
{
    int n = -1, rt = 0, drv = 0;
    CK(cudaGetDeviceCount(&n));
    CK(cudaRuntimeGetVersion(&rt));
    CK(cudaDriverGetVersion(&drv));
    printf("count %d\nruntime %d\ndriver %d\n", n, rt, drv);
}

static void step_props(void)
{
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    for (int i = 0; i < n; i++) {
        struct cudaDeviceProp p;
        CK(cudaGetDeviceProperties(&p, i));
        printf("dev%d.name %s\n", i, p.name);
        printf("dev%d.mem %zu\n", i, p.totalGlobalMem);
        printf("dev%d.cc %d.%d\n", i, p.major, p.minor);
        printf("dev%d.sms %d\n", i, p.multiProcessorCount);
        printf("dev%d.smem_optin %zu\n", i, p.sharedMemPerBlockOptin);
        printf("dev%d.l2 %d\n", i, p.l2CacheSize);
        printf("dev%d.pci %04x:%02x:%02x\n", i, p.pciDomainID, p.pciBusID, p.pciDeviceID);
        char uuid[40];
        for (int k = 0; k < 16; k++)
            sprintf(uuid + 2 * k, "%02x", (unsigned char)p.uuid.bytes[k]);
        printf("dev%d.uuid %s\n", i, uuid);
        int v = 0;
        CK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxThreadsPerBlock, i));
        printf("dev%d.max_threads %d\n", i, v);
    }
}

static void step_memory(void)
{
    size_t free0, total, free1, free2;
    CK(cudaSetDevice(0));
    CK(cudaMemGetInfo(&free0, &total));
    const size_t n = 64 << 20;
    unsigned char *d = NULL;
    CK(cudaMalloc((void **)&d, n));
    CK(cudaMemGetInfo(&free1, &total));
    unsigned char *h = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        h[i] = (unsigned char)(i * 7 + 3);
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    memset(back, 0, n);
    CK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
    printf("roundtrip %d\n", memcmp(h, back, n) == 0);
    CK(cudaMemset(d + 16, 0xab, 100));
    CK(cudaMemcpy(back, d, 200, cudaMemcpyDefault));
    printf("memset %d\n", back[15] == h[15] && back[16] == 0xab && back[115] == 0xab && back[116] == h[116]);
    unsigned char *d2 = NULL;
    CK(cudaMalloc((void **)&d2, 4096));
    CK(cudaMemcpy(d2, d + 1000, 4096, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(back, d2, 4096, cudaMemcpyDeviceToHost));
    printf("dtod %d\n", memcmp(back, h + 1000, 4096) == 0);
    struct cudaPointerAttributes pa;
    CK(cudaPointerGetAttributes(&pa, d + 5));
    printf("ptr_type %d\nptr_device %d\n", (int)pa.type, pa.device);
    CK(cudaFree(d));
    CK(cudaFree(d2));
    CK(cudaMemGetInfo(&free2, &total));
    printf("total %zu\nused_by_alloc %zu\nreleased %d\n", total, free0 - free1, free2 == free0);
    free(h);
    free(back);
}

static void step_streams(void)
{
    CK(cudaSetDevice(0));
    cudaStream_t s;
    cudaEvent_t a, b;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    void *d;
    CK(cudaMalloc(&d, 1 << 20));
    CK(cudaEventRecord(a, s));
    CK(cudaMemsetAsync(d, 1, 1 << 20, s));
    CK(cudaEventRecord(b, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaEventSynchronize(b));
    float ms = -1;
    CK(cudaEventElapsedTime(&ms, a, b));
    printf("elapsed_ok %d\n", ms >= 0);
    printf("query %d\n", (int)cudaStreamQuery(s));
    printf("equery %d\n", (int)cudaEventQuery(b));
    int lo, hi;
    CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    printf("prio %d %d\n", lo, hi);
    CK(cudaFree(d));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaStreamDestroy(s));
    CK(cudaDeviceSynchronize());
}

static void step_async(void)
{
    CK(cudaSetDevice(0));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    size_t free0, free1, free2, total;
    CK(cudaMemGetInfo(&free0, &total));
    void *p = NULL;
    CK(cudaMallocAsync(&p, 32 << 20, s));
    CK(cudaMemsetAsync(p, 0x5a, 32 << 20, s));
    unsigned char back[8];
    CK(cudaMemcpyAsync(back, (char *)p + 100, 8, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    printf("async_memset %d\n", back[0] == 0x5a && back[7] == 0x5a);
    CK(cudaMemGetInfo(&free1, &total));
    printf("async_used %d\n", free0 - free1 >= (32u << 20));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamSynchronize(s));
    cudaMemPool_t pool;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t thr = 0;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
    CK(cudaMemPoolTrimTo(pool, 0));
    CK(cudaMemGetInfo(&free2, &total));
    printf("async_released %d\n", free2 == free0);
    CK(cudaStreamDestroy(s));
}

static void step_graph(void)
{
    CK(cudaSetDevice(0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned char *d;
    CK(cudaMalloc((void **)&d, 4096));
    CK(cudaMemset(d, 0, 4096));
    static unsigned char src[256], back[4096];
    for (int i = 0; i < 256; i++)
        src[i] = (unsigned char)(255 - i);
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enum cudaStreamCaptureStatus st;
    CK(cudaStreamIsCapturing(s, &st));
    printf("capturing %d\n", st == cudaStreamCaptureStatusActive);
    CK(cudaMemsetAsync(d, 0x11, 1024, s));
    CK(cudaMemcpyAsync(d + 2048, src, 256, cudaMemcpyHostToDevice, s));
    cudaGraph_t g;
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaMemcpy(back, d, 4096, cudaMemcpyDeviceToHost));
    printf("not_run_at_capture %d\n", back[0] == 0 && back[2048] == 0);
    size_t nodes = 0;
    CK(cudaGraphGetNodes(g, NULL, &nodes));
    printf("nodes %zu\n", nodes);
    cudaGraphExec_t e;
    CK(cudaGraphInstantiate(&e, g, 0));
    CK(cudaGraphLaunch(e, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(back, d, 4096, cudaMemcpyDeviceToHost));
    printf("replayed %d\n", back[0] == 0x11 && back[1023] == 0x11 && back[1024] == 0 && back[2048] == 255 &&
                                back[2303] == 0);
    CK(cudaGraphExecDestroy(e));
    CK(cudaGraphDestroy(g));
    CK(cudaFree(d));
    CK(cudaStreamDestroy(s));
}

/* cudaDeviceReset resets the primary context (context local storage destructors run); the runtime then
 * builds its state again on the next call. Also the third device (a T4 in the tests). */
static void step_reset(void)
{
    void *d;
    size_t free_b, total;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&d, 1 << 20));
    CK(cudaDeviceReset());
    CK(cudaMalloc(&d, 1 << 20));
    CK(cudaMemset(d, 7, 1 << 20));
    unsigned char b = 0;
    CK(cudaMemcpy(&b, (char *)d + 12345, 1, cudaMemcpyDeviceToHost));
    printf("after_reset %d\n", b == 7);
    CK(cudaFree(d));
    CK(cudaSetDevice(2));
    CK(cudaMemGetInfo(&free_b, &total));
    printf("dev2_total %zu\n", total);
    int dev = -1;
    CK(cudaGetDevice(&dev));
    printf("current %d\n", dev);
}

/* Holds 96 MiB on device 0 until killed (other processes look at it through NVML). */
static void step_hold(void)
{
    void *d;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&d, 96 << 20));
    printf("holding\n");
    fflush(stdout);
    for (;;)
        pause();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        g_step = argv[i];
        if (!strcmp(argv[i], "init"))
            step_init();
        else if (!strcmp(argv[i], "props"))
            step_props();
        else if (!strcmp(argv[i], "memory"))
            step_memory();
        else if (!strcmp(argv[i], "streams"))
            step_streams();
        else if (!strcmp(argv[i], "async"))
            step_async();
        else if (!strcmp(argv[i], "graph"))
            step_graph();
        else if (!strcmp(argv[i], "reset"))
            step_reset();
        else if (!strcmp(argv[i], "hold"))
            step_hold();
        else {
            printf("FAIL unknown step %s\n", argv[i]);
            return 2;
        }
    }
    printf("done\n");
    return 0;
}
