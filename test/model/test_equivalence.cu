// test_equivalence.cu — the parallel layout never changes the math.
//
// Run under mpirun with world = tp × dp ranks: every rank builds the parallel model; rank 0 also builds the
// single-rank model (on MPI_COMM_SELF) and feeds it the whole global batch. With dropout on (counter-based
// masks keyed by global coordinates), the loss and the full gathered gradients must agree within float
// reassociation, and so must a 20-step loss curve.
//   test_equivalence --tp T [--sp] [--device cpu|cuda] [--dtype fp32|bf16] [--steps N]
//                    [--expect-fail-without-sp-sum]   (negative control: drop the SP gradient sum, expect a mismatch)
//                    [--micro M]   the parallel run as M micro-batches per DP rank (gradient accumulation),
//                                  against the single-rank run of the whole batch at once
//                    [--expect-fail-without-micro-scale]   (negative control: drop the 1/M, expect gradients M times
//                                  too large)
#include <cstring>
#include "model_fixture.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ModelSpec par;
    par.cfg = tiny_config();
    int steps = 20;
    bool negative = false, negative_micro = false;
    int micro = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tp")) par.tp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sp")) par.sp = true;
        else if (!strcmp(argv[i], "--device")) par.device = !strcmp(argv[++i], "cuda") ? Device::CUDA : Device::CPU;
        else if (!strcmp(argv[i], "--dtype")) par.dtype = !strcmp(argv[++i], "bf16") ? DType::BF16 : DType::F32;
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--expect-fail-without-sp-sum")) negative = true;
        else if (!strcmp(argv[i], "--micro")) micro = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--expect-fail-without-micro-scale")) negative_micro = true;
    }
    if (par.device == Device::CUDA) {
        int ok = cuda_available() ? 1 : 0, all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all) {
            if (rank == 0) printf("test_equivalence: no CUDA GPU visible, skipping\n");
            MPI_Finalize();
            return 77;
        }
    }
    const int B = 4, S = 16;  // S divisible by tp = 4 (sequence shards), B divisible by dp
    int dp = world / par.tp;
    ModelSpec ref = par;
    ref.tp = 1;
    ref.sp = false;
    if (rank == 0)
        printf("test_equivalence: tp %d dp %d sp %s, %d micro-batch%s per rank, on %s/%s vs single rank, dropout %.2f%s\n", par.tp,
               dp, par.sp ? "on" : "off", micro, micro > 1 ? "es" : "", device_name(par.device), dtype_name(par.dtype), par.dropout,
               negative ? " (negative control: no SP grad sum)" : negative_micro ? " (negative control: no 1/M)" : "");

    // One step: loss and gradients.
    std::vector<float> g_par, g_ref;
    float l_par, l_ref = 0;
    {
        ModelHarness h(par, MPI_COMM_WORLD);
        g_test_hooks.skip_microbatch_scale = negative_micro;
        l_par = loss_and_grads(h, B, S, 1, g_par, !negative, micro);
        g_test_hooks.skip_microbatch_scale = false;
    }
    if (rank == 0) {
        ModelHarness h(ref, MPI_COMM_SELF);
        l_ref = loss_and_grads(h, B, S, 1, g_ref);
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
        for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
            std::vector<float> a(g_par.begin() + off, g_par.begin() + off + sizes[id]);
            std::vector<float> b(g_ref.begin() + off, g_ref.begin() + off + sizes[id]);
            double e = norm_rel_err(a, b);
            if (id == P_WTE) {  // padded rows have zero gradient in both: norm_rel_err handles it
            }
            if (e > worst) { worst = e; worst_name = param_name(id); }
            off += sizes[id];
        }
        printf("  step 1: loss %.7f vs %.7f (rel %.2e); gradients rel %.2e, worst tensor %s %.2e\n", l_par, l_ref, lerr, gerr,
               worst_name, worst);
        bool ok = lerr <= tol && worst <= (par.dtype == DType::F32 ? 1e-4 : 5e-2);
        if (negative) {
            CHECK(!ok, "dropping the SP gradient sum must break the equivalence (worst %s %.2e)", worst_name, worst);
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
    if (!negative && !negative_micro && steps > 0) {
        std::vector<float> c_par, c_ref;
        {
            ModelHarness h(par, MPI_COMM_WORLD);
            c_par = loss_curve(h, B, S, steps, micro);
        }
        if (rank == 0) {
            ModelHarness h(ref, MPI_COMM_SELF);
            c_ref = loss_curve(h, B, S, steps);
            double worst = 0;
            for (int i = 0; i < steps; i++) worst = std::max(worst, (double)std::fabs(c_par[i] - c_ref[i]) / std::fabs(c_ref[i]));
            printf("  %d-step loss curve: %.5f -> %.5f (single rank %.5f -> %.5f), worst rel diff %.2e\n", steps, c_par[0],
                   c_par[steps - 1], c_ref[0], c_ref[steps - 1], worst);
            CHECK(worst <= (par.dtype == DType::F32 ? 1e-4 : 3e-2), "loss curves differ: worst rel %.3e", worst);
            if (steps >= 20) CHECK(c_par[steps - 1] < c_par[0], "loss did not fall over %d steps", steps);
        }
    }
    if (rank == 0) failed = test_finish("test_equivalence");
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failed;
}
