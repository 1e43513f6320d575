# Communicator tests (parallel/comm.cu, collectives.cu, point_to_point.cu, gpu_identity.cu). The CPU test runs the MPI backend on 2
# and 4 ranks (the second registration reuses the executable); the GPU test runs the MPI backend staging
# CUDA tensors on 2 ranks that may share one GPU, and a 1-rank NCCL communicator. Without a GPU every rank
# exits 77 (skipped).
mm_test(test_comm SOURCES test/parallel/test_comm.cu MODULES comm collectives point_to_point gpu_identity pipeline_schedule zero_bubble_schedule trace runtime LABELS mpi NP 2 TIMEOUT 120)
mm_test(test_comm_np4 EXE test_comm LABELS mpi NP 4 TIMEOUT 120)
# Expected failures of the point-to-point rules (parallel/point_to_point.h): messages received out of their send order
# are caught by the order check; a peer that never receives is reported by the timeout. Every rank stops.
function(mm_comm_error name regex)
  add_test(NAME ${name} COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh "${regex}" ${MM_MPIRUN} -np 2 $<TARGET_FILE:test_comm> ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 90 ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
endfunction()
mm_comm_error(test_comm_order_mismatch "message order broken: rank 1 expected the second message from rank 0 .tag 8" --order-mismatch)
# all_gather_async while an exchange is in flight on the same communicator (on NCCL they share its events).
mm_comm_error(test_comm_gather_during_exchange "all_gather_async while the exchange of the ring's K is in flight.*exchange_finish"
              --gather-during-exchange)
mm_comm_error(test_comm_timeout "rank 0 .*waited 1.0 s .--comm-timeout. for the send of x to rank 1" --silent-peer)
mm_test(test_gpu_comm SOURCES test/parallel/test_gpu_comm.cu MODULES comm collectives point_to_point gpu_identity pipeline_schedule zero_bubble_schedule trace runtime LABELS gpu NP 2 ARGS mpi
        TIMEOUT 180)
mm_test(test_gpu_comm_nccl EXE test_gpu_comm LABELS gpu NP 1 ARGS nccl TIMEOUT 180)
# Two ranks on NCCL: with a GPU each, the collectives and the grouped ring exchange on a real NCCL group;
# with one GPU shared they would be refused, so the test says so and checks nothing more.
mm_test(test_gpu_comm_nccl_np2 EXE test_gpu_comm LABELS gpu NP 2 ARGS nccl TIMEOUT 180)
# The process grid (parallel/process_grid.cu): rank arithmetic and group membership for every tp dividing 1, 2
# and 4 ranks, and grid_validate's messages for the layouts it refuses.
mm_test(test_process_grid SOURCES test/parallel/test_process_grid.cu MODULES process_grid comm collectives gpu_identity trace runtime
        LABELS mpi NP 1 TIMEOUT 120)
mm_test(test_process_grid_np2 EXE test_process_grid LABELS mpi NP 2 TIMEOUT 120)
mm_test(test_process_grid_np4 EXE test_process_grid LABELS mpi NP 4 TIMEOUT 120)
