// table2.h — the Table 2 comparison of a run, in one place: one layer's saved tensors, each measured next to
// its formula (print_layer_table), then the row of the paper's Table 2 that applies to the run, next to what it
// measured (table2_compare, print_table2_comparison).
//
// Table 2 (Korthikanti et al. 2022, docs/paper.md) gives the activation bytes ONE transformer layer keeps on
// ONE GPU for six layouts, with 2-byte activations and 1-byte dropout masks (d = 2). table2_compare picks the
// row of a memory report's run (t, SP, recompute: table2_row, recompute/memory_formulas.h), evaluates it at the
// run's s, b, h, a, t and puts it next to the measured bytes of one layer:
//   - another attention core (the run's AttentionCoreMemory): the core's variant of the row;
//   - a sequence shared by several ranks: the row at the rank's tokens, shape.s;
//   - full recompute under SP: the paper prints 2sbh; each rank keeps its 1/t shard of the input, 2sbh/t;
//   - pipeline stages and micro-batches in flight: one layer of ONE micro-batch (the stage's first layer) is
//     compared, and the stage's layers with the row times the layer-micro-batches in flight;
//   - d ≠ 2 (fp32 runs): the row is printed but not compared (the per-tensor table compares at the run's d).
// The trainer's --memory-report prints both (print_memory_report, recompute/other_reports.h), and
// test/model/test_memory.cu checks the very same comparison, so the test checks what the trainer prints.
#pragma once
#include <cstdio>
#include "memory_report.h"

struct Table2Comparison {
    Table2Row row = Table2Row::NoParallel;
    const AttentionCoreMemory* core = nullptr;  // the row's variant for another attention core (nullptr: paper's)
    const char* name = "";       // the paper's wording of the row
    const char* formula = "";    // in the paper's symbols
    double s = 0;                // the s the row is evaluated at: the rank's tokens (MemoryReport::shape.s)
    double row_bytes = 0;        // the row's value at the run's shape (d = 2)
    double shard = 1;            // 1/t for full recompute under SP (each rank keeps its shard), else 1
    double expected = 0;         // row_bytes · shard: one layer of one micro-batch
    double measured = 0;         // MemoryReport::per_layer_measured
    bool comparable = false;     // d == 2: Table 2's bytes per element
    int in_flight_layers = 1;    // layer-micro-batches the stage holds (1: one layer of one micro-batch)
    double stage_expected = 0, stage_measured = 0;  // the stage's layers: in_flight_layers · expected, measured
    bool equal() const { return comparable && measured == expected && stage_measured == stage_expected; }
};

// One layer's saved tensors (the stage's first layer, one micro-batch): measured, formula, difference; the
// total, and the layer-norm statistics the paper ignores.
void print_layer_table(FILE* f, const MemoryReport& r);
Table2Comparison table2_compare(const MemoryReport& r);
// The comparison's lines, as --memory-report prints them.
void print_table2_comparison(FILE* f, const MemoryReport& r, const Table2Comparison& c);
