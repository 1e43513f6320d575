// test/emulator/runtime_internal.h — what launch.cpp and runtime.cpp share inside the emulated runtime.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

namespace emu {
// cudaGetLastError's value on the calling host thread.
void set_last_error(cudaError_t err);
// cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), checked by launch_grid.
void set_func_max_dynamic_smem(const void* fn, int bytes);
// memcheck's report (launch.cpp): where `addr` lies against the nearest live cudaMalloc allocation, written to
// `out` ("4 bytes past the end of the cudaMalloc allocation of 400 bytes at 0x..."); returns the distance
// (0 inside it, SIZE_MAX when there is none, or the allocation table is busy).
size_t describe_device_allocation(const void* addr, char* out, size_t n);
}  // namespace emu
