// test/emulator/device.h — the emulated device's internal interface, between the emulated CUDA runtime
// (runtime.cpp, launch.cpp) and the libraries built on it (the emulated cuBLAS/cuBLASLt and NCCL).
//
// Test infrastructure only: nothing outside test/emulator/ includes this file, and train_gpt built for a
// real GPU never links it. include/cuda_runtime.h says where the emulator cannot be faithful.
#pragma once

#include <cstddef>
#include <functional>

#include <cuda_runtime.h>  // the emulator's own stand-in (test/emulator/include/cuda_runtime.h)

namespace emu {

// Queue host work on stream s (nullptr: the legacy default stream). The stream's worker thread runs its
// queue in issue order, after every cudaStreamWaitEvent dependency queued before it. `what` names the work
// in error messages (e.g. "cublasGemmEx", "ncclAllReduce"). Work queued on the legacy default stream also
// waits for, and is waited for by, every blocking stream (CUDA's implicit synchronization); streams made
// with cudaStreamNonBlocking do not take part in it.
void stream_enqueue(cudaStream_t s, std::function<void()> work, const char* what);

// Block the calling host thread until everything queued on s so far has run (cudaStreamSynchronize's
// core). Does not mark host reads as synchronized by itself: cudaStreamSynchronize does that on top.
void stream_drain(cudaStream_t s);

// Stop with a message naming `what` unless [p, p + bytes) lies inside one live cudaMalloc allocation.
// bytes == 0 checks nothing (a null or dangling pointer with an empty range is allowed, as in cuBLAS).
void check_device_range(const void* p, size_t bytes, const char* what);

// This process's emulated device: a 16-byte UUID distinct per process (made from the pid, the host name and
// the start time), and a PCI bus id string in cudaDeviceGetPCIBusId's format ("0000:xx:00.0").
const unsigned char* device_uuid();
const char* device_pci_bus_id();

// Print "emulated CUDA: <message>" to stderr and abort the process (the tests see a failure).
[[noreturn]] void fatal(const char* fmt, ...);

}  // namespace emu
