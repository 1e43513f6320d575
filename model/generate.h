// generate.h — autoregressive sampling from the model (any parallel layout; every rank returns the same
// tokens).
#pragma once
#include <functional>
#include <vector>
#include "gpt.h"

// Extend `tokens` by n sampled tokens. The model is run on a window of `window` positions (a multiple of
// tp under SP, at most max_seq) holding the last tokens; causal attention makes the padding after them
// irrelevant. temperature 0: greedy decoding (the most likely token each time; top_k changes nothing);
// top_k 0 = the whole vocabulary. Dropout is off while sampling.
// on_token, when given, is called with each new token as soon as it is sampled (tools/generate.cu prints the
// text as it grows: a long sample shows its progress).
void generate(GPT& m, std::vector<int>& tokens, int n, int window, float temperature, int top_k, uint64_t seed,
              const std::function<void(int)>& on_token = nullptr);
