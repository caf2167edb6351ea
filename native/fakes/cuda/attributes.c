/*
 * attributes.c (fake libcuda): cuDeviceGetAttribute answers per model (fakes/common/models.c), as the
 * vendor's data sheets and the CUDA programming guide's "compute capabilities" table give them: limits that
 * follow the compute capability (shared memory, threads and blocks per SM) and per-board figures (clocks,
 * memory bus, L2). Frameworks size launches from these (cuda-runtime-facts.md §3 "Attribute answers that
 * matter", §8 Triton), so they must be realistic; both resolution paths reach this one function.
 */
#include <string.h>

#include "fakecuda.h"

typedef struct board {
    const char *key;
    int clock_khz, mem_clock_khz, bus_width, l2_bytes, async_engines, ecc;
} board_t;

static const board_t BOARDS[] = {
    {"T4", 1590000, 5001000, 256, 4 << 20, 3, 1},
    {"L4", 2040000, 6251000, 192, 48 << 20, 2, 1},
    {"A10", 1695000, 6251000, 384, 6 << 20, 2, 1},
    {"A30", 1440000, 1215000, 3072, 24 << 20, 4, 1},
    {"A100-40GB", 1410000, 1215000, 5120, 40 << 20, 3, 1},
    {"A100-80GB", 1410000, 1593000, 5120, 40 << 20, 3, 1},
    {"H100-80GB", 1980000, 2619000, 5120, 50 << 20, 3, 1},
    {"H100-NVL", 1785000, 2619000, 6144, 50 << 20, 3, 1},
    {"H200-141GB", 1980000, 3201000, 6144, 60 << 20, 3, 1},
    {"B200", 1965000, 3996000, 8192, 126 << 20, 4, 1},
    {"RTX-PRO-6000", 2617000, 14001000, 512, 128 << 20, 4, 1},
};

static const board_t *board_of(const fake_model_t *m)
{
    for (size_t i = 0; i < sizeof BOARDS / sizeof BOARDS[0]; i++)
        if (strcmp(BOARDS[i].key, m->key) == 0)
            return &BOARDS[i];
    return &BOARDS[5];
}

/* Per compute capability: shared memory per SM and per block (opt-in), threads and blocks per SM. */
static void cc_limits(int cc, int *smem_sm, int *smem_optin, int *threads_sm, int *blocks_sm)
{
    switch (cc) {
    case 75: *smem_sm = 65536; *smem_optin = 65536; *threads_sm = 1024; *blocks_sm = 16; break;
    case 80: *smem_sm = 167936; *smem_optin = 166912; *threads_sm = 2048; *blocks_sm = 32; break;
    case 86: *smem_sm = 102400; *smem_optin = 101376; *threads_sm = 1536; *blocks_sm = 16; break;
    case 89: *smem_sm = 102400; *smem_optin = 101376; *threads_sm = 1536; *blocks_sm = 24; break;
    case 90:
    case 100: *smem_sm = 233472; *smem_optin = 232448; *threads_sm = 2048; *blocks_sm = 32; break;
    default: *smem_sm = 102400; *smem_optin = 101376; *threads_sm = 1536; *blocks_sm = 24; break;
    }
}

int fc_attribute(const fake_gpu_t *g, int ordinal, CUdevice_attribute attrib)
{
    const fake_model_t *m = g->model;
    const board_t *b = board_of(m);
    int cc = m->cc_major * 10 + m->cc_minor;
    int smem_sm, smem_optin, threads_sm, blocks_sm;
    cc_limits(cc, &smem_sm, &smem_optin, &threads_sm, &blocks_sm);
    int32_t domain, bus, device;
    fc_device_pci(ordinal, &domain, &bus, &device);
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return b->clock_khz;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return (int)m->multiprocessors;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: return 0;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: return 131072;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: return 131072;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: return 65536;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: return 16384;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return b->ecc;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return bus;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return device;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return domain;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: return 0;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return b->mem_clock_khz;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return b->bus_width;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return b->l2_bytes;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return threads_sm;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return b->async_engines;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return (int)fc_env_u64("CARVE_FAKE_PITCH_ALIGN", 512);
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return m->cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return m->cc_minor;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return smem_sm;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: return ordinal;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: return cc == 80 || cc == 90 || cc == 100 ? 2 : 32;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: return 0;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return smem_optin;
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: return 0;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: return 0;
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: return 0;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return blocks_sm;
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: return cc >= 80;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return cc >= 80 ? b->l2_bytes / 4 * 3 : 0;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: return cc >= 80 ? 134213632 : 0;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return cc >= 80 ? 1024 : 0;
    case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: return 0;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return cc >= 90;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: return 1;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: return cc >= 90 ? 4 : 1;
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED: return cc >= 90;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: return 0;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: return -1;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return -1;
    default: return 0;
    }
}
