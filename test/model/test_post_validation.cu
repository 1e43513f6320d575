// test_post_validation.cu — optimizer post-validation (model/post_validation.h) gives the synchronous step's
// weights and AdamW moments bit for bit, rollbacks included.
//
//   mpirun -np W test_post_validation [--tp T] [--pp P] [--schedule 1f1b|zb-h1|zb-h2|zb-v] [--micro M] [--steps N]
//                                     [--distributed-optimizer] [--sp]
//
// Three runs of N steps each, every one twice on the same layout and batches, synchronously (train_step) and
// post-validated (post_validated_step, then post_validation_settle): with no fault and a clip that never triggers;
// with the NaN injection at step 3 (layers/test_hooks.h: the synchronous step skips its update, the post-validated
// one rolls it back); with a clip threshold below most steps' norms (the synchronous step clips, the
// post-validated one rolls back and redoes the update with the clip's scale). For each: every step's loss, norm
// and verdict equal, the gathered weights and moments after the last step bitwise equal, and the rollbacks
// counted (0, 1, and as many as the synchronous run clipped). At the last post-validated step: --memory-report's
// rank total == the rank account's high-water mark, with the snapshot (16 bytes per fp32 parameter) in it.
#include <cstring>
#include "model_fixture.h"
#include "../../model/post_validation.h"
#include "../../recompute/other_reports.h"

