// test/emulator/runtime_internal.h — what launch.cpp and runtime.cpp share inside the emulated runtime.
#pragma once

#include <cuda_runtime.h>

namespace emu {
// cudaGetLastError's value on the calling host thread.
void set_last_error(cudaError_t err);
// cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), checked by launch_grid.
void set_func_max_dynamic_smem(const void* fn, int bytes);
}  // namespace emu
