// test_recompute.cu — none, selective and full recomputation give BITWISE identical losses and gradients
// (same kernels on the same inputs; dropout masks are a function of global coordinates), over several
// optimizer steps, with dropout on.   test_recompute --tp T [--sp] [--device cpu|cuda] [--dtype fp32|bf16]
//                                    [--attention flash] [--seq S] [--cp C] [--comm mpi-strict]
// Under flash attention, selective recompute has nothing to drop (it runs exactly what none runs) and full
// recompute reruns the tiled forward: the three are bitwise identical there as well. Under context parallelism
// (--cp, world = tp × cp) full recompute reruns ring attention, the ring's exchanges included.
#include <cstring>
#include "model_fixture.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    ModelSpec spec;
    spec.cfg = tiny_config();
    int S = 16;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tp")) spec.tp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sp")) spec.sp = true;
        else if (!strcmp(argv[i], "--device")) spec.device = !strcmp(argv[++i], "cuda") ? Device::CUDA : Device::CPU;
        else if (!strcmp(argv[i], "--dtype")) spec.dtype = !strcmp(argv[++i], "bf16") ? DType::BF16 : DType::F32;
        else if (!strcmp(argv[i], "--attention")) parse_attention(argv[++i], &spec.attention);
        else if (!strcmp(argv[i], "--seq")) S = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cp")) spec.cp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--comm") && !strcmp(argv[++i], "mpi-strict")) spec.rules.strict = true;
    }
    spec.cfg.max_seq = std::max(spec.cfg.max_seq, S);
    if (spec.device == Device::CUDA) {
        int ok = cuda_available() ? 1 : 0, all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all) {
            if (rank == 0) printf("test_recompute: no CUDA GPU visible, skipping\n");
            MPI_Finalize();
            return 77;
        }
        // Several ranks on one GPU go through the MPI backend (NCCL refuses to share a GPU).
    }
    const int B = 4, steps = 3;
    Recompute policies[3] = {Recompute::None, Recompute::Selective, Recompute::Full};
    std::vector<float> grads[3], params[3];
    std::vector<float> losses[3];
    for (int p = 0; p < 3; p++) {
        ModelSpec s = spec;
        s.rc = policies[p];
        ModelHarness h(s, MPI_COMM_WORLD);
        loss_and_grads(h, B, S, 1, grads[p]);
        losses[p] = loss_curve(h, B, S, steps);
        gpt_gather_full(h.model, params[p]);
    }
    if (rank == 0) {
        printf("test_recompute: tp %d sp %s %s/%s, %s attention, S %d: losses", spec.tp, spec.sp ? "on" : "off",
               device_name(spec.device), dtype_name(spec.dtype), attention_name(spec.attention), S);
        for (int p = 0; p < 3; p++) printf(" %s=%.9g", recompute_name(policies[p]), losses[p].back());
        printf("\n");
        for (int p = 1; p < 3; p++) {
            CHECK(bitwise_equal(grads[p], grads[0]), "%s gradients differ from none (rel %.3e)", recompute_name(policies[p]),
                  norm_rel_err(grads[p], grads[0]));
            CHECK(bitwise_equal(losses[p], losses[0]), "%s losses differ from none", recompute_name(policies[p]));
            CHECK(bitwise_equal(params[p], params[0]), "%s parameters after %d steps differ from none", recompute_name(policies[p]), steps);
        }
    }
    int failed = rank == 0 ? test_finish("test_recompute") : 0;
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failed;
}
