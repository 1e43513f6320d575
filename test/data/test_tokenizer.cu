// test_tokenizer.cu — the byte tokenizer (data/tokenizer.cu): one token per byte, EOT = 256, a vocabulary of
// 257 padded to a multiple of 128; decode(encode(x)) == x for arbitrary bytes.
#include "data/tokenizer.h"
#include "test/test_util.h"

static void test_tokenizer(std::mt19937& rng) {
    std::string all;
    for (int b = 0; b < 256; b++) all.push_back((char)b);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int i = 0; i < 5000; i++) all.push_back((char)byte(rng));
    std::vector<uint16_t> toks = tokenizer::encode(all);
    CHECK(toks.size() == all.size(), "one token per byte");
    bool ok = true;
    for (size_t i = 0; i < all.size(); i++) ok = ok && toks[i] == (unsigned char)all[i];
    CHECK(ok, "token == byte value (unsigned)");
    CHECK(tokenizer::decode(toks) == all, "decode(encode(x)) == x for arbitrary bytes");
    CHECK(tokenizer::decode({'a', (uint16_t)tokenizer::kEOT, 'b'}) == std::string("a") + tokenizer::kEOTText + "b",
          "EOT decodes to the marker");
    CHECK(contains(tokenizer::decode_token(300), "300"), "padding id decoded visibly");
    CHECK(tokenizer::kVocab == 257 && tokenizer::kEOT == 256, "vocab");
    CHECK(tokenizer::kPaddedVocab >= tokenizer::kVocab && tokenizer::kPaddedVocab % 128 == 0 &&
              tokenizer::kPaddedVocab % 8 == 0,
          "padded vocab %d", tokenizer::kPaddedVocab);
}

int main() {
    std::mt19937 rng(20240520);
    test_tokenizer(rng);
    return test_finish("test_tokenizer");
}
