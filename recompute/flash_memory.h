// flash_memory.h — the activation memory of flash attention's core, and of a sequence split across ranks
// (context parallelism): both beyond the paper, both built on the paper's layer_terms (memory_formulas.h).
//
// Flash attention (layers/flash_attention.h) keeps none of the unfused core's three s×s tensors (probs,
// attn_mask, probs_drop); it keeps one fp32 log-sum-exp per query per local head, "lse", 4·asb/t bytes, and
// rebuilds the probabilities tile by tile in the backward pass: selective recomputation done inside one kernel,
// so Recompute::Selective has nothing left to drop under flash. One layer's list is therefore selective's with
// "lse" after "qkv"; full recompute is unchanged (only the layer input). Without parallelism the sum is
// sbh(16d + 2) + 4asb (the lse is fp32 whatever d is, like the logits).
//
// Context parallelism (the trainer's --cp = c): the s tokens of a sequence are cut into 2c chunks and CP rank
// r keeps chunks r and 2c−1−r (the zigzag that gives every rank the same share of causal-attention work). A
// rank holds its s/c tokens from the embedding to the logits — through attention too, where ring attention
// brings the other ranks' K and V to it instead of gathering the sequence — so every activation term is the
// paper's formula at s/c in place of s (the lse too: 4·a·(s/c)·b/t), and under TP + SP those s/c tokens are
// split by t once more outside the TP regions ((s/c)/t per rank). CP is only defined with flash attention:
// ring attention merges the blocks of keys by their log-sum-exp, which the unfused core does not keep.
//
// Pure host code without dependencies (no MPI, no CUDA calls).
#pragma once
#include "memory_formulas.h"

// Flash attention's saved tensors in one layer beside the paper's: {"lse", 4·asb/t}.
std::vector<FormulaTerm> flash_core_terms(const LayerFormulaInput& in);
// The AttentionCoreMemory of a core (memory_formulas.h): flash's, or nullptr for the paper's unfused core.
const AttentionCoreMemory* attention_core_memory(Attention at);
// The core a formula input describes (Unfused when in.core is nullptr).
Attention formula_attention(const ModelFormulaInput& in);

// ---- Table 2 under flash attention (d = 2; not in the paper, the same rows) ---------------------------
// Each row trades its 5as/h (5as/(ht) under TP) for the lse's 4a/h (4a/(ht)):
//   NoParallel       sbh(34 + 4a/h)
//   TP               sbh(10 + 24/t + 4a/(ht))
//   TP_SP            sbh(34/t + 4a/(ht))
//   TP_Selective     sbh(10 + 24/t + 4a/(ht))   = TP: selective has nothing left to drop, the lse stays
//   TP_SP_Selective  sbh(34/t + 4a/(ht))        = TP_SP
//   FullRecompute    2sbh                        unchanged: only the layer input is kept
// At the paper's shapes the lse is tiny: 5as/h ÷ 4a/h = 5s/4 = 2560 at s = 2048 (GPT-3: 80 against 0.03).
// layer_bytes(in with core = flash) == table2_flash_bytes(table2_row(t, sp, rc), ...), with the same
// full-recompute-under-SP exception as the paper's rows (times table2_full_sp_factor).
const char* table2_flash_formula(Table2Row row);  // the row written like the paper's, e.g. "sbh(34/t + 4a/(ht))"
double table2_flash_bytes(Table2Row row, double s, double b, double h, double a, int t);

// formula_input (memory_formulas.h) of a run with an attention core and a context-parallel size cp: the
// paper's symbols at s = seq/cp, this rank's tokens, with the core's AttentionCoreMemory.
ModelFormulaInput formula_input(int seq, int micro_batch, int hidden, int heads, int layers, int padded_vocab, int tp,
                                bool sp, Recompute rc, int d, Attention attention, int cp = 1);
