// interrupt.h — Ctrl-C (SIGINT) or SIGTERM during a run: say what was saved, then end as the signal ends it.
//
// A checkpoint is written whole or not at all (data/atomic_file.h), so an interrupt never damages one; but the
// user who stops a run needs to know what it left: the last complete checkpoint and how to continue from it,
// or that nothing was saved. Rank 0 (which writes the checkpoints) keeps that answer ready as the run goes
// (composed outside the handler: the handler only writes it, which is async-signal-safe), prints it on the
// signal, releases the checkpoint directory's lock (data/writer_lock.h), and re-raises the signal with its
// default action: the exit status and the files on disk are what they were without the handler.
#pragma once
#include <string>

// Rank 0, once the checkpoint directory is known ("" none).
void interrupt_report_install(const std::string& checkpoint_dir);
// The checkpoint this run continues from (--resume DIR: its step), before any save of its own.
void interrupt_resumed_from(const std::string& dir, long long step);
// A save of `step` begins, and ends complete (its pair and `latest` published).
void interrupt_saving(long long step);
void interrupt_saved(long long step);
