// test_equivalence.cu — the parallel layout never changes the math.
//
// Run under mpirun with world = tp × dp (× pp) ranks: every rank builds the parallel model; rank 0 also builds the
// single-rank model (on MPI_COMM_SELF) and feeds it the whole global batch. With dropout on (counter-based
// masks keyed by global coordinates), the loss and the full gathered gradients must agree within float
// reassociation, and so must a 20-step loss curve.
//   test_equivalence --tp T [--sp] [--device cpu|cuda] [--dtype fp32|bf16] [--steps N]
//                    [--expect-fail-without-sp-sum]   (negative control: drop the SP gradient sum, expect a mismatch)
//                    [--micro M]   the parallel run as M micro-batches per DP rank (gradient accumulation),
//                                  against the single-rank run of the whole batch at once
//                    [--expect-fail-without-micro-scale]   (negative control: drop the 1/M, expect gradients M times
//                                  too large)
//                    [--recompute none|selective|full]   both runs' policy (default none)
//                    [--pp P] [--schedule afab|1f1b|interleaved|zb-h1|zb-h2] [--chunks m]   pipeline parallelism (a 4-layer model);
//                                  world = tp × dp × pp
//                    [--expect-fail-without-tied-sum]   (negative control: drop the tied embedding's gradient sum
//                                  over the first and last stage, expect a mismatch)
//                    [--expect-fail-without-w]   (negative control, zero-bubble schedules: micro-batch 0's W pass
//                                  throws its weight gradients away, expect a mismatch)
//                    [--attention flash]   both runs with flash attention (layers/flash_attention.h)
//                    [--reference-attention unfused|flash]   the single-rank run's attention (default: the same);
//                                  flash against unfused compares the two paths: the same dropout masks, so
//                                  the same losses within float rounding
//                    [--seq S]     sequence length (default 16; > 64 gives flash attention several tiles)
//                    [--cp C]      context parallelism (needs --attention flash): world = tp × cp × dp × pp; the
//                                  single-rank reference runs flash attention on the whole sequence
//                    [--bitwise]   tp 1: the reference also runs M micro-batches (one after another: 1F1B on
//                                  one rank); everything but the tied word embedding must then be bitwise
//                                  equal (its two uses' gradients are summed in another order: within float
//                                  rounding). The run must differ from its reference (in pp, dp or the
//                                  schedule): a configuration compared with itself proves nothing and fails.
#include <cstring>
#include "model_fixture.h"
#include "../../model/zero_model.h"
#include "../../parallel/gpu_identity.h"

