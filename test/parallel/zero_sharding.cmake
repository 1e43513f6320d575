# ZeRO-2 and ZeRO-3 (parallel/zero_sharding.cu, model/zero_model.cu): against ZeRO-1, bit for bit where the order
# allows; what they hold and move against recompute/memory_techniques.h; the NaN report. Against one rank over the
# layouts: the test_equivalence_zero* tests below.
mm_executable(test_zero_sharding SOURCES test/parallel/test_zero_sharding.cu)
# ZeRO-1 = ZeRO-2 = ZeRO-3 bit for bit at one micro-batch (dp 2; tp 2 x dp 2 with SP; bf16; pp 2 x dp 2; cp 2);
# with micro-batches ZeRO-2 = ZeRO-3 bit for bit and both within rounding of ZeRO-1.
mm_test(test_zero_sharding_dp2 EXE test_zero_sharding LABELS mpi NP 2 ARGS --compare)
mm_test(test_zero_sharding_dp2_bf16_micro2 EXE test_zero_sharding LABELS mpi NP 2 ARGS --compare --dtype bf16 --micro 2 --tolerance 1e-5)
mm_test(test_zero_sharding_tp2_dp2_sp EXE test_zero_sharding LABELS mpi NP 4 ARGS --compare --tp 2 --sp --recompute full --steps 4)
mm_test(test_zero_sharding_pp2_dp2_zbh1 EXE test_zero_sharding LABELS mpi NP 4 ARGS --compare --pp 2 --schedule zb-h1 --micro 2 --tolerance 1e-5 --steps 4)
mm_test(test_zero_sharding_cp2 EXE test_zero_sharding LABELS mpi NP 2 ARGS --compare --cp 2 --steps 4)
# ZB-V (stage 0 holds both ends of the V: no tied-embedding sum over the pipeline, model/zero_model.cu): ZeRO-2 and
# ZeRO-3 equal ZeRO-1, at one micro-batch per step bit for bit, at four within rounding.
mm_test(test_zero_sharding_pp2_dp2_zbv EXE test_zero_sharding LABELS mpi NP 4 ARGS --compare --pp 2 --schedule zb-v --steps 4)
mm_test(test_zero_sharding_pp2_dp2_zbv_micro4 EXE test_zero_sharding LABELS mpi NP 4 ARGS --compare --pp 2 --schedule zb-v --micro 4 --batch 8 --tolerance 1e-5 --steps 4)
# Measured == formula: model states, the gathered weights and gradient buckets at their peaks, the DP bytes (1x and
# 1.5x the all-reduce), per micro-batch, under full recompute, and under ZB-H1 (buckets held from B to W).
mm_test(test_zero_sharding_memory_dp2 EXE test_zero_sharding LABELS mpi NP 2 ARGS --memory)
mm_test(test_zero_sharding_memory_dp2_micro2_full EXE test_zero_sharding LABELS mpi NP 2 ARGS --memory --micro 2 --recompute full)
# At dp 3 every unit of this model is padded (the formula's padding comes from the model's shape, not the layout).
mm_test(test_zero_sharding_memory_dp3 EXE test_zero_sharding LABELS mpi NP 3 ARGS --memory --batch 6)
mm_test(test_zero_sharding_memory_pp2_dp2_zbh1 EXE test_zero_sharding LABELS mpi NP 4 ARGS --memory --pp 2 --schedule zb-h1 --micro 4 --batch 8)
mm_test(test_zero_sharding_nan_dp2 EXE test_zero_sharding LABELS mpi NP 2 ARGS --nan)
# Against one rank (test_equivalence, 3 steps, dropout on): every schedule (AFAB, 1F1B, interleaved, ZB-H1, ZB-H2,
# the pipelines under NCCL's point-to-point rules), TP 2 + SP, CP 2 (flash), micro-batches, bf16, every recompute
# policy (full: the backward's gather serves the rerun forward).
foreach(layout
    "zero3_tp2_dp2_sp_full|4|--tp 2 --sp --zero 3 --recompute full"
    "zero2_dp2_bf16_micro2_full|2|--tp 1 --dtype bf16 --micro 2 --zero 2 --recompute full"
    "zero2_pp2_dp2_afab_selective|4|--tp 1 --pp 2 --schedule afab --micro 2 --zero 2 --recompute selective"
    "zero3_pp2_dp2_1f1b|4|--tp 1 --pp 2 --micro 2 --zero 3 --comm mpi-strict"
    "zero3_pp2_dp2_interleaved|4|--tp 1 --pp 2 --chunks 2 --schedule interleaved --micro 2 --zero 3 --comm mpi-strict"
    "zero2_pp2_dp2_zbh1|4|--tp 1 --pp 2 --schedule zb-h1 --micro 2 --zero 2 --comm mpi-strict"
    "zero3_pp2_dp2_zbh2_selective|4|--tp 1 --pp 2 --schedule zb-h2 --micro 2 --zero 3 --recompute selective --comm mpi-strict"
    "zero3_cp2_dp2|4|--tp 1 --cp 2 --attention flash --zero 3")
  string(REPLACE "|" ";" parts "${layout}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 flags)
  separate_arguments(flags)
  mm_test(test_equivalence_${name} EXE test_equivalence LABELS mpi NP ${np} TIMEOUT 120 ARGS ${flags} --steps 3)
endforeach()
# Bad input: stages that contradict each other, a stage that does not exist (flag errors: exit 2, no rank aborted).
add_test(NAME cli_zero_strategy_contradiction COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 2
         "--data-parallel-sharding-strategy optim .ZeRO-1. contradicts --zero 3: give one stage"
         ${MM_MPIRUN} -np 1 $<TARGET_FILE:train_gpt> --device cpu --steps 1 --zero 3 --data-parallel-sharding-strategy optim)
add_test(NAME cli_zero_stage4 COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 2 "--zero 4 is out of range .0, 3."
         ${MM_MPIRUN} -np 1 $<TARGET_FILE:train_gpt> --device cpu --steps 1 --zero 4)
set_tests_properties(cli_zero_strategy_contradiction cli_zero_stage4 PROPERTIES LABELS mpi
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
# GPU (and the emulated one, make test-emulated): NCCL, one GPU per rank, ZeRO-3's prefetch on the communication
# stream; dp 2 with full recompute, and pp 2 x dp 2 under ZB-H1 (the buckets reduce-scattered after each W).
mm_test(test_gpu_equivalence_zero3_dp2_nccl EXE test_equivalence LABELS gpu NP 2 TIMEOUT 300
        ARGS --tp 1 --device cuda --comm nccl --no-order-check --zero 3 --recompute full --steps 2)
mm_test(test_gpu_equivalence_zero3_pp2_dp2_zbh1_nccl EXE test_equivalence LABELS gpu NP 4 TIMEOUT 300
        ARGS --tp 1 --pp 2 --schedule zb-h1 --micro 2 --device cuda --comm nccl --zero 3 --steps 2)
