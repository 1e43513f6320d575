// test_sp_comm_bytes.cu — the paper's "no communication overhead" argument (§4.2.2), counted.
//
// One transformer layer, forward and backward, at tp = world: plain TP does 4 all-reduces; TP + SP does
// 4 all-gathers + 4 reduce-scatters, which move the same bytes (a ring all-reduce is a reduce-scatter then
// an all-gather). SP's column-parallel layers additionally re-gather their saved input shards in backward
// (the price of storing only 1/t of them); those re-gathers are counted apart and reported.
#include <cstring>
#include "model_fixture.h"

struct Counted { CommCounters c; uint64_t regather; };

static Counted run_layer(bool sp, int tp) {
    ModelSpec s;
    s.cfg = tiny_config(1, 4, 32, 61, 64, 32);
    s.tp = tp;
    s.sp = sp;
    s.dropout = 0.1f;
    ModelHarness h(s, MPI_COMM_WORLD);
    GPT& m = h.model;
    const int B = 2, S = 16;
    // Build one layer's run exactly as the model does, on a random input of the right (shard) shape.
    Batch b = make_batch(s.cfg, B, S, 1, 1, 0);
    gpt_forward(m, b.inputs.data(), b.targets.data(), B, S, false);  // sets up the step's shapes
    LayerContext run = gpt_layer_context(m, 0);
    int rows = run.S_loc * B;
    Tensor x = h.alloc->alloc(DType::F32, (int64_t)rows * s.cfg.channels, 0, "ln1_in");
    std::mt19937 rng(7);
    std::vector<float> xv = random_vec((size_t)x.n, rng);
    tensor_from_host_f32(x, xv.data());
    Tensor out = h.alloc->alloc(DType::F32, x.n, 1, "ln1_in");
    SavedLayer saved;
    saved.ln1_in = x;
    h.grid.tp_comm.counters.reset();
    layer_forward(run, saved, out, Recompute::None);
    Tensor dres = out;  // reuse as the incoming gradient
    layer_backward(run, saved, dres, Recompute::None);
    h.alloc->release(out);
    Counted r{h.grid.tp_comm.counters, h.grid.tp_comm.counters.regather_bytes};
    return r;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    Counted tp = run_layer(false, world), sp = run_layer(true, world);
    if (rank == 0) {
        auto line = [](const char* name, const Counted& c) {
            printf("  %-8s", name);
            for (int k = 0; k < kNumCollectives; k++)
                printf(" %s %llu x %llu B |", collective_name(k), (unsigned long long)c.c.calls[k], (unsigned long long)c.c.bytes[k]);
            printf(" re-gather %llu B\n", (unsigned long long)c.regather);
        };
        printf("test_sp_comm_bytes: one layer, forward + backward, t = %d (ring-model bytes sent per rank)\n", world);
        line("TP", tp);
        line("TP+SP", sp);
        uint64_t tp_bytes = tp.c.bytes[kAllReduce];
        uint64_t sp_bytes = sp.c.bytes[kAllGather] - sp.regather + sp.c.bytes[kReduceScatter];
        CHECK(tp.c.calls[kAllReduce] == 4, "TP: %llu all-reduces per layer, expected 4", (unsigned long long)tp.c.calls[kAllReduce]);
        CHECK(tp.c.calls[kAllGather] == 0 && tp.c.calls[kReduceScatter] == 0, "TP: unexpected all-gather / reduce-scatter");
        CHECK(sp.c.calls[kAllReduce] == 0, "SP: %llu all-reduces, expected none", (unsigned long long)sp.c.calls[kAllReduce]);
        CHECK(sp.c.calls[kReduceScatter] == 4, "SP: %llu reduce-scatters, expected 4", (unsigned long long)sp.c.calls[kReduceScatter]);
        CHECK(sp.c.calls[kAllGather] == 6, "SP: %llu all-gathers, expected 4 + 2 re-gathers", (unsigned long long)sp.c.calls[kAllGather]);
        CHECK(tp_bytes == sp_bytes, "bytes differ: TP %llu vs SP %llu", (unsigned long long)tp_bytes, (unsigned long long)sp_bytes);
        printf("  TP all-reduce bytes %llu == TP+SP all-gather + reduce-scatter bytes %llu (re-gathers for backward: %llu more)\n",
               (unsigned long long)tp_bytes, (unsigned long long)sp_bytes, (unsigned long long)sp.regather);
    }
    int failed = rank == 0 ? test_finish("test_sp_comm_bytes") : 0;
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failed;
}
