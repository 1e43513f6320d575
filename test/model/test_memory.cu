// test_memory.cu — the measured activation bytes equal the paper's formulas exactly.
//
// On world = tp ranks, for sp ∈ {off, on} × recompute ∈ {none, selective, full} × dtype ∈ {bf16, fp32}: run
// one forward pass and compare the bytes the tagged allocator holds (per layer, per tensor, and outside
// the layers) with recompute/memory_formulas.h. The shape is chosen so that no term is degenerate (s ≠ h, a > t,
// several heads per rank where possible). With --figure7, also checks the paper's Figure 7 pattern on a
// real run at 5as/h = 80: SP alone and selective alone each roughly halve the TP baseline, together ~5×.
// With --cp C (world = tp × C, flash attention): the same comparisons with the formulas at s/C, and the layer's
// measured bytes C times smaller than the formula of one rank holding the whole sequence (no s² term is left).
// In every layout: --memory-report's rank total equals the high-water mark of the rank's whole account, which
// equals the activation allocator's own peak plus the model states' account (check_rank_total).
#include <cstdlib>
#include <cstring>
#include <string>
#include "model_fixture.h"
#include "../../recompute/flash_memory.h"
#include "../../recompute/memory_report.h"
#include "../../recompute/other_reports.h"
#include "../../recompute/table2.h"

// The report's rank total (recompute/other_reports.h: every kind of the rank's account at its high-water mark)
// equals that high-water mark, its printed total line says so, and the mark equals what the two allocators
// count on their own: the activation allocator's peak (activations and workspace) plus the model states' account
// (nothing else is allocated by a plain forward and backward).
static void check_rank_total(ModelHarness& h, MemoryReport r) {
    add_model_state(r, h.model.state_memory, gpt_model_state_formula(h.model));
    const RankMemory& a = rank_memory();
    CHECK(a.total_at_peak() == a.peak_total, "the report's rank total %lld != the account's high-water mark %lld",
          (long long)a.total_at_peak(), (long long)a.peak_total);
    const int64_t own = (int64_t)h.alloc->peak_live_bytes() + h.model.state_memory.total();
    CHECK(a.peak_total == own, "the account's high-water mark %lld != the activation allocator's peak %zu + the model states %lld",
          (long long)a.peak_total, h.alloc->peak_live_bytes(), (long long)h.model.state_memory.total());
    CHECK(a.at_peak[(int)MemoryKind::ModelStates] == h.model.state_memory.total(), "model states at the peak %lld, their account %lld",
          (long long)a.at_peak[(int)MemoryKind::ModelStates], (long long)h.model.state_memory.total());
    char* text = nullptr;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    print_memory_report(f, r);
    fclose(f);
    const std::string lines(text, len);
    free(text);
    char total[96];
    snprintf(total, sizeof total, "%-16s %14lld", "total", (long long)a.peak_total);  // as print_memory_report writes it
    CHECK(lines.find(std::string("  ") + total) != std::string::npos, "the report prints no '%s' line:\n%s", total, lines.c_str());
}

