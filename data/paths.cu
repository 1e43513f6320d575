// paths.cu — checks of the paths a run names, made before it does any work (see paths.h).
#include "paths.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "atomic_file.h"  // dir_of

std::string not_a_file_problem(const std::string& kind, const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
    return kind + " " + path + (S_ISDIR(st.st_mode) ? " is a directory, expected a file" : " is not a regular file");
}

std::string file_kind(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return "";
    unsigned char b[1024];
    const size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    if (n == 0) return "an empty file";
    int32_t magic = 0;
    if (n >= 4) memcpy(&magic, b, 4);
    // llm.c's binary formats, by the magic number their 1024-byte headers start with.
    const struct { int32_t magic; const char* kind; } llmc[] = {
        {20240326, "an llm.c model checkpoint"}, {20240520, "an llm.c token shard"},
        {20240328, "an llm.c tokenizer file"},   {20240522, "an llm.c eval file"}};
    for (const auto& k : llmc)
        if (n >= 4 && magic == k.magic) return k.kind;
    if (n >= 8 && memcmp(b, "MMTSTATE", 8) == 0) return "a training state (state.bin)";
    if (n >= 9 && b[8] == '{' && b[6] == 0 && b[7] == 0) return "a safetensors file (Hugging Face weights)";
    size_t text = 0;
    for (size_t i = 0; i < n; i++) text += b[i] == '\n' || b[i] == '\t' || b[i] == '\r' || (b[i] >= 32 && b[i] != 127);
    if (text < n) return "";
    if (n >= 5 && memcmp(b, "step_", 5) == 0) return "a checkpoint pointer (a checkpoint directory's latest)";
    return b[0] == '{' ? "a JSON text file" : "a text file";
}

std::string wrong_format_note(const std::string& path, const std::string& expected, const std::string& hint) {
    const std::string kind = file_kind(path);
    if (kind.empty() || kind == expected) return "; " + hint;
    return "; " + path + " is " + kind + ", not " + expected + ": " + hint;
}

std::string input_file_problem(const std::string& flag, const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return flag + " " + path + ": " + strerror(errno);
    return not_a_file_problem(flag, path);
}

// A directory on a kernel filesystem (/proc, /sys, ...) exists but holds no files of ours, and the system then says
// "No such file or directory" about the file being made: name the filesystem instead ("" when it is none of them).
static std::string virtual_filesystem(const std::string& dir) {
    struct statfs fs;
    if (statfs(dir.c_str(), &fs) != 0) return "";
    switch ((unsigned long)fs.f_type) {
        case 0x9fa0: return "the kernel's process information (proc)";
        case 0x62656572: return "the kernel's device tree (sysfs)";
        case 0x27e0eb: case 0x63677270: return "the kernel's control groups (cgroup)";
        case 0x64626720: return "the kernel's debugging interface (debugfs)";
        case 0x73636673: return "the kernel's security interface (securityfs)";
        case 0x1cd1: return "the terminals (devpts)";
        default: return "";
    }
}
// What the system said when `path` could not be made in the existing directory `dir`, in true words.
static std::string cannot_make(const std::string& path, const std::string& dir, int error) {
    const std::string fs = virtual_filesystem(dir);
    if (!fs.empty())
        return dir + " is " + fs + ", where no file can be made (" + strerror(error) + "): choose a directory on a disk";
    if (error == ENOENT)
        return "cannot make " + path + " though " + dir + " exists (" + strerror(error) + "): a filesystem that holds no "
               "ordinary files? choose a directory on a disk";
    return "";
}

bool make_dirs(const std::string& dir, std::string& err) {
    struct stat st;
    if (stat(dir.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) return true;
        err = dir + " exists and is not a directory";
        return false;
    }
    const std::string parent = dir_of(dir);
    if (parent != dir && !make_dirs(parent, err)) return false;
    // Another rank or process may make it at the same moment: EEXIST of a directory is success.
    if (mkdir(dir.c_str(), 0777) != 0 && !(errno == EEXIST && stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode))) {
        const int error = errno;
        const std::string why = cannot_make(dir, parent, error);
        err = why.empty() ? "cannot create directory " + dir + ": " + strerror(error) : why;
        return false;
    }
    return true;
}

std::string output_dir_problem(const std::string& flag, const std::string& dir) {
    std::string err;
    if (!make_dirs(dir, err)) return flag + " " + dir + ": " + err;
    // access(W_OK) says yes to root on a read-only mount and no to nobody else's ACLs: a real file is the proof.
    const std::string probe = dir + "/.write_probe." + std::to_string(getpid());
    FILE* f = fopen(probe.c_str(), "wb");
    if (!f) {
        const int error = errno;
        const std::string why = cannot_make("a file", dir, error);
        return flag + " " + dir + ": " + (why.empty() ? "the directory is not writable (" + std::string(strerror(error)) + ")" : why);
    }
    fclose(f);
    remove(probe.c_str());
    return "";
}

std::string output_file_problem(const std::string& flag, const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        return flag + " " + path + " is a directory, expected a file name";
    std::string problem = output_dir_problem(flag, dir_of(path));
    return problem.empty() ? "" : problem + " (the directory of " + path + ")";
}

std::string rescue_path(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    const std::string name = "rescued_" + std::to_string(getpid()) + "_" + (slash == std::string::npos ? path : path.substr(slash + 1));
    if (output_dir_problem("", ".").empty()) return name;
    const char* tmp = getenv("TMPDIR");
    return std::string(tmp && *tmp ? tmp : "/tmp") + "/" + name;
}
