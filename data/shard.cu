// shard.cu — reading and writing llm.c token shards (see shard.h for the format).
#include "shard.h"
#include "atomic_file.h"

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

    // Written whole or not at all (atomic_file.h): a reader, or a crash, never sees a half-written shard.
    AtomicFile f;
    std::string err;
    if (!f.open(path, err)) mm_fatal("cannot write token shard: %s", err.c_str());
    f.write(header, sizeof header);
    if (n > 0) f.write(tokens, n * sizeof(uint16_t));  // a write error is remembered and reported by commit
    if (!f.commit(err)) mm_fatal("error writing token shard: %s", err.c_str());
}
