// data_parallel.cu — gradient averaging over the data-parallel group.
#include "data_parallel.h"

#include "../layers/adamw.h"

void average_gradients(Comm& dp, const Ctx& ctx, Tensor grads) {
    if (dp.size == 1) return;
    all_reduce(dp, ctx, grads, ReduceOp::SUM);
    scale_inplace(const_cast<Ctx&>(ctx), grads, 1.0f / dp.size);
}

double average_scalar(Comm& dp, double x) {
    if (dp.size == 1) return x;
    all_reduce_host(dp, &x, 1, MPI_DOUBLE, MPI_SUM, "all-reduce of a scalar over DP");
    return x / dp.size;
}
