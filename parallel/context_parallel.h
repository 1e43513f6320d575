// context_parallel.h — context parallelism (CP), all of it: which positions of the sequence a CP rank holds
// (zigzag), the loss over the CP group, and ring attention, the one op that needs the other ranks' positions.
// (The dropouts keyed by those positions take them as runs like any others: layers/positions.h, dropout.h.)
//
// Sequence parallelism (sequence_parallel.h) splits the sequence over the t ranks of a TP group outside
// attention only, and only up to t. Context parallelism splits it over c more ranks THROUGH attention as
// well: each CP rank holds s/c positions of every sequence of its batch from the embedding to the loss, and
// every op but core attention is token-local (LayerNorm, dropout, the linear layers, GeLU, the loss). Under
// TP + SP each CP rank's s/c positions are split by t again outside the TP regions. The CP ranks hold the same
// weights, so their gradients are summed like DP's (ProcessGrid's dpcp_comm). The paper has no CP; the form
// here is the one Megatron-LM and Transformer Engine call "p2p with load balancing".
//
// Zigzag. Under the causal mask, query chunk i sees i + 1 key chunks: with the sequence cut into c contiguous
// pieces rank r would do r + 1 blocks of the triangle and the last rank c of them. Cut into 2c chunks of
// L = s/(2c) positions instead, rank r holds chunks r and 2c − 1 − r: (r + 1) + (2c − r) = 2c + 1 chunk-pair
// blocks for every rank, two of them on the diagonal (half blocks). Positions, dropout keys and loss targets
// keep their GLOBAL coordinates, so every mask is the single-rank run's for any c.
//
// Ring attention (forward). Each rank starts with its own K and V and passes what it holds to the next rank of
// the ring, c − 1 times: at step i it holds the K and V of rank j = r − i (mod c) and computes the blocks of
// its two query chunks against j's two key chunks that the causal mask does not empty (flash_block_forward,
// layers/flash_attention.h), while the next step's K and V travel (exchange_start / exchange_finish: one paired
// exchange per step, every rank sending to r + 1 and receiving from r − 1, NCCL-safe by construction). The
// partial outputs are merged by the log-sum-exp rule in fp32 (flash_block_merge), the fp32 lse is kept for
// backward as flash attention's.
// Backward. K and V go round again. At step i a rank adds its terms of dK_j, dV_j into a fresh fp32 buffer;
// the partial sums of dK_j, dV_j from the ranks before it (j .. r − 1) arrive during that step, are added, and
// leave for r + 1 during the next, so that after the last step the complete dK, dV of rank r + 1 sit on rank
// r and one more exchange takes them home. Bytes per layer, one rank: K, V: 2·(c−1)·(s/c)·b·(h/t) elements
// forward and again backward; dK, dV: 2·c·(s/c)·b·(h/t) fp32 (recompute/formulas.h, cp_kv_*_bytes).
#pragma once
#include <cstdint>
#include <vector>
#include "point_to_point.h"
#include "../layers/activation_allocator.h"
#include "../layers/attention.h"
#include "../layers/flash_attention.h"
#include "../layers/positions.h"

// ---- which positions a rank holds ----------------------------------------------------------------------------
// The positions CP rank cp_rank of cp holds in a sequence of S, as runs (layers/positions.h): chunks cp_rank
// and 2c − 1 − cp_rank of S/(2c) positions (cp = 1: all of [0, S), one run). The layer and the embedding
// take them as any other runs of positions; only ring attention needs to know they are CP's.
SeqRuns cp_runs(int S, int cp, int cp_rank);

// ---- the loss over the CP group -------------------------------------------------------------------------------
// The loss of whole sequences from each CP rank's mean over its positions: the mean over the group (every
// CP rank holds the same number of targets). cp.size == 1: `loss` itself.
float cp_mean_loss(Comm& cp, float loss);
// Each position's loss −log p(target) back in the loader's [B, S] from every CP rank's [S/c, B]
// (sequence-major, this rank's `mine`): an all-gather over the group, then each rank's rows to their global
// positions. cp.size == 1: the transpose of `mine`.
void cp_token_losses(Comm& cp, const std::vector<float>& mine, int S, int B, std::vector<float>* out);

// ---- ring attention -----------------------------------------------------------------------------------------
// What the ring did since the last cp_stats_reset, on this rank: the chunk-pair blocks computed (diagonal ones
// among them, each half a block of work), the query-key pairs they cover (exactly the rank's share of the causal
// triangle), the seconds the host spent computing blocks (not waiting), and the bytes sent, as the
// communicator's counters count them (K and V forward; K, V, dK and dV backward).
struct CpStats {
    int64_t blocks = 0, diagonal_blocks = 0;
    double pairs = 0;
    double compute_s = 0;
    uint64_t forward_bytes = 0, backward_bytes = 0;
};
CpStats& cp_stats();
void cp_stats_reset();
// What the ring did since the snapshot `before` (of cp_stats()): one step's work, say.
CpStats cp_stats_since(const CpStats& before);

// One layer's core attention under CP. sh: this rank's shapes, sh.S = its positions (s/c: chunks cp.rank and
// 2c − 1 − cp.rank, L = sh.S/2 each), S_total = the whole sequence's length. qkv [sh.S·B, 3·NH·HD] as for
// flash_attention_forward; out [sh.S·B, NH·HD] and lse (f32 [B, NH, sh.S], the merged one) written. `layer`
// tags the temporaries (all "tmp:", released before return).
void ring_attention_forward(Comm& cp, Ctx& ctx, ActivationAllocator& A, int layer, Tensor out, Tensor lse, Tensor qkv,
                            const AttnShape& sh, int64_t S_total, float p, uint64_t seed, uint32_t stream);
// dqkv (written) from dout and the forward's out, lse and qkv.
void ring_attention_backward(Comm& cp, Ctx& ctx, ActivationAllocator& A, int layer, Tensor dqkv, Tensor dout,
                             Tensor out, Tensor lse, Tensor qkv, const AttnShape& sh, int64_t S_total, float p,
                             uint64_t seed, uint32_t stream);
// The two above as layer `layer`'s core attention (FlashCore, layers/flash_attention.h): what the model's
// gpt_layer_context gives the layer when c > 1, so that the layer itself holds no CP code.
FlashCore ring_attention_core(Comm& cp, ActivationAllocator& A, int layer, int64_t S_total);
