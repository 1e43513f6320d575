// fuzz_hf_tokenizer.cu — libFuzzer target: Hugging Face's GPT-2 tokenizer files (data/hf_tokenizer.cu) on
// arbitrary bytes: vocab.json's text up to the first NUL byte, merges.txt's after it. The reader must accept
// or refuse with a message; an accepted tokenizer must encode the input's own bytes to ids that decode back
// to those bytes (byte-level BPE loses nothing), through the merges it read.
#include "fuzz_common.h"
#include "data/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const uint8_t* nul = (const uint8_t*)memchr(data, 0, size);
    const size_t split = nul ? (size_t)(nul - data) : size;
    const std::string vocab((const char*)data, split);
    const std::string merges = nul ? std::string((const char*)nul + 1, size - split - 1) : std::string();
    Gpt2Tokenizer tok;
    std::string err;
    const bool ok = hf_tokenizer_parse(vocab, merges, "vocab.json", "merges.txt", tok, err);
    if (!ok && err.empty()) abort();
    if (ok) {
        const std::string text((const char*)data, size < 200 ? size : 200);
        std::vector<int> ids = gpt2_encode(tok, text);
        for (int id : ids)
            if (id < 0 || id >= tok.vocab()) abort();
        if (gpt2_decode(tok, ids) != text) abort();
    }
    return 0;
}
