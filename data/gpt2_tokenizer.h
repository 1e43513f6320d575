// gpt2_tokenizer.h — GPT-2's byte-level BPE tokenizer, read from llm.c's gpt2_tokenizer.bin.
//
// The file lists every token's bytes, in id order. That is all byte-level BPE needs, because in GPT-2 (and
// in tiktoken's GPT-2 ranks) a token's id IS its merge rank: the 256 single bytes come first, then each merge
// in the order it was learned, so "merge the adjacent pair whose concatenation has the smallest id" replays
// the merges in training order. Encoding a text is two steps:
//  1. pre-tokenization: GPT-2's pattern cuts the text into pieces (a word with its leading space, a number,
//     a run of punctuation, whitespace); merges never cross a piece boundary;
//  2. BPE inside each piece: start from its bytes, repeatedly merge the adjacent pair with the smallest rank
//     until no adjacent pair is a token.
// The pattern's Unicode classes (\p{L} letters, \p{N} numbers, \s) need a real regex engine: PCRE2, in UTF
// mode with Unicode properties.
//
// File layout (little-endian): 256 x int32 header: [0] magic 20240328, [1] version (1 or 2), [2] number of
// tokens V, [3] the end-of-text id (version 2; version 1 files are GPT-2's, whose end-of-text is the last
// token, 50256); then for each token id 0..V-1: one byte n (1..255), then the token's n bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

constexpr int32_t kTokenizerMagic = 20240328;
// GPT-2's pre-tokenization pattern (tiktoken's "gpt2" pat_str; contractions first, then letters, numbers,
// other symbols, each optionally after one space; whitespace not followed by a non-space; any whitespace).
constexpr const char* kGpt2Pattern =
    R"('(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Gpt2Regex;  // the compiled pattern (PCRE2), private to gpt2_tokenizer.cu

struct Gpt2Tokenizer {
    std::vector<std::string> tokens;             // id -> bytes
    std::unordered_map<std::string, int> ranks;  // bytes -> id (= merge rank); the first id wins a duplicate
    int eot = -1;                                // end-of-text id
    // A tokenizer read from Hugging Face's vocab.json + merges.txt (data/hf_tokenizer.h) has its merges
    // listed apart from its ids: (left id << 32 | right id) -> (merge rank, merged id). Then encoding merges
    // the adjacent pair of the lowest rank, as Hugging Face's BPE does. Empty for llm.c's file, whose ids
    // are the merge ranks.
    std::unordered_map<uint64_t, std::pair<int, int>> merges;
    std::shared_ptr<Gpt2Regex> regex;
    int vocab() const { return (int)tokens.size(); }
};

// Read a tokenizer file. False, with `err` naming the file and what is wrong (missing, wrong magic or
// version, cut short, a token of length 0, an end-of-text id out of range, a byte without a token).
bool gpt2_tokenizer_load(const std::string& path, Gpt2Tokenizer& tok, std::string& err);
// Build one from its token list (id order) and end-of-text id; the same checks as loading.
bool gpt2_tokenizer_build(std::vector<std::string> tokens, int eot, Gpt2Tokenizer& tok, std::string& err);
// Write a version-2 file (tests and tools make small tokenizers with it). Atomic; I/O errors are fatal.
void gpt2_tokenizer_write(const std::string& path, const std::vector<std::string>& tokens, int eot);

// The pieces GPT-2's pattern cuts `text` into, in order; their concatenation is `text`. Bytes that are not
// valid UTF-8 match no alternative of the pattern: each such run becomes a piece of its own, so that any
// byte string survives encoding.
std::vector<std::string> gpt2_pretokenize(const Gpt2Tokenizer& tok, const std::string& text);
// Text -> token ids (ordinary text: "<|endoftext|>" in the text is encoded as the characters it is made of,
// as tiktoken's encode_ordinary does; callers insert tok.eot between documents themselves).
std::vector<int> gpt2_encode(const Gpt2Tokenizer& tok, const std::string& text);
// Token ids -> the concatenation of their bytes. An id outside the vocabulary becomes "<?id>", visible.
std::string gpt2_decode(const Gpt2Tokenizer& tok, const std::vector<int>& ids);