// Flags for the communication layer (parallel/comm.h) and larger pipelines:
//   [--comm nccl]   the parallel run on NCCL (--device cuda, one GPU per rank; skipped when the ranks would
//                   share a GPU), the order check on
//   [--comm mpi-strict] [--comm-timeout S]   the parallel run's MPI backend with NCCL's point-to-point rules,
//                   the order check on, and a timeout (default 60 s)
//   [--skip-cp-ring-wait]   (negative control, --cp 2 --comm nccl on a GPU: ring attention reads a received block
//                   without waiting for it; expected to fail)
//   [--no-order-check]   (after --comm) no order-check headers: on NCCL their read-back synchronizes the host
//                   with every exchange, which would hide a missing stream wait
//   [--ungrouped-p2p]   (negative control, with --comm mpi-strict: the pipeline's messages in the order before
//                   grouping; expected to time out, under test/expect_error.sh)
//   [--distributed-optimizer]   ZeRO-1 over the DP group
//   [--zero 2|3]    ZeRO-2 (gradients sharded too) or ZeRO-3 (and the weights) over the DP (× CP) group
//   [--batch B]     global batch (default 4; 8 gives --pp 4 eight micro-batches)

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ModelSpec par;
    par.cfg = tiny_config();
    int steps = 20;
    bool negative = false, negative_micro = false, negative_tied = false, negative_w = false, bitwise = false;
    int micro = 1, B = 4, S = 16;  // S divisible by tp = 4 (sequence shards); B divisible by dp
    bool ref_attention_given = false;
    Attention ref_attention = Attention::Unfused;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tp")) par.tp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sp")) par.sp = true;
        else if (!strcmp(argv[i], "--device")) par.device = !strcmp(argv[++i], "cuda") ? Device::CUDA : Device::CPU;
        else if (!strcmp(argv[i], "--dtype")) par.dtype = !strcmp(argv[++i], "bf16") ? DType::BF16 : DType::F32;
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--expect-fail-without-sp-sum")) negative = true;
        else if (!strcmp(argv[i], "--micro")) micro = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--expect-fail-without-micro-scale")) negative_micro = true;
        else if (!strcmp(argv[i], "--pp")) par.pp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cp")) par.cp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chunks")) par.chunks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--expect-fail-without-tied-sum")) negative_tied = true;
        else if (!strcmp(argv[i], "--expect-fail-without-w")) negative_w = g_test_hooks.drop_first_weight_pass = true;
        else if (!strcmp(argv[i], "--bitwise")) bitwise = true;
        else if (!strcmp(argv[i], "--comm")) {
            const char* v = argv[++i];
            par.backend = !strcmp(v, "nccl") ? CommBackend::NCCL : CommBackend::MPI;
            par.rules.strict = !strcmp(v, "mpi-strict");
            par.rules.check_order = par.rules.strict || par.backend == CommBackend::NCCL;
            if (par.rules.strict && par.rules.timeout_s == 0) par.rules.timeout_s = 60;
        } else if (!strcmp(argv[i], "--comm-timeout")) par.rules.timeout_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ungrouped-p2p")) g_test_hooks.ungrouped_p2p = true;
        else if (!strcmp(argv[i], "--skip-cp-ring-wait")) g_test_hooks.skip_cp_ring_wait = true;  // negative control
        else if (!strcmp(argv[i], "--no-order-check")) par.rules.check_order = false;  // after --comm
        else if (!strcmp(argv[i], "--distributed-optimizer")) par.distributed_optimizer = true;
        else if (!strcmp(argv[i], "--zero")) par.zero = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch")) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seq")) S = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--attention")) parse_attention(argv[++i], &par.attention);
        else if (!strcmp(argv[i], "--reference-attention")) ref_attention_given = parse_attention(argv[++i], &ref_attention);
        else if (!strcmp(argv[i], "--recompute")) {  // both runs (the reference copies the spec)
            const char* v = argv[++i];
            par.rc = !strcmp(v, "full") ? Recompute::Full : !strcmp(v, "selective") ? Recompute::Selective : Recompute::None;
        } else if (!strcmp(argv[i], "--schedule")) {
            const char* v = argv[++i];
            par.schedule = !strcmp(v, "afab") ? PipeSchedule::AFAB : !strcmp(v, "interleaved") ? PipeSchedule::Interleaved
                         : !strcmp(v, "zb-h1") ? PipeSchedule::ZeroBubbleH1 : !strcmp(v, "zb-h2") ? PipeSchedule::ZeroBubbleH2
                                                                                 : PipeSchedule::OneFOneB;
        }
    }
    if (par.pp > 1) par.cfg = tiny_config(std::max(4, par.pp * par.chunks));  // a layer per virtual stage, at least 4
    par.cfg.max_seq = std::max(par.cfg.max_seq, S);
    if (par.device == Device::CUDA) {
        int ok = cuda_available() ? 1 : 0, all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all) {
            if (rank == 0) printf("test_equivalence: no CUDA GPU visible, skipping\n");
            MPI_Finalize();
            return 77;
        }
    }
    if (par.backend == CommBackend::NCCL) {
        // NCCL needs a GPU per rank: with fewer GPUs than ranks there is nothing to test here.
        int ndev = 0;
        CUDA_CHECK(cudaGetDeviceCount(&ndev));
        const std::string shared = shared_gpu_error(gather_gpu_identities(MPI_COMM_WORLD, local_rank(MPI_COMM_WORLD).rank % ndev));
        if (!shared.empty()) {
            if (rank == 0) printf("test_equivalence: --comm nccl needs a GPU per rank, skipping (%s)\n", shared.c_str());
            MPI_Finalize();
            return 77;
        }
    }
    int dp = world / (par.tp * par.cp * par.pp);
    ModelSpec ref = par;
    ref.tp = 1;
    ref.cp = 1;
    ref.sp = false;
    ref.pp = 1;
    ref.chunks = 1;
    ref.schedule = PipeSchedule::OneFOneB;
    if (ref_attention_given) ref.attention = ref_attention;
    const int ref_micro = bitwise ? micro * dp : 1;  // bitwise: the same micro-batches, one after another
    if (bitwise && par.tp == 1 && dp == 1 && par.pp == 1 && par.schedule == ref.schedule && par.attention == ref.attention) {
        if (rank == 0) printf("test_equivalence: --bitwise with tp 1, dp 1, pp 1 and the 1f1b schedule compares the "
                              "reference with itself; give another layout or --schedule afab\n");
        MPI_Finalize();
        return 1;
    }
    if (rank == 0)
        printf("test_equivalence: %s attention (single rank: %s), S %d\n", attention_name(par.attention),
               attention_name(ref.attention), S);
    if (rank == 0)
        printf("test_equivalence: tp %d cp %d dp %d pp %d (%s, %d chunk%s) sp %s%s, %d micro-batch%s per rank, on %s/%s vs single rank%s, "
               "dropout %.2f%s%s\n", par.tp, par.cp, dp, par.pp, pipe_schedule_name(par.schedule), par.chunks, par.chunks > 1 ? "s" : "",
               par.sp ? "on" : "off", par.zero >= 2 ? (par.zero == 2 ? ", ZeRO-2" : ", ZeRO-3") : par.distributed_optimizer ? ", ZeRO-1" : "", micro, micro > 1 ? "es" : "", device_name(par.device), dtype_name(par.dtype),
               bitwise ? " with the same micro-batches" : "", par.dropout, par.rules.strict ? ", --comm mpi-strict" : "",
               negative ? " (negative control: no SP grad sum)" : negative_micro ? " (negative control: no 1/M)"
               : negative_tied ? " (negative control: no tied-embedding grad sum)"
               : negative_w ? " (negative control: the first W pass dropped)" : "");

    // One step: loss and gradients.
    std::vector<float> g_par, g_ref;
    float l_par, l_ref = 0;
    {
        ModelHarness h(par, MPI_COMM_WORLD);
        g_test_hooks.skip_microbatch_scale = negative_micro;
        l_par = loss_and_grads(h, B, S, 1, g_par, !negative, micro, !negative_tied);
        g_test_hooks.skip_microbatch_scale = false;
    }
    if (rank == 0) {
        ModelHarness h(ref, MPI_COMM_SELF);
        l_ref = loss_and_grads(h, B, S, 1, g_ref, true, ref_micro);
    }
    // bf16 activations: the parallel run rounds partial sums differently, so compare within bf16 tolerance.
    const double tol = par.dtype == DType::F32 ? 1e-5 : 2e-2;
    int failed = 0;
    if (rank == 0) {
        double lerr = std::fabs(l_par - l_ref) / std::fabs(l_ref);
        double gerr = norm_rel_err(g_par, g_ref);
        // Per tensor as well: a wrong sum on one small tensor (a layer norm) barely moves the global norm.
        int64_t sizes[NUM_PARAM_TENSORS];
        param_sizes(par.cfg, sizes);
        int64_t off = 0;
        double worst = 0;
        const char* worst_name = "";
        int not_bitwise = 0;
        for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
            std::vector<float> a(g_par.begin() + off, g_par.begin() + off + sizes[id]);
            std::vector<float> b(g_ref.begin() + off, g_ref.begin() + off + sizes[id]);
            double e = norm_rel_err(a, b);
            if (e > worst) { worst = e; worst_name = param_name(id); }
            if (bitwise && id != P_WTE && memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) {
                printf("  %s: not bitwise equal (rel %.2e)\n", param_name(id), e);
                not_bitwise++;
            }
            off += sizes[id];
        }
        if (bitwise) {
            CHECK(not_bitwise == 0, "%d gradient tensors are not bitwise equal to the single-rank accumulation", not_bitwise);
            CHECK(l_par == l_ref, "loss %.9g is not bitwise the single-rank accumulation's %.9g", l_par, l_ref);
        }
        printf("  step 1: loss %.7f vs %.7f (rel %.2e); gradients rel %.2e, worst tensor %s %.2e\n", l_par, l_ref, lerr, gerr,
               worst_name, worst);
        bool ok = lerr <= tol && worst <= (par.dtype == DType::F32 ? 1e-4 : 5e-2);
        if (negative || negative_tied || negative_w) {
            CHECK(!ok, "dropping the %s must break the equivalence (worst %s %.2e)",
                  negative ? "SP gradient sum" : negative_tied ? "tied-embedding gradient sum" : "first W pass", worst_name, worst);
        } else if (negative_micro) {
            // Without the 1/M every micro-batch's gradient counts as a whole batch's: M times too large.
            double np = 0, nr = 0;
            for (size_t i = 0; i < g_par.size(); i++) np += (double)g_par[i] * g_par[i], nr += (double)g_ref[i] * g_ref[i];
            const double ratio = std::sqrt(np / nr);
            printf("  without the 1/M: gradient norm %.4f times the single-rank one (M = %d)\n", ratio, micro);
            CHECK(!ok && std::fabs(ratio - micro) < 1e-3 * micro, "gradients without 1/M: %.5f times, expected %d", ratio, micro);
        } else {
            CHECK(lerr <= tol, "loss differs: %.8f vs %.8f", l_par, l_ref);
            CHECK(worst <= (par.dtype == DType::F32 ? 1e-4 : 5e-2), "gradient of %s differs: rel %.3e", worst_name, worst);
        }
    }
    // Loss curve over `steps` optimizer steps.
    if (!negative && !negative_micro && !negative_tied && !negative_w && steps > 0) {
        std::vector<float> c_par, c_ref;
        {
            ModelHarness h(par, MPI_COMM_WORLD);
            c_par = loss_curve(h, B, S, steps, micro);
            // The first and the last stage each hold a copy of the tied word embedding: after training they must
            // still be bitwise equal (the same summed gradient, the same update).
            if (par.pp > 1 && h.grid.emb_comm.size == 2) {
                GPT& m = h.model;  // (ZeRO-2/3: the master is a shard; its whole local values hold the copy)
                std::vector<float> local = zero_sharded(m) ? zero_local_values(weight_comm(h.grid), m.sharded, m.master) : tensor_to_host_f32(m.master);
                std::vector<float> mine(local.begin() + m.offsets[P_WTE], local.begin() + m.offsets[P_WTE] + m.sizes[P_WTE]);
                std::vector<float> both(2 * mine.size());
                MPI_Allgather(mine.data(), (int)mine.size(), MPI_FLOAT, both.data(), (int)mine.size(), MPI_FLOAT, h.grid.emb_comm.mpi);
                int same = memcmp(both.data(), both.data() + mine.size(), mine.size() * sizeof(float)) == 0, all = 0;
                MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, h.grid.emb_comm.mpi);
                if (h.grid.pp_rank == 0) {
                    CHECK(all == 1, "rank %d: the first and last stage's word embeddings differ after %d steps", rank, steps);
                    if (rank == 0 && all) printf("  the first and last stage's copies of the word embedding: bitwise equal after %d steps\n", steps);
                }
            }
        }
        if (rank == 0) {
            ModelHarness h(ref, MPI_COMM_SELF);
            c_ref = loss_curve(h, B, S, steps, ref_micro);
            double worst = 0;
            for (int i = 0; i < steps; i++) worst = std::max(worst, (double)std::fabs(c_par[i] - c_ref[i]) / std::fabs(c_ref[i]));
            printf("  %d-step loss curve: %.5f -> %.5f (single rank %.5f -> %.5f), worst rel diff %.2e\n", steps, c_par[0],
                   c_par[steps - 1], c_ref[0], c_ref[steps - 1], worst);
            // Flash against unfused (the issue's bar): 1e-5 relative at every step, as the two paths drop the same
            // probabilities; a single differing keep bit moves a loss by far more.
            // Context parallelism (the issue's bar): 1e-6 relative at every step, dropout on, against one rank's
            // flash attention: the same masks by global position, only the blocks' merge order differs.
            const double curve_tol = par.dtype != DType::F32 ? 3e-2 : par.cp > 1 ? 1e-6
                                     : par.attention != ref.attention ? 1e-5 : 1e-4;
            CHECK(worst <= curve_tol, "loss curves differ: worst rel %.3e (allowed %.0e)", worst, curve_tol);
            if (steps >= 20) CHECK(c_par[steps - 1] < c_par[0], "loss did not fall over %d steps", steps);
        }
    }
    if (rank == 0) failed = test_finish("test_equivalence");
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failed;
}
