/*
 * models.c: the GPU models the fakes can emulate, with the values a real driver reports for them.
 *
 * Memory is nvidia-smi's total (NVML memory.total) in MiB; MIG-capable models use the totals of
 * ../shared/reference/mig-profiles.json, the others their product data sheet values as nvidia-smi prints
 * them. `mig_table` names the model's MIG profile table (fakes/common/mig_tables.c).
 */
#include <nvml.h>
#include <stddef.h>
#include <strings.h>

#include "fakegpu.h"

#define MIB (1024ull * 1024ull)

static const fake_model_t MODELS[] = {
    {"T4", "Tesla T4", 15360 * MIB, 40, 7, 5, NVML_DEVICE_ARCH_TURING, 0, 0x1EB810DE, NULL},
    {"L4", "NVIDIA L4", 23034 * MIB, 58, 8, 9, NVML_DEVICE_ARCH_ADA, 0, 0x27B810DE, NULL},
    {"A10", "NVIDIA A10", 23028 * MIB, 72, 8, 6, NVML_DEVICE_ARCH_AMPERE, 0, 0x223610DE, NULL},
    {"A30", "NVIDIA A30", 24576 * MIB, 56, 8, 0, NVML_DEVICE_ARCH_AMPERE, 1, 0x20B710DE, "A30-24GB"},
    {"A100-40GB", "NVIDIA A100-SXM4-40GB", 40960 * MIB, 108, 8, 0, NVML_DEVICE_ARCH_AMPERE, 1, 0x20B010DE,
     "A100-40GB"},
    {"A100-80GB", "NVIDIA A100-SXM4-80GB", 81920 * MIB, 108, 8, 0, NVML_DEVICE_ARCH_AMPERE, 1, 0x20B210DE,
     "A100-80GB"},
    {"H100-80GB", "NVIDIA H100 80GB HBM3", 81559 * MIB, 132, 9, 0, NVML_DEVICE_ARCH_HOPPER, 1, 0x233010DE,
     "H100-80GB"},
    {"H100-NVL", "NVIDIA H100 NVL", 95830 * MIB, 132, 9, 0, NVML_DEVICE_ARCH_HOPPER, 1, 0x232110DE,
     "H100-NVL-94GB"},
    {"H200-141GB", "NVIDIA H200", 143771 * MIB, 132, 9, 0, NVML_DEVICE_ARCH_HOPPER, 1, 0x233510DE,
     "H200-141GB"},
    {"B200", "NVIDIA B200", 183359 * MIB, 148, 10, 0, NVML_DEVICE_ARCH_BLACKWELL, 1, 0x290110DE,
     "B200-180GB"},
    {"RTX-PRO-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887 * MIB, 188, 12, 0,
     NVML_DEVICE_ARCH_BLACKWELL, 1, 0x2BB510DE, "RTX-PRO-6000-Blackwell-96GB"},
};

#define NMODELS (sizeof(MODELS) / sizeof(MODELS[0]))

/* Case-insensitive so "a100-80gb" works in hand-written env files. */
FAKE_EXPORT const fake_model_t *fake_model_find(const char *key)
{
    if (!key)
        return NULL;
    for (size_t i = 0; i < NMODELS; i++)
        if (strcasecmp(MODELS[i].key, key) == 0)
            return &MODELS[i];
    return NULL;
}

/* i-th model, NULL past the end: for listing the known models in error messages. */
FAKE_EXPORT const fake_model_t *fake_model_at(unsigned i)
{
    return i < NMODELS ? &MODELS[i] : NULL;
}
