// atomic_file.cu — temporary file + fsync + rename + directory fsync; fault injection (see atomic_file.h).
#include "atomic_file.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

// ---- fault injection: MM_CRASH_DURING_SAVE=K:N -------------------------------------------------------------
static int g_save_index = 0;        // how many saves have begun
static long long g_save_bytes = 0;  // bytes written by AtomicFile since the current save began

static bool crash_point(int* save, long long* bytes) {
    const char* s = getenv("MM_CRASH_DURING_SAVE");
    return s && sscanf(s, "%d:%lld", save, bytes) == 2;
}

void begin_save_for_fault_injection() {
    g_save_index++;
    g_save_bytes = 0;
}

// Called before `bytes` more bytes are written: if the crash point falls inside them, write up to it and
// die as a power cut would (no destructors, no atexit, no flush of what is still in stdio's buffer).
static void maybe_crash(FILE* f, const void* data, size_t bytes) {
    int save = 0;
    long long at = 0;
    if (!crash_point(&save, &at) || save != g_save_index) return;
    if (g_save_bytes + (long long)bytes < at) return;
    size_t part = (size_t)(at - g_save_bytes);
    if (part > 0) fwrite(data, 1, part, f);
    fflush(f);  // the partial file really is on disk, as it would be after a crash
    // MM_CRASH_SIGNAL=INT or TERM: a Ctrl-C or a scheduler's stop at that byte instead (train/interrupt.h reports it).
    const char* how = getenv("MM_CRASH_SIGNAL");
    const int sig = how && !strcmp(how, "INT") ? SIGINT : how && !strcmp(how, "TERM") ? SIGTERM : SIGKILL;
    fprintf(stderr, "fault injection: %s during save %d after %lld bytes\n", sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGKILL",
            save, at);
    fflush(stderr);
    raise(sig);
    raise(SIGKILL);  // (a handler that returned: the crash still happens)
}

// ---- AtomicFile ------------------------------------------------------------------------------------------
std::string dir_of(const std::string& path) {
    size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

bool fsync_dir(const std::string& dir, std::string& err) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        err = "cannot open directory " + dir + " to fsync it: " + strerror(errno);
        return false;
    }
    bool ok = fsync(fd) == 0;
    if (!ok) err = "cannot fsync directory " + dir + ": " + strerror(errno);
    close(fd);
    return ok;
}

bool AtomicFile::open(const std::string& path, std::string& err) {
    path_ = path;
    tmp_ = path + ".tmp." + std::to_string((long)getpid());
    f_ = fopen(tmp_.c_str(), "wb");
    if (!f_) {
        err = "cannot create " + tmp_ + " (for " + path + "): " + strerror(errno);
        return false;
    }
    ok_ = true;
    return true;
}

bool AtomicFile::write(const void* data, size_t bytes) {
    if (!f_ || !ok_) return false;
    maybe_crash(f_, data, bytes);
    if (bytes > 0 && fwrite(data, 1, bytes, f_) != bytes) {
        ok_ = false;
        errno_ = errno;
    }
    g_save_bytes += (long long)bytes;
    return ok_;
}

bool AtomicFile::commit(std::string& err) {
    if (!f_) {
        err = "internal: commit of " + path_ + " without open";
        return false;
    }
    if (ok_ && fflush(f_) != 0) ok_ = false, errno_ = errno;
    if (ok_ && fsync(fileno(f_)) != 0) ok_ = false, errno_ = errno;
    if (fclose(f_) != 0 && ok_) ok_ = false, errno_ = errno;
    f_ = nullptr;
    if (!ok_) {
        err = "error writing " + path_ + " (temporary " + tmp_ + "): " + strerror(errno_);
        unlink(tmp_.c_str());
        return false;
    }
    if (rename(tmp_.c_str(), path_.c_str()) != 0) {
        err = "cannot rename " + tmp_ + " to " + path_ + ": " + strerror(errno);
        unlink(tmp_.c_str());
        return false;
    }
    tmp_.clear();
    return fsync_dir(dir_of(path_), err);
}

AtomicFile::~AtomicFile() {
    if (f_) {
        fclose(f_);
        unlink(tmp_.c_str());
    }
}
