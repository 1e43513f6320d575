// shard.cu — reading and writing llm.c token shards (see shard.h for the format).
#include "shard.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../layers/runtime.h"  // mm_fatal

static std::string sys_error() { return std::string(strerror(errno)); }

bool read_token_shard(const std::string& path, std::vector<uint16_t>& tokens, std::string& err) {
    tokens.clear();
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
        err = "cannot open token shard " + path + ": " + sys_error();
        return false;
    }
    // The file's real length, to check the header's token count against it before trusting it.
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        err = "cannot stat token shard " + path + ": " + sys_error();
        fclose(f);
        return false;
    }
    const int64_t file_bytes = (int64_t)st.st_size;
    const int64_t header_bytes = kShardHeaderInts * (int64_t)sizeof(int32_t);

    int32_t header[kShardHeaderInts];
    if (file_bytes < header_bytes || fread(header, sizeof(int32_t), kShardHeaderInts, f) != kShardHeaderInts) {
        err = "token shard " + path + " is truncated: expected a header of " + std::to_string(header_bytes) +
              " bytes, the file has " + std::to_string(file_bytes) + " bytes";
        fclose(f);
        return false;
    }
    if (header[0] != kShardMagic) {
        err = "token shard " + path + " has magic " + std::to_string(header[0]) + ", expected " +
              std::to_string(kShardMagic) + " (not an llm.c token shard?)";
        fclose(f);
        return false;
    }
    if (header[1] != kShardVersion) {
        err = "token shard " + path + " has version " + std::to_string(header[1]) + ", expected " +
              std::to_string(kShardVersion);
        fclose(f);
        return false;
    }
    // The count is an int32 in the header, so a shard holds at most 2^31-1 tokens; negative is corrupt.
    const int64_t count = header[2];
    const int64_t expected_bytes = header_bytes + count * (int64_t)sizeof(uint16_t);
    if (count < 0 || expected_bytes != file_bytes) {
        err = "token shard " + path + ": header says " + std::to_string(count) + " tokens, so expected " +
              std::to_string(expected_bytes) + " bytes, but the file has " + std::to_string(file_bytes) +
              " bytes (" + (file_bytes < expected_bytes ? "truncated" : "trailing data") + ")";
        fclose(f);
        return false;
    }
    tokens.resize((size_t)count);
    if (count > 0 && fread(tokens.data(), sizeof(uint16_t), (size_t)count, f) != (size_t)count) {
        err = "error reading " + std::to_string(count) + " tokens from token shard " + path + ": " +
              (ferror(f) ? sys_error() : std::string("unexpected end of file"));
        tokens.clear();
        fclose(f);
        return false;
    }
    fclose(f);
    return true;
}

void write_token_shard(const std::string& path, const uint16_t* tokens, size_t n) {
    if (n > (size_t)INT32_MAX)
        mm_fatal("token shard %s: %zu tokens do not fit the int32 count of the llm.c header", path.c_str(), n);
    int32_t header[kShardHeaderInts] = {0};
    header[0] = kShardMagic;
    header[1] = kShardVersion;
    header[2] = (int32_t)n;

    // Temporary file beside the target (same directory, so rename is atomic on one filesystem); the pid
    // keeps concurrent writers from sharing a temporary name.
    const std::string tmp = path + ".tmp." + std::to_string((long)getpid());
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) mm_fatal("cannot create %s (for token shard %s): %s", tmp.c_str(), path.c_str(), strerror(errno));
    bool ok = fwrite(header, sizeof(int32_t), kShardHeaderInts, f) == (size_t)kShardHeaderInts;
    if (ok && n > 0) ok = fwrite(tokens, sizeof(uint16_t), n, f) == n;
    // fflush moves the data from stdio's buffer to the kernel, fsync from the kernel to the disk: only then
    // is the rename a promise that the complete file is there.
    if (ok) ok = fflush(f) == 0;
    if (ok) ok = fsync(fileno(f)) == 0;
    int saved_errno = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved_errno = errno;
    }
    if (!ok) {
        unlink(tmp.c_str());
        mm_fatal("error writing token shard %s (temporary %s): %s", path.c_str(), tmp.c_str(),
                 strerror(saved_errno));
    }
    if (rename(tmp.c_str(), path.c_str()) != 0) {
        saved_errno = errno;
        unlink(tmp.c_str());
        mm_fatal("cannot rename %s to %s: %s", tmp.c_str(), path.c_str(), strerror(saved_errno));
    }
}