static MemoryReport measure(const ModelSpec& s, int B, int S) {
    ModelHarness h(s, MPI_COMM_WORLD);
    Batch b = make_batch(s.cfg, B, S, 1, h.grid.dp, h.grid.dp_rank);
    h.alloc->reset_peak();  // and the rank's whole account's (layers/activation_allocator.h)
    gpt_forward(h.model, b.inputs.data(), b.targets.data(), B / h.grid.dp, S, true);
    const ModelFormulaInput shape = formula_input(S, B / h.grid.dp, s.cfg.channels, s.cfg.heads, s.cfg.layers,
                                                  s.cfg.padded_vocab, s.tp, h.grid.sp, s.rc, (int)dtype_size(s.dtype),
                                                  s.attention, s.cp);
    MemoryReport r = build_memory_report(h.alloc->live(), shape);
    r.sequence_ranks = s.cp;  // the formulas at s/cp, as the trainer's report
    gpt_backward(h.model);
    CHECK(h.alloc->live_bytes() == 0, "activations left after backward: %zu bytes", h.alloc->live_bytes());
    check_rank_total(h, r);
    return r;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    bool figure7 = argc > 1 && !strcmp(argv[1], "--figure7");
    const int cp = argc > 2 && !strcmp(argv[1], "--cp") ? atoi(argv[2]) : 1;
    int tp = world / cp;
    if (cp > 1) {
        // Context parallelism: s = 24 cut into 2c chunks (c = 2: 6 positions, c = 4: 3), split by t again under SP.
        ModelSpec spec;
        spec.cfg = tiny_config(2, 8, 48, 61, 64, 32);
        spec.tp = tp;
        spec.cp = cp;
        spec.attention = Attention::Flash;
        const int B = 3, S = 24;
        for (DType dt : {DType::BF16, DType::F32})
            for (int sp = 0; sp < 2; sp++)
                for (Recompute rc : {Recompute::None, Recompute::Full}) {
                    ModelSpec s = spec;
                    s.dtype = dt;
                    s.sp = sp;
                    s.rc = rc;
                    MemoryReport r = measure(s, B, S);
                    if (rank != 0) continue;
                    printf("  cp=%d t=%d sp=%d %-9s %s: per layer measured %8.0f formula %8.0f | model %9.0f vs %9.0f\n", cp,
                           tp, sp, recompute_name(rc), dtype_name(dt), r.per_layer_measured, r.per_layer_formula,
                           r.model_measured, r.model_formula);
                    CHECK(r.per_layer_measured == r.per_layer_formula, "cp %d per layer: measured %.0f != formula %.0f", cp,
                          r.per_layer_measured, r.per_layer_formula);
                    CHECK(r.model_measured == r.model_formula, "cp %d model: measured %.0f != formula %.0f", cp,
                          r.model_measured, r.model_formula);
                    CHECK(r.layers_identical, "layers measured different bytes");
                    for (const FormulaTerm& t : r.formula) {
                        double m = r.tensors.count(t.name) ? r.tensors.at(t.name) : 0;
                        CHECK(m == t.bytes, "cp %d tensor %s: measured %.0f != formula %.0f", cp, t.name, m, t.bytes);
                    }
                    // Table 2's row at s/c, as --memory-report compares it (recompute/table2.h), for bf16.
                    const Table2Comparison t2 = table2_compare(r);
                    CHECK(t2.s == (double)S / cp, "cp %d: Table 2 at s = %g, not s/c", cp, t2.s);
                    if (dt == DType::BF16)
                        CHECK(t2.equal(), "cp %d: Table 2 row %s (%s): measured %.0f != %.0f", cp, t2.name, t2.formula,
                              t2.measured, t2.expected);
                    // A 1/c of what one CP rank holding the whole sequence would keep (the same layout at c = 1).
                    ModelFormulaInput whole = formula_input(S, B, s.cfg.channels, s.cfg.heads, s.cfg.layers, s.cfg.padded_vocab,
                                                            tp, sp && tp > 1, rc, (int)dtype_size(dt), Attention::Flash);
                    CHECK(r.per_layer_measured * cp == layer_bytes(whole.layer()),
                          "cp %d: a layer keeps %.0f bytes, not 1/%d of the whole sequence's %.0f", cp, r.per_layer_measured,
                          cp, layer_bytes(whole.layer()));
                }
    } else if (!figure7) {
        // s = 24, b = 3, h = 48, a = 8 (head dim 6), L = 2, Vp = 64: every term distinct and divisible by t ≤ 4.
        ModelSpec spec;
        spec.cfg = tiny_config(2, 8, 48, 61, 64, 32);
        spec.tp = tp;
        const int B = 3, S = 24;
        for (Attention at : {Attention::Unfused, Attention::Flash})
        for (DType dt : {DType::BF16, DType::F32})
            for (int sp = 0; sp < 2; sp++)
                for (Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full}) {
                    ModelSpec s = spec;
                    s.dtype = dt;
                    s.sp = sp;
                    s.rc = rc;
                    s.attention = at;
                    MemoryReport r = measure(s, B, S);
                    if (rank == 0) {
                        printf("  t=%d sp=%d %-9s %-7s %s: per layer measured %8.0f formula %8.0f | model %9.0f vs %9.0f\n",
                               tp, sp, recompute_name(rc), attention_name(at), dtype_name(dt), r.per_layer_measured,
                               r.per_layer_formula, r.model_measured, r.model_formula);
                        CHECK(r.per_layer_measured == r.per_layer_formula, "per layer: measured %.0f != formula %.0f",
                              r.per_layer_measured, r.per_layer_formula);
                        CHECK(r.model_measured == r.model_formula, "model: measured %.0f != formula %.0f", r.model_measured,
                              r.model_formula);
                        CHECK(r.layers_identical, "layers measured different bytes");
                        for (const FormulaTerm& t : r.formula) {
                            double m = r.tensors.count(t.name) ? r.tensors.at(t.name) : 0;
                            CHECK(m == t.bytes, "tensor %s: measured %.0f != formula %.0f", t.name, m, t.bytes);
                        }
                        // Table 2's row, compared by the function --memory-report prints (recompute/table2.h): for
                        // bf16 (d = 2) only. Its value is checked against the row written out here from the
                        // paper's symbols: full recompute under SP stores the 1/t shard; flash attention is the
                        // row without the 5as/h term (the selective row, whatever the policy but full) plus the
                        // fp32 log-sum-exp, 4·asb/t.
                        const Table2Comparison t2 = table2_compare(r);
                        CHECK(t2.comparable == (dt == DType::BF16), "Table 2 compared at d = %d", (int)dtype_size(dt));
                        if (dt == DType::BF16) {
                            bool spx = sp && tp > 1;
                            const Recompute row_rc = at == Attention::Flash && rc == Recompute::None ? Recompute::Selective : rc;
                            double paper = rc == Recompute::Full
                                               ? table2_bytes(Table2Row::FullRecompute, S, B, spec.cfg.channels, spec.cfg.heads, tp) *
                                                     table2_full_sp_factor(tp, spx)
                                               : table2_bytes(table2_row(tp, spx, row_rc), S, B, spec.cfg.channels, spec.cfg.heads, tp);
                            if (at == Attention::Flash && rc != Recompute::Full) paper += 4.0 * spec.cfg.heads * S * B / tp;
                            CHECK(t2.expected == paper, "Table 2 row %s (%s): %.0f, written out %.0f", t2.name, t2.formula,
                                  t2.expected, paper);
                            CHECK(t2.equal(), "Table 2 row %s (%s, %s): measured %.0f != %.0f", t2.name, t2.formula,
                                  attention_name(at), t2.measured, t2.expected);
                            // ... and the report's lines say so.
                            char* text = nullptr;
                            size_t len = 0;
                            FILE* f = open_memstream(&text, &len);
                            print_table2_comparison(f, r, t2);
                            fclose(f);
                            const std::string lines(text, len);
                            free(text);
                            CHECK(lines.find(t2.name) != std::string::npos && lines.find(t2.formula) != std::string::npos &&
                                      lines.find(": equal") != std::string::npos && lines.find("DIFFERENT") == std::string::npos,
                                  "the report's Table 2 lines:\n%s", lines.c_str());
                        }
                        if (at == Attention::Flash) {
                            const double lse = r.tensors.count("lse") ? r.tensors.at("lse") : 0;
                            CHECK(rc == Recompute::Full ? lse == 0 : lse == 4.0 * spec.cfg.heads * S * B / tp,
                                  "flash keeps one fp32 log-sum-exp per query and local head: %.0f bytes", lse);
                            CHECK(!r.tensors.count("probs") && !r.tensors.count("attn_mask") && !r.tensors.count("probs_drop"),
                                  "flash attention stores none of the s x s tensors");
                        }
                    }
                }
    } else {
        // The paper's Figure 7 at t = world (8 in the test), 5as/h = 80: a = 8, h = 128, s = 256.
        ModelSpec spec;
        spec.cfg = tiny_config(1, 8, 128, 61, 64, 256);
        spec.tp = tp;
        spec.dtype = DType::BF16;
        const int B = 1, S = 256;
        double bytes[4];
        const char* names[4] = {"TP baseline", "TP + SP", "TP + selective", "TP + SP + selective"};
        for (int i = 0; i < 4; i++) {
            ModelSpec s = spec;
            s.sp = i == 1 || i == 3;
            s.rc = i >= 2 ? Recompute::Selective : Recompute::None;
            bytes[i] = measure(s, B, S).per_layer_measured;
        }
        if (rank == 0) {
            for (int i = 0; i < 4; i++)
                printf("  %-20s %9.0f bytes per layer  %5.1f%% of the baseline\n", names[i], bytes[i], 100 * bytes[i] / bytes[0]);
            double sp = bytes[1] / bytes[0], sel = bytes[2] / bytes[0], both = bytes[3] / bytes[0];
            if (tp == 8) {
                CHECK(sp > 0.45 && sp < 0.7, "SP alone should roughly halve: %.3f", sp);
                CHECK(sel > 0.45 && sel < 0.7, "selective alone should roughly halve: %.3f", sel);
                CHECK(both < 0.25, "together about 5x less: %.3f", both);
                // and exactly the paper's Figure 7 percentages for 5as/h = 80 (175B row: 62.0 / 56.5 / 18.5)
                CHECK(std::fabs(100 * sp - 62.0) < 0.05 && std::fabs(100 * sel - 56.5) < 0.05 && std::fabs(100 * both - 18.5) < 0.05,
                      "Figure 7 (5as/h = 80): %.2f / %.2f / %.2f, paper 62.0 / 56.5 / 18.5", 100 * sp, 100 * sel, 100 * both);
            }
        }
    }
    int failed = rank == 0 ? test_finish(figure7 ? "test_memory --figure7" : "test_memory") : 0;
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failed;
}
