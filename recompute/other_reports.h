// other_reports.h — what --memory-report prints around the paper's Table 2 comparison (recompute/table2.h),
// and the report's travel: the run's header lines (the pipeline stage and its micro-batches in flight, context
// parallelism, the flash attention note), §4.3's terms outside the layers and the whole model on this rank, the
// allocator's high-water marks, the model states (weights, gradients, master weights, moments: measured next
// to their formula, recompute/model_state_memory.h), the GPU's memory in use, the JSON record for --log, and
// the reports of every pipeline stage brought to rank 0. A new report beyond the paper goes here, as a
// function of its own called from print_memory_report, so that the Table 2 comparison stays apart.
#pragma once
#include <mpi.h>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>
#include "memory_report.h"
#include "model_state_memory.h"

// The model states of a MemoryReport (its model_states): measured (the model's tagged account), and their
// formula.
struct ModelStateReport {
    ModelStateMemory measured;
    ModelStateFormula formula;
};

// Add the model states to a report: `measured` is the model's tagged account (GPT::state_memory). The report
// then also prints the rank's whole account (layers/rank_memory.h) as the step left it: every kind at the high-
// water mark of their sum, the total "on this rank" (RankMemory::total_at_peak, which equals that mark).
void add_model_state(MemoryReport& r, const ModelStateMemory& measured, const ModelStateFormula& formula);

// The process's resident memory from /proc/self/status (VmHWM, VmRSS; bytes): false when unreadable. On the
// CPU device the "device" is this memory.
bool process_resident(double* hwm, double* rss);

// The whole report, as --memory-report prints it: the header lines, the Table 2 comparison, then the rest.
void print_memory_report(FILE* f, const MemoryReport& r);
std::string memory_report_json(const MemoryReport& r);  // one JSON object (the value of "memory_report")

// The reports of every pipeline stage, brought to world rank 0 (collective over `world`). Each stage reaches
// its peak at another moment of the schedule, and no stage may wait on another in the middle of it, so each
// keeps its report (text and JSON) and they travel after the step. Stage s's report is that of its first
// rank, world rank s · ranks_per_stage (parallel/process_grid.h's order). On rank 0 the result holds pp
// (text, json) pairs in stage order; elsewhere it is empty.
std::vector<std::pair<std::string, std::string>> gather_stage_reports(const std::string& text, const std::string& json, int pp,
                                                                      int ranks_per_stage, MPI_Comm world);
