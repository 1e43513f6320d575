// tokenizer.cu — byte-level encode/decode (see tokenizer.h).
#include "tokenizer.h"

namespace tokenizer {

std::vector<uint16_t> encode(const std::string& text) {
    std::vector<uint16_t> tokens(text.size());
    // Through unsigned char: a plain char may be signed, and byte 0xE2 must be token 226, not -30.
    for (size_t i = 0; i < text.size(); i++) tokens[i] = (uint16_t)(unsigned char)text[i];
    return tokens;
}

std::string decode_token(int token) {
    if (token >= 0 && token < 256) return std::string(1, (char)(unsigned char)token);
    if (token == kEOT) return kEOTText;
    return "<?" + std::to_string(token) + ">";
}

std::string decode(const std::vector<uint16_t>& tokens) {
    std::string text;
    text.reserve(tokens.size());
    for (uint16_t t : tokens) {
        if (t < 256) text.push_back((char)(unsigned char)t);
        else text += decode_token(t);
    }
    return text;
}

}  // namespace tokenizer
