// eval_file.h — multiple-choice evaluations (HellaSwag) in llm.c's eval-file format, and how they are scored.
//
// Each example is a context and 4 candidate completions, one of them right. The model scores a candidate by
// the mean loss (−log p) of the completion's tokens given the context; the candidate with the lowest mean
// loss is the model's answer (llm.c's and the HellaSwag paper's "acc_norm"-style length-normalised choice).
// An example takes 4 rows of a batch, one per candidate: [context, completion, padding]; the loss counts
// at the positions whose TARGET is a completion token (the last context position predicts the first
// completion token). Padding after the completion does not change those losses: attention is causal.
//
// File layout (little-endian): 256 x int32 header: [0] magic 20240522, [1] version 1, [2] number of examples,
// [3] the longest example in bytes; then each example as uint16 values: 65535 (start), its size in bytes,
// its index, its label, the number of completions (4), the context length and tokens, then per completion
// its length and tokens.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

constexpr int32_t kEvalMagic = 20240522;
constexpr int kEvalCompletions = 4;

struct EvalExample {
    int index = 0;
    int label = 0;  // 0..3: the right completion
    std::vector<int> context;
    std::vector<int> completions[kEvalCompletions];
};

// Read every example. False with `err` naming the file and what is wrong: missing, bad magic or version,
// cut short, an example whose delimiter, index, label, completion count or size is off.
bool read_eval_file(const std::string& path, std::vector<EvalExample>& examples, std::string& err);
// Write one (tests make small eval files with it). Atomic; I/O errors are fatal.
void write_eval_file(const std::string& path, const std::vector<EvalExample>& examples);

// The rows of examples [first, first + count) for sequences of T tokens: 4·count rows of T inputs and
// targets (0 where unused) and a 0/1 mask of the positions that count. False with `err` when an example
// does not fit in T tokens (context + completion must be at most T).
bool eval_rows(const std::vector<EvalExample>& examples, int first, int count, int T, std::vector<int32_t>& inputs,
               std::vector<int32_t>& targets, std::vector<uint8_t>& mask, std::string& err);
// From the per-position losses of those rows ([4·count, T], the same layout), the number of examples whose
// lowest mean completion loss is the labelled one (ties go to the earlier candidate, as in llm.c).
int eval_correct(const std::vector<EvalExample>& examples, int first, int count, int T, const std::vector<float>& losses,
                 const std::vector<uint8_t>& mask);
// The examples DP rank r of dp evaluates: a contiguous block, ceil(n/dp) each, the last ones shorter.
void eval_share(int n_examples, int dp, int dp_rank, int* first, int* count);
