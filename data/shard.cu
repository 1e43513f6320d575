// shard.cu — reading and writing llm.c token shards (see shard.h for the format).
#include "shard.h"
#include "atomic_file.h"
#include "paths.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../layers/runtime.h"  // mm_fatal

// What makes the right file, for a file of another format where a token shard is expected (paths.h).
static const char* kShardHint = "build/prepare_data --out-dir DIR FILE... turns text into DIR/train.bin and DIR/val.bin";

static std::string sys_error() { return std::string(strerror(errno)); }

ShardFile::~ShardFile() {
    if (fd >= 0) close(fd);
}

bool open_token_shard(const std::string& path, ShardFile& shard, std::string& err) {
    shard.path = path;
    err = not_a_file_problem("token shard", path);
    if (!err.empty()) return false;
    shard.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (shard.fd < 0) {
        err = "cannot open token shard " + path + ": " + sys_error();
        return false;
    }
    // The file's real length, to check the header's token count against it before trusting it.
    struct stat st;
    if (fstat(shard.fd, &st) != 0) {
        err = "cannot stat token shard " + path + ": " + sys_error();
        return false;
    }
    const int64_t file_bytes = (int64_t)st.st_size;
    const int64_t header_bytes = kShardHeaderInts * (int64_t)sizeof(int32_t);
    int32_t header[kShardHeaderInts];
    if (file_bytes < header_bytes || pread(shard.fd, header, (size_t)header_bytes, 0) != (ssize_t)header_bytes) {
        err = "token shard " + path + " is truncated: expected a header of " + std::to_string(header_bytes) +
              " bytes, the file has " + std::to_string(file_bytes) + " bytes" + wrong_format_note(path, "an llm.c token shard", kShardHint);
        return false;
    }
    if (header[0] != kShardMagic) {
        err = "token shard " + path + " has magic " + std::to_string(header[0]) + ", expected " +
              std::to_string(kShardMagic) + wrong_format_note(path, "an llm.c token shard", kShardHint);
        return false;
    }
    if (header[1] != kShardVersion) {
        err = "token shard " + path + " has version " + std::to_string(header[1]) + ", expected " +
              std::to_string(kShardVersion);
        return false;
    }
    // The count is an int32 in the header, so a shard holds at most 2^31-1 tokens; negative is corrupt.
    const int64_t count = header[2];
    const int64_t expected_bytes = header_bytes + count * (int64_t)sizeof(uint16_t);
    if (count < 0 || expected_bytes != file_bytes) {
        err = "token shard " + path + ": header says " + std::to_string(count) + " tokens, so expected " +
              std::to_string(expected_bytes) + " bytes, but the file has " + std::to_string(file_bytes) +
              " bytes (" + (file_bytes < expected_bytes ? "truncated" : "trailing data") + ")";
        return false;
    }
    shard.n_tokens = count;
    return true;
}

bool read_shard_tokens(const ShardFile& shard, int64_t first, int64_t count, uint16_t* out, std::string& err) {
    if (first < 0 || count < 0 || first + count > shard.n_tokens) {
        err = "token shard " + shard.path + ": tokens [" + std::to_string(first) + ", " + std::to_string(first + count) +
              ") are outside its " + std::to_string(shard.n_tokens) + " tokens";
        return false;
    }
    const int64_t header_bytes = kShardHeaderInts * (int64_t)sizeof(int32_t);
    char* dst = (char*)out;
    int64_t done = 0, want = count * (int64_t)sizeof(uint16_t);
    while (done < want) {  // pread may return less than asked (signals, large reads): go on from there
        ssize_t got = pread(shard.fd, dst + done, (size_t)(want - done), header_bytes + first * 2 + done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            err = "error reading token shard " + shard.path + " at token " + std::to_string(first) + ": " +
                  (got < 0 ? sys_error() : std::string("unexpected end of file"));
            return false;
        }
        done += got;
    }
    return true;
}

bool read_token_shard(const std::string& path, std::vector<uint16_t>& tokens, std::string& err) {
    tokens.clear();
    ShardFile shard;
    if (!open_token_shard(path, shard, err)) return false;
    tokens.resize((size_t)shard.n_tokens);
    if (!read_shard_tokens(shard, 0, shard.n_tokens, tokens.data(), err)) {
        tokens.clear();
        return false;
    }
    return true;
}

void write_token_shard(const std::string& path, const uint16_t* tokens, size_t n) {
    if (n > (size_t)INT32_MAX)
        mm_fatal("token shard %s: %zu tokens do not fit the int32 count of the llm.c header", path.c_str(), n);
    int32_t header[kShardHeaderInts] = {0};
    header[0] = kShardMagic;
    header[1] = kShardVersion;
    header[2] = (int32_t)n;

    // Written whole or not at all (atomic_file.h): a reader, or a crash, never sees a half-written shard.
    AtomicFile f;
    std::string err;
    if (!f.open(path, err)) mm_fatal("cannot write token shard: %s", err.c_str());
    f.write(header, sizeof header);
    if (n > 0) f.write(tokens, n * sizeof(uint16_t));  // a write error is remembered and reported by commit
    if (!f.commit(err)) mm_fatal("error writing token shard: %s", err.c_str());
}