// --memory-report's rank total (recompute/other_reports.h) == the high-water mark of the rank's whole account, and
// the snapshot is in it: its bytes == the model states' (it copies every one of them), counted at the peak.
static void check_rank_total(ModelHarness& h, const PostValidation& pv) {
    MemoryReport r;
    add_model_state(r, h.model.state_memory, gpt_model_state_formula(h.model));
    const RankMemory& a = rank_memory();
    int64_t snap = 0;
    for (const Tensor* t : {&pv.master, &pv.weights, &pv.adam_m, &pv.adam_v, &pv.grads}) snap += (int64_t)t->bytes();
    const int64_t states = h.model.state_memory.total();
    CHECK(a.total_at_peak() == a.peak_total, "the report's rank total %lld != the account's high-water mark %lld", (long long)a.total_at_peak(),
          (long long)a.peak_total);
    CHECK(snap == states && a.at_peak[(int)MemoryKind::Snapshot] == snap && a.live[(int)MemoryKind::Snapshot] == snap,
          "the snapshot holds %lld bytes (the states %lld); the account counts %lld at the peak, %lld now", (long long)snap,
          (long long)states, (long long)a.at_peak[(int)MemoryKind::Snapshot], (long long)a.live[(int)MemoryKind::Snapshot]);
    CHECK(a.peak_total >= (int64_t)h.alloc->peak_live_bytes() + states + snap,
          "the account's peak %lld holds less than the activation allocator's peak %zu + the states %lld + the snapshot %lld",
          (long long)a.peak_total, h.alloc->peak_live_bytes(), (long long)states, (long long)snap);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
        printf("  rank total at its peak %lld B: activations %lld + workspace %lld + states %lld + snapshot %lld\n", (long long)a.total_at_peak(),
               (long long)a.at_peak[(int)MemoryKind::Activations], (long long)a.at_peak[(int)MemoryKind::Workspace],
               (long long)a.at_peak[(int)MemoryKind::ModelStates], (long long)a.at_peak[(int)MemoryKind::Snapshot]);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ModelSpec spec;
    int micro = 4, steps = 6, B = 8;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tp")) spec.tp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pp")) spec.pp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sp")) spec.sp = true;
        else if (!strcmp(argv[i], "--micro")) micro = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--distributed-optimizer")) spec.distributed_optimizer = true;
        else if (!strcmp(argv[i], "--schedule")) {
            const char* v = argv[++i];
            spec.schedule = !strcmp(v, "zb-h1") ? PipeSchedule::ZeroBubbleH1 : !strcmp(v, "zb-h2") ? PipeSchedule::ZeroBubbleH2
                          : !strcmp(v, "zb-v") ? PipeSchedule::ZeroBubbleV : PipeSchedule::OneFOneB;
            spec.chunks = spec.schedule == PipeSchedule::ZeroBubbleV ? 2 : 1;
        }
    }
    spec.cfg = tiny_config(std::max(4, spec.pp * spec.chunks));
    spec.rules.strict = spec.rules.check_order = true;
    spec.rules.timeout_s = 60;
    const int S = 16, dp = world / (spec.tp * spec.pp);
    if (rank == 0)
        printf("test_post_validation: tp %d pp %d dp %d (%s), %d micro-batches, %d steps%s\n", spec.tp, spec.pp, dp,
               pipe_schedule_name(spec.schedule), micro, steps, spec.distributed_optimizer ? ", distributed optimizer" : "");

    struct Run {
        std::vector<StepStats> stats;
        std::vector<float> weights, adam_m, adam_v;
        int rollbacks = 0;
    };
    // One run: N steps, synchronous or post-validated, with the fault or the clip given.
    auto run = [&](bool post, int nan_step, float clip) {
        Run out;
        ModelHarness h(spec, MPI_COMM_WORLD);
        OptimConfig oc;
        oc.weight_decay = 0.01f;
        oc.grad_clip = clip;
        g_test_hooks.inject_nan_at_step = nan_step;
        PostValidation pv;
        for (int st = 1; st <= steps; st++) {
            Batch b = make_batch(h.model.cfg, B, S, st, h.grid.dp, h.grid.dp_rank);
            const float lr = 1e-2f;
            if (!post) {
                out.stats.push_back(train_step(h.model, b.inputs.data(), b.targets.data(), B / h.grid.dp, S, oc, st, lr, micro));
                continue;
            }
            if (st == steps) h.alloc->reset_peak();  // and the rank's whole account's (layers/activation_allocator.h)
            const StepStats v = post_validated_step(h.model, pv, b.inputs.data(), b.targets.data(), B / h.grid.dp, S, oc, st, lr, micro);
            if (v.step) out.stats.push_back(v);
            if (st == steps) check_rank_total(h, pv);
        }
        if (post)
            for (const StepStats& v : post_validation_settle(h.model, pv)) out.stats.push_back(v);
        out.rollbacks = pv.rollbacks;
        post_validation_free(pv);
        g_test_hooks.inject_nan_at_step = 0;
        gpt_gather_full(h.model, out.weights);
        gpt_gather_full_optimizer(h.model, out.adam_m, out.adam_v);
        return out;
    };
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    struct Case { const char* name; int nan_step; float clip; };
    // The clip: a threshold between the smallest and the largest norm the synchronous run sees (measured first).
    float clip = 0;
    {
        const Run probe = run(false, 0, 0.f);
        std::vector<float> norms;
        for (const StepStats& s : probe.stats) norms.push_back(s.grad_norm);
        std::sort(norms.begin(), norms.end());
        clip = norms[norms.size() / 2];
        if (rank == 0) printf("  norms %.4f .. %.4f: the clip threshold %.4f (their median)\n", norms.front(), norms.back(), clip);
    }
    const Case cases[] = {{"no fault, no clip", 0, 1e9f}, {"NaN injected at step 3", 3, 1e9f}, {"clip triggered", 0, clip}};
    for (const Case& c : cases) {
        const Run sync = run(false, c.nan_step, c.clip), post = run(true, c.nan_step, c.clip);
        int clipped = 0, skipped = 0;
        bool stats_equal = sync.stats.size() == post.stats.size();
        for (size_t i = 0; i < sync.stats.size() && stats_equal; i++) {
            const StepStats &a = sync.stats[i], &b = post.stats[i];
            stats_equal = a.step == b.step && a.applied == b.applied && memcmp(&a.loss, &b.loss, sizeof(float)) == 0 &&
                          memcmp(&a.grad_norm, &b.grad_norm, sizeof(float)) == 0;
            clipped += a.applied && a.grad_norm > c.clip;
            skipped += !a.applied;
        }
        if (rank == 0) {
            printf("  %-24s steps: %zu, skipped %d, clipped %d; post-validated rollbacks %d; weights %s, moments %s\n", c.name,
                   sync.stats.size(), skipped, clipped, post.rollbacks, same(sync.weights, post.weights) ? "bitwise equal" : "DIFFER",
                   same(sync.adam_m, post.adam_m) && same(sync.adam_v, post.adam_v) ? "bitwise equal" : "DIFFER");
            CHECK(stats_equal, "%s: every step's loss, norm and verdict equal", c.name);
            CHECK(same(sync.weights, post.weights), "%s: weights bitwise equal", c.name);
            CHECK(same(sync.adam_m, post.adam_m) && same(sync.adam_v, post.adam_v), "%s: AdamW moments bitwise equal", c.name);
            CHECK(post.rollbacks == skipped + clipped, "%s: %d rollbacks, expected %d (skipped) + %d (clipped)", c.name,
                  post.rollbacks, skipped, clipped);
            if (c.nan_step) CHECK(skipped == 1, "%s: the injected step skipped", c.name);
            if (c.clip < 1e8f) CHECK(clipped > 0 && clipped < steps, "%s: some steps clipped (%d)", c.name, clipped);
        }
    }
    int failed = rank == 0 ? test_finish("test_post_validation") : 0;
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failed;
}
