// writer_lock.h — one writer per checkpoint directory: DIR/lock names the run that writes there.
//
// Two runs saving into one directory would each delete the other's older pairs and move `latest` back and
// forth: nothing is lost (every pair is written whole, data/atomic_file.h), but the second run fails late, with
// a cause that names neither run. So the writer takes DIR/lock at start, before any work: a file holding its
// pid and host, made with O_EXCL (only one maker succeeds). A second writer finds it and is refused, naming
// the first. The lock goes when its run ends: at exit (atexit: a refusal too), and on SIGINT or SIGTERM
// (train/interrupt.h). A run killed outright (SIGKILL, a power cut) leaves it behind: a lock whose pid is not
// alive on this host is stale, and the next writer takes it over, saying so. A lock from another host cannot
// be checked from here: the message says how to remove it once that run is known to be gone.
#pragma once
#include <string>

// Take DIR/lock for this process. "" when taken (then *note is "" or says whose stale lock was taken over);
// else the problem, naming the holder (pid, host) and what to do.
std::string writer_lock_take(const std::string& dir, std::string* note);
// Remove the lock if this process holds it. Async-signal-safe (one unlink of a path kept since the take).
void writer_lock_release();
