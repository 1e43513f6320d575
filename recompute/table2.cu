// table2.cu — the Table 2 comparison of a run (see table2.h): one layer's saved tensors, each measured next to
// its formula, then the run's row of Table 2 next to the measured layer.
#include "table2.h"

#include <set>

void print_layer_table(FILE* f, const MemoryReport& r) {
    char first[32];
    snprintf(first, sizeof first, "layer %d tensor", r.first_layer);
    fprintf(f, "  %-16s %14s %14s %10s\n", first, "measured", "formula", "diff");
    std::set<std::string> shown;
    for (const FormulaTerm& t : r.formula) {  // the paper's terms, in its order (recompute/memory_formulas.h)
        const double m = r.tensors.count(t.name) ? r.tensors.at(t.name) : 0.0;
        fprintf(f, "  %-16s %14.0f %14.0f %10.0f\n", t.name, m, t.bytes, m - t.bytes);
        shown.insert(t.name);
    }
    for (auto& kv : r.tensors)  // a tensor saved that the formula does not count would show here
        if (!shown.count(kv.first) && !is_layer_extra(kv.first))
            fprintf(f, "  %-16s %14.0f %14s %10s   (not in the paper's list)\n", kv.first.c_str(), kv.second, "-", "-");
    fprintf(f, "  %-16s %14.0f %14.0f %10.0f   per layer (%s)%s\n", "total", r.per_layer_measured,
            r.per_layer_formula, r.per_layer_measured - r.per_layer_formula, human_bytes(r.per_layer_measured).c_str(),
            r.layers_identical ? ", every layer the same" : ", LAYERS DIFFER");
    fprintf(f, "  %-16s %14.0f %14s %10s   layer-norm mean/rstd (fp32), ignored by the paper\n", "extras",
            r.per_layer_extras, "-", "-");
    if (r.shape.rc == Recompute::Full)
        fprintf(f, "  note: full recompute stores each layer's input: the paper's Table 2 row is 2sbh; under SP\n"
                   "        each rank keeps only its sequence shard, 2sbh/t, which is what is measured and what the\n"
                   "        formula column shows.\n");
}

Table2Comparison table2_compare(const MemoryReport& r) {
    const ModelFormulaInput& in = r.shape;
    Table2Comparison c;
    const bool sp = in.sp && in.t > 1;  // SP on one rank splits nothing: the row without it
    c.row = table2_row(in.t, sp, in.rc);
    c.core = in.core;  // another attention core reads the row with its own terms (memory_formulas.h)
    c.name = table2_row_name(c.row);
    c.formula = c.core ? c.core->table2_formula(c.row) : table2_row_formula(c.row);
    c.s = in.s;
    c.row_bytes = c.core ? c.core->table2_bytes(c.row, c.s, in.b, in.h, in.a, in.t)
                         : table2_bytes(c.row, c.s, in.b, in.h, in.a, in.t);
    c.shard = c.row == Table2Row::FullRecompute ? table2_full_sp_factor(in.t, sp) : 1.0;
    c.expected = c.row_bytes * c.shard;
    c.measured = r.per_layer_measured;
    c.comparable = in.d == 2;
    c.in_flight_layers = r.in_flight_layers;
    c.stage_expected = c.in_flight_layers * c.expected;
    c.stage_measured = r.stage_layers_measured;
    return c;
}

void print_table2_comparison(FILE* f, const MemoryReport& r, const Table2Comparison& c) {
    const ModelFormulaInput& in = r.shape;
    char variant[64] = "";
    if (c.core) snprintf(variant, sizeof variant, " (its %s attention variant)", attention_name(c.core->attention));
    fprintf(f, "  Table 2 row of this run: %s%s\n", c.name, variant);
    char at[96] = "";  // a sequence shared by several ranks: the row at one rank's tokens
    const int n = r.sequence_ranks;
    if (n > 1) snprintf(at, sizeof at, ", at s/c = %g of s = %.0f (cp %d)", c.s, c.s * n, n);
    fprintf(f, "    %-9s %s, d = 2 bytes per activation element%s\n", "formula", c.formula, at);
    fprintf(f, "    %-9s %.0f bytes per layer (s=%g b=%.0f h=%.0f a=%.0f t=%d)\n", "value", c.row_bytes, c.s, in.b,
            in.h, in.a, in.t);
    if (c.shard != 1)
        fprintf(f, "    %-9s %.0f: under SP each rank keeps its 1/t shard of the layer input, 2sbh/t\n", "stored",
                c.expected);
    if (!c.comparable) {
        fprintf(f, "    %-9s %.0f bytes per layer at d = %d: not compared (Table 2 is for 2-byte activations, "
                   "--dtype bf16;\n              the per-tensor table above compares at d = %d)\n",
                "measured", c.measured, in.d, in.d);
        return;
    }
    const char* verdict = c.measured == c.expected ? "equal" : "DIFFERENT";
    if (r.pp == 1 && c.in_flight_layers == (int)in.L) {  // every layer once: one stage, one micro-batch in flight
        fprintf(f, "    %-9s %.0f bytes per layer (each of the %d): %s\n", "measured", c.measured,
                c.in_flight_layers, verdict);
        return;
    }
    // A pipeline stage, or micro-batches in flight: one layer of one micro-batch, then the stage's layers.
    fprintf(f, "    %-9s %.0f bytes per layer and micro-batch (layer %d, the stage's first): %s\n", "measured",
            c.measured, r.first_layer, verdict);
    fprintf(f, "    %-9s %d layer-micro-batches in flight x %.0f = %.0f, measured %.0f: %s\n", "stage",
            c.in_flight_layers, c.expected, c.stage_expected, c.stage_measured,
            c.stage_measured == c.stage_expected ? "equal" : "DIFFERENT");
}
