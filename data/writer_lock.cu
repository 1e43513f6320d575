// writer_lock.cu — DIR/lock: one writer per checkpoint directory (see the header).
#include "writer_lock.h"

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

static char g_lock_path[PATH_MAX + 8] = "";  // the lock this process holds ("" none): read by a signal handler
static pid_t g_lock_owner = 0;               // the pid that took it (a fork's child must not remove it)

void writer_lock_release() {
    if (g_lock_path[0] && getpid() == g_lock_owner) unlink(g_lock_path);
    g_lock_path[0] = 0;
}

static std::string this_host() {
    char h[256] = "";
    if (gethostname(h, sizeof h - 1) != 0) return "unknown";
    return h;
}

// Write "pid P host H" to a new file `path` (O_EXCL: fails with EEXIST when there is one).
static bool create_lock(const std::string& path, int* error) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return *error = errno, false;
    const std::string line = "pid " + std::to_string((long)getpid()) + " host " + this_host() + "\n";
    const bool ok = write(fd, line.data(), line.size()) == (ssize_t)line.size();
    *error = errno;
    close(fd);
    if (!ok) unlink(path.c_str());
    return ok;
}

// The holder named in an existing lock file: false when it cannot be read or parsed.
static bool read_holder(const std::string& path, long* pid, std::string* host) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return false;
    char h[256] = "";
    const int n = fscanf(f, "pid %ld host %255s", pid, h);
    fclose(f);
    *host = h;
    return n == 2 && *pid > 0;
}

std::string writer_lock_take(const std::string& dir, std::string* note) {
    note->clear();
    const std::string path = dir + "/lock";
    if (path.size() >= sizeof g_lock_path) return "--checkpoint-dir " + dir + ": the path is too long for its lock file";
    int error = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (create_lock(path, &error)) {
            snprintf(g_lock_path, sizeof g_lock_path, "%s", path.c_str());
            g_lock_owner = getpid();
            static bool registered = false;
            if (!registered) registered = true, atexit(writer_lock_release);
            return "";
        }
        if (error != EEXIST) return "--checkpoint-dir " + dir + ": cannot create its lock file " + path + ": " + strerror(error);
        long pid = 0;
        std::string host;
        if (!read_holder(path, &pid, &host))
            return "--checkpoint-dir " + dir + ": " + path + " exists but names no run (pid P host H): if no other run writes "
                   "there, remove it and run again";
        const std::string me = this_host();
        if (host != me)
            return "--checkpoint-dir " + dir + " is in use: " + path + " says the run with pid " + std::to_string(pid) + " on host " +
                   host + " writes its checkpoints there, and two writers would overwrite each other's; wait for it to end, or give "
                   "another --checkpoint-dir (if that run is gone, remove " + path + ")";
        if (pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) {  // left by a run that is gone
            *note = path + " was left by pid " + std::to_string(pid) + " on " + host + ", which is no longer running (killed "
                    "before it could remove it): taken over";
            unlink(path.c_str());
            continue;  // make it ours (O_EXCL again: of two runs taking it over at once, one wins)
        }
        return "--checkpoint-dir " + dir + " is in use: the run with pid " + std::to_string(pid) + " on this host (" + host +
               ") holds " + path + " and writes its checkpoints there; two writers would overwrite each other's: wait for it "
               "to end (or stop it), or give another --checkpoint-dir";
    }
    return "--checkpoint-dir " + dir + ": another run took " + path + " while this one was taking over a stale lock; run again";
}
