// test_pipeline_memory.cu — a pipeline stage's measured activation bytes equal the formula exactly, at the
// moment its schedule holds the most micro-batches (paper §4.2.3, Eq. 5/6).
//
// Run under mpirun with world = tp × pp (--tp T): for each schedule — 1F1B with M ≥ p and with M < p, AFAB,
// interleaved 1F1B (m = 2) — and sp ∈ {off, on} × recompute ∈ {none, selective, full} × dtype ∈ {bf16, fp32},
// one step of forward_backward; at the peak every stage compares what the tagged allocator holds with the
// formula (in-flight layer-micro-batches × one layer's Table 2 bytes, plus the embedding's dropout mask per
// micro-batch on the first stage and the head's tensors on the last). The first stage's in-flight count is
// checked against the paper's statements, written out here independently of the schedule code:
//   1F1B: min(p, M) micro-batches of L/p layers (L layers' worth when M ≥ p);  AFAB: M·L/p;
//   interleaved: L·(1 + (p−1)/(p·m));  ZB-H1: 1F1B's;  ZB-H2: min(2p − 1, M) micro-batches;
//   ZB-V: 2p chunk-micro-batches of L/(2p) layers, 1F1B's L (M >= 2p).
// Under ZB-H1/ZB-H2/ZB-V the W inputs held at that moment equal their formula too (ZB-H1's last stage: p − 1
// micro-batches').
// After the step no activation is left.
#include <cstring>
#include "model_fixture.h"
#include "../../recompute/flash_memory.h"
#include "../../recompute/table2.h"
#include "../../model/pipeline_step.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int tp = 1;
    Attention attention = Attention::Unfused;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tp")) tp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--attention")) parse_attention(argv[++i], &attention);
    }
    const int p = world / tp, L = 4, b = 2, S = 24;
    struct Case { const char* name; PipeSchedule sched; int M, chunks; double first_stage_layers; };
    const Case cases[] = {
        {"1f1b M >= p", PipeSchedule::OneFOneB, 2 * p + 1, 1, (double)L},
        {"1f1b M < p", PipeSchedule::OneFOneB, p - 1, 1, (double)(p - 1) * L / p},
        {"afab", PipeSchedule::AFAB, 4, 1, 4.0 * L / p},
        {"interleaved m=2", PipeSchedule::Interleaved, 2 * p, 2, L * (1.0 + (p - 1.0) / (p * 2.0))},
        // Zero bubble (Qi et al. 2024): ZB-H1's first stage holds 1F1B's p micro-batches, ZB-H2's 2p − 1.
        {"zb-h1 M > p", PipeSchedule::ZeroBubbleH1, 2 * p + 1, 1, (double)L},
        {"zb-h1 M < p", PipeSchedule::ZeroBubbleH1, p - 1, 1, (double)(p - 1) * L / p},
        {"zb-h2 M > p", PipeSchedule::ZeroBubbleH2, 2 * p + 1, 1, (2.0 * p - 1) * L / p},
        // ZB-V: 2p (micro-batch, chunk) pairs of L/(2p) layers: 1F1B's L layers, on the first stage (which holds
        // both ends of the V) once M >= 2p.
        {"zb-v M >= 2p", PipeSchedule::ZeroBubbleV, 2 * p + 1, 2, (double)L},
    };
    if (rank == 0)
        printf("test_pipeline_memory: tp %d x pp %d, L = %d, micro-batches of %d sequences of %d, %s attention\n", tp, p, L, b,
               S, attention_name(attention));
    int mismatches = 0;
    for (const Case& c : cases) {
        if (c.M < 1) continue;  // p = 1 has no M < p case
        if (c.sched != PipeSchedule::OneFOneB && p == 1) continue;  // one stage runs no schedule (model/train_step.cu)
        for (DType dt : {DType::BF16, DType::F32})
            for (int sp = 0; sp < 2; sp++)
                for (Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full}) {
                    ModelSpec s;
                    s.cfg = tiny_config(L, 8, 48, 61, 64, 32);
                    s.tp = tp;
                    s.sp = sp;
                    s.rc = rc;
                    s.dtype = dt;
                    s.pp = p;
                    s.chunks = c.chunks;
                    s.schedule = c.sched;
                    s.attention = attention;
                    ModelHarness h(s, MPI_COMM_WORLD);
                    const int B = b * std::max(c.M, 1);  // (M >= 1 here; max() tells the compiler so)
                    Batch batch = make_batch(s.cfg, B, S, 1, 1, 0);
                    const ModelFormulaInput shape = formula_input(S, b, s.cfg.channels, s.cfg.heads, L, s.cfg.padded_vocab, tp,
                                                                  h.grid.sp, rc, (int)dtype_size(dt), attention);
                    h.alloc->keep_peak_snapshot(true);  // the live set at the schedule's peak
                    forward_backward(h.model, batch.inputs.data(), batch.targets.data(), B, S, c.M);
                    CHECK(h.alloc->has_peak_snapshot(), "rank %d: the step marked no peak", rank);
                    MemoryReport r = build_memory_report(h.alloc->peak_snapshot(), shape, pipeline_in_flight(h.model, c.M));
                    const size_t left = h.alloc->live_bytes();
                    // Zero bubble: the W inputs held at the same moment ("w:" tags, layers/weight_grad_queue.h), per
                    // layer of the stage and micro-batch with B run and W not: X and dY of the four linear layers,
                    // d·s·b·h·(4 + 12/t) bytes. The schedule's count at the marked moment, and the last stage's
                    // written out for ZB-H1 at M > p: p − 1 (its W lag).
                    double w_measured = 0;
                    for (const ActivationRecord& a : h.alloc->peak_snapshot())
                        if (a.name.rfind("w:", 0) == 0) w_measured += (double)a.bytes;
                    const int pending = pipeline_weight_pending(h.model, c.M);
                    // (each pending (micro-batch, chunk) holds one chunk's layers: L/p, or L/(2p) under ZB-V)
                    const double w_formula = (double)pending * (L / (p * c.chunks)) * dtype_size(dt) * S * b * s.cfg.channels *
                                             (4.0 + 12.0 / tp);
                    const bool w_ok = w_measured == w_formula &&
                                      (c.sched != PipeSchedule::ZeroBubbleH1 || c.M <= p || h.grid.pp_rank != p - 1 || pending == p - 1) &&
                                      (p == 1 || is_zero_bubble(c.sched) || pending == 0);
                    const bool ok = r.stage_layers_measured == r.stage_layers_formula && r.model_measured == r.model_formula &&
                                    r.per_layer_measured == r.per_layer_formula && r.layers_identical && left == 0 &&
                                    (h.grid.pp_rank != 0 || r.in_flight_layers == c.first_stage_layers) &&
                                    // the Table 2 row as --memory-report compares it: one micro-batch's layer
                                    // and the stage's layers (recompute/table2.h), bf16 (d = 2) only
                                    (dt != DType::BF16 || table2_compare(r).equal()) && w_ok;
                    if (!ok) {
                        mismatches++;
                        printf("  rank %d stage %d %s %s sp=%d %s: layers %.0f vs %.0f, model %.0f vs %.0f, in flight %d "
                               "(expected %.2f on the first stage), %zu bytes left, W inputs %.0f vs %.0f (%d pending)\n", rank,
                               h.grid.pp_rank, c.name, dtype_name(dt), sp, recompute_name(rc), r.stage_layers_measured,
                               r.stage_layers_formula, r.model_measured, r.model_formula, r.in_flight_layers, c.first_stage_layers,
                               left, w_measured, w_formula, pending);
                    }
                    if (dt == DType::BF16 && sp == 1 && rc == Recompute::Selective && pending > 0 && h.grid.tp_rank == 0)
                        printf("  %-16s M=%2d  stage %d: W inputs of %d micro-batches held, %.0f B measured = %.0f formula\n",
                               c.name, c.M, h.grid.pp_rank, pending, w_measured, w_formula);
                    if (rank == 0 && dt == DType::BF16 && sp == 1 && rc == Recompute::Selective)
                        printf("  %-16s M=%2d  first stage: %d layer-micro-batches in flight (paper: %.2f), layers %.0f B "
                               "measured = %.0f formula, whole stage %.0f = %.0f\n", c.name, c.M, r.in_flight_layers,
                               c.first_stage_layers, r.stage_layers_measured, r.stage_layers_formula, r.model_measured,
                               r.model_formula);
                }
    }
    int all = 0;
    MPI_Allreduce(&mismatches, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) CHECK(all == 0, "%d (stage, configuration) pairs measured other bytes than the formula", all);
    int failed = rank == 0 ? test_finish("test_pipeline_memory") : 0;
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failed;
}
