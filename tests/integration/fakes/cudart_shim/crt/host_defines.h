/*
 * The few macros cuda_runtime_api.h takes from crt/host_defines.h, for building host-only C programs
 * against a PyPI cudart wheel: the wheels ship cuda_runtime_api.h but not crt/ (that comes with nvcc).
 * Host code needs none of the device qualifiers, so they expand to nothing.
 */
#pragma once
#define __host__
#define __device__
#define __cudart_builtin__
#define __device_builtin__
#define __device_builtin_texture_type__
#define __device_builtin_surface_type__
#define CUDARTAPI
#define CUDARTAPI_CDECL
#define CUDART_CB
#define __dv(v)
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(n) __attribute__((aligned(n)))
#define __CUDA_ALIGN__(n) __attribute__((aligned(n)))
