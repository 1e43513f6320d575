// atomic_file.h — files that appear whole or not at all, and a fault-injection point to prove it.
//
// AtomicFile writes to a temporary file beside the target (same directory, so the same filesystem), and
// commit() makes it durable and visible in the only safe order: fflush (stdio -> kernel), fsync (kernel ->
// disk), rename over the target (atomic), fsync the directory (the rename itself reaches the disk). A crash
// at any point leaves either the old file or the new one, never a mix; at worst a stray "*.tmp.<pid>" file.
//
// Fault injection (tests): MM_CRASH_DURING_SAVE=K:N in the environment makes the process SIGKILL itself
// once N bytes of its K-th checkpoint save (counted from begin_save_for_fault_injection(), over every
// AtomicFile written since) are on their way to the disk — the closest a test can get to pulling the plug.
// With MM_CRASH_SIGNAL=INT (or TERM) it raises that signal there instead: a Ctrl-C in the middle of a save.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

class AtomicFile {
public:
    // Opens "<path>.tmp.<pid>" for writing; false with `err` naming the file when it cannot.
    bool open(const std::string& path, std::string& err);
    // Append bytes; false (remembered, reported by commit) on an I/O error.
    bool write(const void* data, size_t bytes);
    // Flush, fsync, close, rename over the target, fsync the directory. On any failure the temporary is
    // removed and `err` names the file and the system error.
    bool commit(std::string& err);
    ~AtomicFile();  // an uncommitted file is removed

private:
    std::string path_, tmp_;
    FILE* f_ = nullptr;
    bool ok_ = true;
    int errno_ = 0;
};

// fsync a directory (after a rename or mkdir inside it). False with `err` on failure.
bool fsync_dir(const std::string& dir, std::string& err);
// The directory part of a path ("." when there is none).
std::string dir_of(const std::string& path);

// Fault injection: call once at the start of every checkpoint save; counts saves and resets the byte count.
void begin_save_for_fault_injection();
