// text_tokenizer.h — where text meets tokens in the trainer and the tools (prompts in, samples out): the
// byte-level tokenizer by default (data/tokenizer.h), or GPT-2's BPE when a tokenizer file is given
// (data/gpt2_tokenizer.h), from llm.c's gpt2_tokenizer.bin or Hugging Face's vocab.json + merges.txt
// (data/hf_tokenizer.h). One place decides which, and checks it against the model's vocabulary.
#pragma once
#include <string>
#include <vector>
#include "gpt2_tokenizer.h"

struct TextTokenizer {
    std::string file;  // "" = byte-level
    Gpt2Tokenizer bpe;
    std::vector<int> encode(const std::string& text) const;
    std::string decode(const std::vector<int>& ids) const;
    int vocab() const;
    const char* describe() const;  // "byte-level" or the file
};

// file == "": the byte-level tokenizer. Otherwise load the file (or directory: tokenizer_files). Either way the model's real vocabulary
// `model_vocab` must be the tokenizer's, or the ids would mean other text: false with `err` giving both numbers.
bool text_tokenizer_open(const std::string& file, int model_vocab, TextTokenizer& tok, std::string& err);
