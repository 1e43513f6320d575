# Communicator tests (parallel/comm.cu, parallel/gpu_identity.cu). The CPU test runs the MPI backend on 2
# and 4 ranks (the second registration reuses the executable); the GPU test runs the MPI backend staging
# CUDA tensors on 2 ranks that may share one GPU, and a 1-rank NCCL communicator. Without a GPU every rank
# exits 77 (skipped).
mm_test(test_comm SOURCES test/parallel/test_comm.cu MODULES comm gpu_identity runtime LABELS mpi NP 2 TIMEOUT 120)
mm_test(test_comm_np4 EXE test_comm LABELS mpi NP 4 TIMEOUT 120)
mm_test(test_gpu_comm SOURCES test/parallel/test_gpu_comm.cu MODULES comm gpu_identity runtime LABELS gpu NP 2 ARGS mpi
        TIMEOUT 180)
mm_test(test_gpu_comm_nccl EXE test_gpu_comm LABELS gpu NP 1 ARGS nccl TIMEOUT 180)
# The process grid (parallel/process_grid.cu): rank arithmetic and group membership for every tp dividing 1, 2
# and 4 ranks, and grid_validate's messages for the layouts it refuses.
mm_test(test_process_grid SOURCES test/parallel/test_process_grid.cu MODULES process_grid comm gpu_identity runtime
        LABELS mpi NP 1 TIMEOUT 120)
mm_test(test_process_grid_np2 EXE test_process_grid LABELS mpi NP 2 TIMEOUT 120)
mm_test(test_process_grid_np4 EXE test_process_grid LABELS mpi NP 4 TIMEOUT 120)
