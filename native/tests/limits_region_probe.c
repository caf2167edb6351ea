/*
 * limits_region_probe: prints the size and every field offset of the shared region and the limits file
 * layouts (include/carve_region.h) as JSON, for the test that compares them with driver/limits/region.py
 * and driver/limits/limitsfile.py.
 */
#include <stddef.h>
#include <stdio.h>

#include "carve_region.h"

static int first = 1;
#define FIELD(type, name)                                                                                  \
    printf("%s\"%s.%s\": [%zu, %zu]", first ? "" : ", ", #type, #name, offsetof(type, name),              \
           sizeof(((type *)0)->name)),                                                                     \
        first = 0

int main(void)
{
    printf("{\"sizeof\": {\"carve_region_t\": %zu, \"carve_region_device_t\": %zu, \"carve_region_proc_t\": %zu, "
           "\"carve_limits_t\": %zu, \"carve_limits_device_t\": %zu}, "
           "\"magic\": %llu, \"version\": %u, \"limits_magic\": %llu, \"limits_version\": %u, "
           "\"max_devices\": %d, \"max_procs\": %d, \"fields\": {",
           sizeof(carve_region_t), sizeof(carve_region_device_t), sizeof(carve_region_proc_t),
           sizeof(carve_limits_t), sizeof(carve_limits_device_t), (unsigned long long)CARVE_REGION_MAGIC,
           CARVE_REGION_VERSION, (unsigned long long)CARVE_LIMITS_MAGIC, CARVE_LIMITS_VERSION, CARVE_MAX_DEVICES,
           CARVE_MAX_PROCS);
    FIELD(carve_region_t, magic);
    FIELD(carve_region_t, version);
    FIELD(carve_region_t, flags);
    FIELD(carve_region_t, size);
    FIELD(carve_region_t, device_count);
    FIELD(carve_region_t, max_procs);
    FIELD(carve_region_t, core_policy);
    FIELD(carve_region_t, priority);
    FIELD(carve_region_t, oom_policy);
    FIELD(carve_region_t, reserved0);
    FIELD(carve_region_t, generation);
    FIELD(carve_region_t, reserved);
    FIELD(carve_region_t, devices);
    FIELD(carve_region_t, procs);
    FIELD(carve_region_device_t, memory_limit);
    FIELD(carve_region_device_t, memory_used);
    FIELD(carve_region_device_t, memory_peak);
    FIELD(carve_region_device_t, oom_refusals);
    FIELD(carve_region_device_t, cores_limit);
    FIELD(carve_region_device_t, high_neighbours);
    FIELD(carve_region_device_t, utilization);
    FIELD(carve_region_device_t, target);
    FIELD(carve_region_device_t, uuid);
    FIELD(carve_region_device_t, reserved);
    FIELD(carve_region_proc_t, pid);
    FIELD(carve_region_proc_t, host_pid);
    FIELD(carve_region_proc_t, start_time);
    FIELD(carve_region_proc_t, pid_ns);
    FIELD(carve_region_proc_t, used);
    FIELD(carve_region_proc_t, reserved);
    FIELD(carve_limits_t, magic);
    FIELD(carve_limits_t, version);
    FIELD(carve_limits_t, flags);
    FIELD(carve_limits_t, size);
    FIELD(carve_limits_t, device_count);
    FIELD(carve_limits_t, core_policy);
    FIELD(carve_limits_t, priority);
    FIELD(carve_limits_t, oom_policy);
    FIELD(carve_limits_t, generation);
    FIELD(carve_limits_t, reserved);
    FIELD(carve_limits_t, devices);
    FIELD(carve_limits_device_t, memory_limit);
    FIELD(carve_limits_device_t, cores_limit);
    FIELD(carve_limits_device_t, cores_reserved);
    FIELD(carve_limits_device_t, high_neighbours);
    FIELD(carve_limits_device_t, reserved0);
    FIELD(carve_limits_device_t, uuid);
    FIELD(carve_limits_device_t, reserved);
    printf("}}\n");
    return 0;
}
