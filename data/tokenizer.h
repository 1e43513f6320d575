// tokenizer.h — the byte-level tokenizer: one token per byte, plus one end-of-text token.
//
// Token t in 0..255 is the byte t; token 256 (EOT) separates documents, as GPT-2's <|endoftext|> does.
// No merges, no vocabulary file: any byte string round-trips exactly, and a learner can read a token
// stream with a hex dump. The price is longer sequences than BPE for the same text, which is fine for
// the small models this project trains.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tokenizer {

constexpr int kEOT = 256;           // end of text: document separator
constexpr int kVocab = 257;         // V: 256 byte values + EOT
// Vp: the vocabulary rounded up to a multiple of 128. Stored rows beyond V are never targets; the padding
// keeps the LM-head GEMM aligned and lets the vocabulary split evenly over tp = 1, 2, 4, 8 (384/8 = 48).
constexpr int kPaddedVocab = 384;

// What EOT decodes to: visible in sampled text, on a line of its own.
constexpr const char* kEOTText = "\n<|endoftext|>\n";

// Bytes of `text` -> tokens (one per byte, values 0..255; never EOT).
std::vector<uint16_t> encode(const std::string& text);

// Tokens -> text. Bytes are written as they are (including unprintable ones: the output is the original
// byte string); EOT becomes kEOTText; ids in the padding (>= kVocab) become "<?id>" so that a sampled
// padding id, which a correct model never produces, is visible rather than silently dropped.
std::string decode(const std::vector<uint16_t>& tokens);
std::string decode_token(int token);

}  // namespace tokenizer
