// interrupt.cu — what an interrupted run says it saved (see the header).
#include "interrupt.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "../data/writer_lock.h"

// The message, kept in two buffers: the next one is composed in the idle buffer and then published by one
// store of its index, so that a signal arriving mid-composition prints the previous message whole.
static char g_message[2][2048];
static volatile sig_atomic_t g_current = -1;  // -1: no handler installed (nothing to say)
static std::string g_dir, g_resumed_dir;  // where this run saves; where it resumed from
static long long g_saved = -1, g_resumed = -1;  // the last complete checkpoint's step (this run's; the resumed one)

static void publish(const std::string& text) {
    const int next = g_current == 0 ? 1 : 0;
    snprintf(g_message[next], sizeof g_message[next], "%s", text.c_str());
    g_current = next;
}

static std::string step_dir(const std::string& dir, long long step) {
    char b[32];
    snprintf(b, sizeof b, "step_%08lld", step);  // model/train_state.h's checkpoint_step_name
    return dir + "/" + b;
}
// The checkpoint an interrupt leaves to continue from when no save of this run is complete: the resumed one.
static std::string resumed_text() {
    return step_dir(g_resumed_dir, g_resumed) + ", which the run resumed from: --resume " + g_resumed_dir + " continues from step " +
           std::to_string(g_resumed);
}

// What is on disk when no save is under way.
static std::string at_rest() {
    if (g_dir.empty()) return "nothing saved: the run has no --checkpoint-dir (--save writes only at its end), so it starts over when run again";
    if (g_saved >= 0) return "the last checkpoint is " + step_dir(g_dir, g_saved) + " (complete): --resume " + g_dir +
                             " continues from step " + std::to_string(g_saved);
    if (g_resumed >= 0) return "no checkpoint saved by this run yet; the last is still " + resumed_text();
    return "nothing saved: no checkpoint was written to " + g_dir + " yet, so the run starts over when run again";
}

static void append(char* out, size_t cap, size_t* n, const char* s) {  // async-signal-safe strcat
    while (*s && *n + 1 < cap) out[(*n)++] = *s++;
}

static void on_signal(int sig) {
    const int current = g_current;
    if (current >= 0) {
        char line[2200];
        size_t n = 0;
        append(line, sizeof line, &n, sig == SIGINT ? "\ninterrupted (SIGINT): " : "\ninterrupted (SIGTERM): ");
        append(line, sizeof line, &n, g_message[current]);
        append(line, sizeof line, &n, "\n");
        ssize_t ignored = write(STDERR_FILENO, line, n);
        (void)ignored;
    }
    writer_lock_release();
    signal(sig, SIG_DFL);
    raise(sig);  // the default action: the process ends as it would have without this handler
}

void interrupt_report_install(const std::string& checkpoint_dir) {
    g_dir = checkpoint_dir;
    publish(at_rest());
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

void interrupt_resumed_from(const std::string& dir, long long step) {
    g_resumed_dir = dir, g_resumed = step;
    if (g_current >= 0) publish(at_rest());
}

void interrupt_saving(long long step) {
    if (g_current < 0) return;
    publish("while saving the checkpoint of step " + std::to_string(step) + ": that save is incomplete and not published; " +
            (g_saved >= 0 ? "the last checkpoint is still " + step_dir(g_dir, g_saved) + ": --resume " + g_dir + " continues from step " +
                                std::to_string(g_saved)
             : g_resumed >= 0 ? "the last checkpoint is still " + resumed_text()
                              : "nothing was saved before it in " + g_dir + ", so the run starts over when run again") +
            " (the next save removes the partial files)");
}

void interrupt_saved(long long step) {
    g_saved = step;
    if (g_current >= 0) publish(at_rest());
}
