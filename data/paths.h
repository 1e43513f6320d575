// paths.h — the files a run names, checked before it does any work.
//
// A run that trains for an hour and then cannot write its model has lost the hour. So every path on the
// command line is checked at start (train_gpt.cu's check_paths): an input is an existing regular file (its
// header is then read by its own reader), an output's directory exists or is created, and is writable.
// A check at start cannot promise that the write at the end succeeds (a disk fills, a directory is removed);
// for that the trainer has a fallback (rescue_path).
#pragma once
#include <cstdio>
#include <string>

// "" when `path` is a regular file or does not exist (the caller's open then says so in its own words);
// else "<kind> <path> is a directory, expected a file" (or "is not a regular file"). The readers of every
// file format call it first: a directory opens and reads as garbage on Linux, with a misleading message.
std::string not_a_file_problem(const std::string& kind, const std::string& path);

// What a file is, from its first bytes, for the message of a reader that found another format there: "a text
// file", "an llm.c token shard", "a safetensors file", ... ("" when the bytes say nothing known).
std::string file_kind(const std::string& path);
// The end of such a message: "; <path> is <file_kind>, not <expected>: <hint>" when the file is of a known
// other kind, "; <hint>" when not (the hint names the command that makes the right file).
std::string wrong_format_note(const std::string& path, const std::string& expected, const std::string& hint);

// "" when `path` is an existing regular file; else what is wrong, starting with `flag` and the path.
std::string input_file_problem(const std::string& flag, const std::string& path);

// Make `dir` and its missing parents (mkdir -p). False with `err` naming the part that could not be made.
bool make_dirs(const std::string& dir, std::string& err);

// An output directory: made when missing, then proven writable by creating and removing a probe file in
// it. "" when fine; else what is wrong, starting with `flag` and the path.
std::string output_dir_problem(const std::string& flag, const std::string& dir);
// An output file: not an existing directory, and its directory an output directory (output_dir_problem).
std::string output_file_problem(const std::string& flag, const std::string& path);

// Where to put what could not be written to `path`: "rescued_<pid>_<file name>" in the current directory,
// or in $TMPDIR (else /tmp) when the current directory is not writable.
std::string rescue_path(const std::string& path);
