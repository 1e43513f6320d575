// hf_tokenizer.h — GPT-2's BPE from Hugging Face's files, vocab.json and merges.txt, into the same
// Gpt2Tokenizer that llm.c's gpt2_tokenizer.bin gives (data/gpt2_tokenizer.h); and which files a
// --tokenizer path names.
//
// vocab.json maps each token to its id; a token is written in GPT-2's printable alphabet, in which each of
// the 256 bytes is one Unicode character (bytes_to_unicode in GPT-2's encoder.py: the printable Latin-1
// bytes are themselves, the other 68 move to U+0100..U+0143, so a space is 'Ġ' U+0120). merges.txt lists
// the merges in the order they were learned ("#version" first line optional), one "left right" pair per
// line in the same alphabet; a merge's rank is its line. For GPT-2's own files the ids of the merged tokens
// follow the merges, so both tokenizers encode alike; the merges are kept all the same (Gpt2Tokenizer::merges)
// so that any Hugging Face byte-level BPE encodes as Hugging Face's does.
// Refused with the file and what is wrong: JSON that is not an object of distinct ids 0..N-1, a token not
// in the byte alphabet, a byte without a token, no "<|endoftext|>", a merge line that is not two tokens of the
// vocabulary whose concatenation is one too.
#pragma once
#include <string>
#include <vector>

#include "gpt2_tokenizer.h"

// Parse the two files' text (the names are for messages).
bool hf_tokenizer_parse(const std::string& vocab_json, const std::string& merges_txt, const std::string& vocab_name,
                        const std::string& merges_name, Gpt2Tokenizer& tok, std::string& err);
bool hf_tokenizer_load(const std::string& vocab_path, const std::string& merges_path, Gpt2Tokenizer& tok, std::string& err);
// Write vocab.json and merges.txt into `dir` (tests and tools): `tokens` in id order, `merges` as the two
// tokens of each merge in rank order. I/O errors are fatal.
void hf_tokenizer_write(const std::string& dir, const std::vector<std::string>& tokens,
                        const std::vector<std::pair<std::string, std::string>>& merges);

// The files a --tokenizer PATH names: a directory -> DIR/vocab.json and DIR/merges.txt; a path ending in
// vocab.json or merges.txt -> that file and the other one beside it; anything else -> llm.c's file (`vocab`
// gets the path, `merges` stays empty).
void tokenizer_files(const std::string& path, std::string& vocab, std::string& merges);
// "" when the files tokenizer_files names exist and are regular files; else what is wrong, starting with `flag`.
std::string tokenizer_path_problem(const std::string& flag, const std::string& path);
// Load either kind (tokenizer_files decides).
bool tokenizer_load_any(const std::string& path, Gpt2Tokenizer& tok, std::string& err);
