// fuzz_common.h — shared by the libFuzzer targets (tools/fuzz_*.cu, `make fuzz`): the parsers are compiled as
// host C++ by clang, without the CUDA runtime, so mm_fatal (layers/runtime.cu) is replaced by a stub that
// aborts (a parser must report errors through its return value, never reach mm_fatal), and file-based
// readers get their input through an in-memory file (memfd) reachable by path.
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

void mm_fatal(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nmm_fatal reached from a parser\n");
    abort();
}

// The fuzz input as a file: a memfd rewritten for every input, opened again through /proc/self/fd.
static std::string fuzz_input_file(const uint8_t* data, size_t size) {
    static int fd = -1;
    if (fd < 0) fd = memfd_create("fuzz_input", 0);
    if (fd < 0) abort();
    if (ftruncate(fd, 0) != 0) abort();
    size_t done = 0;
    while (done < size) {
        ssize_t k = pwrite(fd, data + done, size - done, (off_t)done);
        if (k <= 0) abort();
        done += (size_t)k;
    }
    return "/proc/self/fd/" + std::to_string(fd);
}
