// fuzz_shard.cu — libFuzzer target: the llm.c token shard reader (data/shard.cu) on arbitrary bytes.
// Accepted shards must hold exactly the header's count; refusals must carry a message.
#include "fuzz_common.h"
#include "data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = fuzz_input_file(data, size), err;
    std::vector<uint16_t> tokens;
    bool ok = read_token_shard(path, tokens, err);
    if (ok) {
        int32_t count = 0;
        memcpy(&count, data + 8, sizeof count);
        if ((int64_t)tokens.size() != count || size != 1024 + 2 * tokens.size()) abort();
    } else if (err.empty()) {
        abort();
    }
    return 0;
}
