# Model-level tests (the paper's claims, on the whole model): parallel-vs-single-rank equivalence, recompute
# bitwise identity, measured memory vs the paper's formulas, communication bytes, whole-model gradient
# check; then the trainer's command line and checkpoints. Each executable is named after its file; the CTest
# names say the layout they run (other fragments and the Makefile's ASAN_TESTS refer to them).
mm_executable(test_equivalence SOURCES test/model/test_equivalence.cu)
mm_executable(test_recompute SOURCES test/model/test_recompute.cu)
mm_executable(test_memory SOURCES test/model/test_memory.cu)
mm_executable(test_sp_comm_bytes SOURCES test/model/test_sp_comm_bytes.cu)

mm_test(test_gpt_gradcheck SOURCES test/model/test_gpt_gradcheck.cu LABELS unit)

# (tp, dp) ∈ {(2,1), (4,1), (1,2), (2,2)} against the single-rank run, dropout on; then with --sp.
mm_test(test_equivalence_tp2 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 2)
mm_test(test_equivalence_tp4 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 4)
mm_test(test_equivalence_dp2 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1)
mm_test(test_equivalence_tp2_dp2 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 2)
mm_test(test_equivalence_sp_tp2 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 2 --sp)
mm_test(test_equivalence_sp_tp4 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 4 --sp)
mm_test(test_equivalence_sp_tp2_dp2 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 2 --sp)
mm_test(test_equivalence_sp_bf16 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 2 --sp --dtype bf16 --steps 5)
# Micro-batches (gradient accumulation) against the single-rank run of the whole batch: M = 2 and 4 on one rank,
# with tp 2 + SP, and with dp 2 (one sequence per micro-batch); negative control without the 1/M.
mm_test(test_equivalence_micro2 EXE test_equivalence LABELS mpi NP 1 ARGS --tp 1 --micro 2)
mm_test(test_equivalence_micro4 EXE test_equivalence LABELS mpi NP 1 ARGS --tp 1 --micro 4)
mm_test(test_equivalence_sp_tp2_micro2 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 2 --sp --micro 2)
mm_test(test_equivalence_dp2_micro2 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --micro 2)
# Pipeline parallelism (model/pipeline_step.cu): (tp, pp, dp) layouts, the three schedules, and negative controls.
mm_test(test_equivalence_pp2 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 4)
mm_test(test_equivalence_pp4 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 1 --pp 4 --micro 4)
mm_test(test_equivalence_sp_tp2_pp2 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 2 --sp --pp 2 --micro 2)
mm_test(test_equivalence_pp2_dp2 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 1 --pp 2 --micro 2)
mm_test(test_equivalence_pp2_interleaved EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --chunks 2 --schedule interleaved --micro 4)
mm_test(test_equivalence_pp2_afab EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --schedule afab --micro 4)
mm_test(test_equivalence_pp2_bitwise EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 4 --bitwise)
mm_test(test_equivalence_pp2_interleaved_bitwise EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --chunks 2 --schedule interleaved --micro 2 --bitwise)
# One rank, 4 micro-batches: all forwards first (AFAB: four micro-batches' activations held at once, each in its
# own MicroBatchState) against the plain accumulation loop (1F1B at pp 1: forward and backward of one, then the
# next), bit for bit: the gradients add up in the same micro-batch order, so only a mix-up of the saved states
# could change a bit.
mm_test(test_equivalence_pp1_afab_bitwise EXE test_equivalence LABELS mpi NP 1 ARGS --tp 1 --micro 4 --schedule afab --bitwise)
mm_test(test_equivalence_pp2_without_tied_sum EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 2 --expect-fail-without-tied-sum)
mm_test(test_equivalence_pp2_without_scale EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 4 --expect-fail-without-micro-scale)
mm_test(test_equivalence_pp2_bf16 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 2 --dtype bf16 --steps 5)
mm_test(test_equivalence_micro_without_scale EXE test_equivalence LABELS mpi NP 1 ARGS --tp 1 --micro 4 --expect-fail-without-micro-scale)
# Zero-bubble schedules (parallel/zero_bubble_schedule.h: B now, W later), dropout 0.1, under NCCL's rules:
# pp 2 and pp 4 with M < p, M = p and M > p; with tp 2 + SP; with dp 2 + the distributed optimizer. Bit for bit
# at tp 1 (the W pass makes the GEMM calls the undivided backward makes, in the same micro-batch order).
foreach(zb zb-h1 zb-h2)
  string(REPLACE "-" "" zbn ${zb})
  mm_test(test_equivalence_pp2_${zbn}_m1 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 1 --schedule ${zb} --comm mpi-strict)
  mm_test(test_equivalence_pp2_${zbn}_bitwise EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 2 --schedule ${zb} --comm mpi-strict --bitwise)
  mm_test(test_equivalence_pp2_${zbn}_m4 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 4 --schedule ${zb} --comm mpi-strict --bitwise)
  mm_test(test_equivalence_pp4_${zbn}_m2 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 1 --pp 4 --micro 2 --schedule ${zb} --comm mpi-strict --steps 5)
  mm_test(test_equivalence_pp4_${zbn}_m4 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 1 --pp 4 --micro 4 --schedule ${zb} --comm mpi-strict --steps 5)
  mm_test(test_equivalence_pp4_${zbn}_m8 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 1 --pp 4 --micro 8 --batch 8 --schedule ${zb} --comm mpi-strict --steps 5 --bitwise)
  mm_test(test_equivalence_sp_tp2_pp2_${zbn} EXE test_equivalence LABELS mpi NP 4 ARGS --tp 2 --sp --pp 2 --micro 4 --schedule ${zb} --comm mpi-strict --steps 5)
  mm_test(test_equivalence_pp2_dp2_zero_${zbn} EXE test_equivalence LABELS mpi NP 4 ARGS --tp 1 --pp 2 --micro 2 --distributed-optimizer --schedule ${zb} --comm mpi-strict --steps 5)
endforeach()
# With each recompute policy and with flash attention (the W pass after a full recompute's second forward).
mm_test(test_equivalence_pp2_zbh1_selective EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 4 --schedule zb-h1 --recompute selective --bitwise --steps 5)
mm_test(test_equivalence_pp2_zbh2_full EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 4 --schedule zb-h2 --recompute full --bitwise --steps 5)
mm_test(test_equivalence_pp2_zbh1_flash EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 4 --schedule zb-h1 --attention flash --seq 80 --steps 5)
# Negative control: micro-batch 0's W pass throws its weight gradients away; the equivalence must fail.
mm_test(test_equivalence_pp2_zbh1_without_w EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 4 --schedule zb-h1 --expect-fail-without-w)
# Negative control: without the layer-norm / bias gradient sum over the TP group, SP must NOT match.
mm_test(test_equivalence_sp_without_grad_sum EXE test_equivalence LABELS mpi NP 2 ARGS --tp 2 --sp --expect-fail-without-sp-sum)

# Flash attention (layers/flash_attention.h): against the unfused path on one rank and at tp 2 + SP (dropout 0.1,
# the same masks: losses within 1e-5 relative for 20 steps), S = 80 so that it runs two tiles, a partial one
# included; and its own single-rank run reproduced at tp 2 + SP, pp 2 and dp 2.
mm_test(test_equivalence_flash_vs_unfused EXE test_equivalence LABELS mpi NP 1 ARGS --tp 1 --attention flash --reference-attention unfused --seq 80)
mm_test(test_equivalence_flash_vs_unfused_sp_tp2 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 2 --sp --attention flash --reference-attention unfused --seq 80)
mm_test(test_equivalence_flash_sp_tp2 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 2 --sp --attention flash --seq 80)
mm_test(test_equivalence_flash_pp2 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --pp 2 --micro 4 --attention flash --seq 80)
mm_test(test_equivalence_flash_dp2 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --attention flash --seq 80)

# Context parallelism (parallel/context_parallel.h): the single-rank flash run reproduced at cp 2 and 4, and at cp 2
# with tp 2 + SP, pp 2, dp 2 + the distributed optimizer, all under --comm mpi-strict (NCCL's point-to-point
# rules), S = 80: chunks of 20 and 10 positions. Dropout 0.1: the loss curves within 1e-6 relative.
mm_test(test_equivalence_cp2 EXE test_equivalence LABELS mpi NP 2 ARGS --tp 1 --cp 2 --attention flash --seq 80 --comm mpi-strict)
mm_test(test_equivalence_cp4 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 1 --cp 4 --attention flash --seq 80 --comm mpi-strict --steps 10)
mm_test(test_equivalence_cp2_sp_tp2 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 2 --sp --cp 2 --attention flash --seq 80 --comm mpi-strict)
mm_test(test_equivalence_cp2_pp2 EXE test_equivalence LABELS mpi NP 4 ARGS --tp 1 --cp 2 --pp 2 --micro 2 --attention flash --seq 80 --comm mpi-strict --steps 10)
mm_test(test_equivalence_cp2_dp2_zero EXE test_equivalence LABELS mpi NP 4 ARGS --tp 1 --cp 2 --distributed-optimizer --attention flash --seq 80 --comm mpi-strict --steps 10)

mm_test(test_recompute_tp1 EXE test_recompute LABELS mpi NP 1 ARGS --tp 1)
mm_test(test_recompute_flash_tp1 EXE test_recompute LABELS mpi NP 1 ARGS --tp 1 --attention flash --seq 80)
mm_test(test_recompute_flash_tp2_sp EXE test_recompute LABELS mpi NP 2 ARGS --tp 2 --sp --attention flash --seq 80)
mm_test(test_recompute_cp2_tp2_sp EXE test_recompute LABELS mpi NP 4 ARGS --tp 2 --sp --cp 2 --attention flash --seq 80 --comm mpi-strict)
mm_test(test_recompute_tp2_sp EXE test_recompute LABELS mpi NP 2 ARGS --tp 2 --sp)
mm_test(test_recompute_tp1_bf16 EXE test_recompute LABELS mpi NP 1 ARGS --tp 1 --dtype bf16)

mm_test(test_memory_tp1 EXE test_memory LABELS mpi NP 1)
mm_test(test_memory_tp2 EXE test_memory LABELS mpi NP 2)
mm_test(test_memory_tp4 EXE test_memory LABELS mpi NP 4)
# Context parallelism: measured == formula at s/c, and 1/c of the whole sequence's, at cp 2, 4 and cp 2 x tp 2.
mm_test(test_memory_cp2 EXE test_memory LABELS mpi NP 2 ARGS --cp 2)
mm_test(test_memory_cp4 EXE test_memory LABELS mpi NP 4 ARGS --cp 4)
mm_test(test_memory_cp2_tp2 EXE test_memory LABELS mpi NP 4 ARGS --cp 2)
mm_test(test_memory_figure7 EXE test_memory LABELS mpi NP 8 ARGS --figure7)

mm_test(test_sp_comm_bytes_tp2 EXE test_sp_comm_bytes LABELS mpi NP 2)
mm_test(test_sp_comm_bytes_tp4 EXE test_sp_comm_bytes LABELS mpi NP 4)

# GPU: recompute policies bitwise identical on the GPU; TP 2 + SP on one GPU (MPI backend) equals the
# single-rank GPU run.
mm_test(test_gpu_recompute EXE test_recompute LABELS gpu NP 1 ARGS --tp 1 --device cuda --dtype bf16)
mm_test(test_gpu_recompute_tp2_sp EXE test_recompute LABELS gpu NP 2 ARGS --tp 2 --sp --device cuda)
mm_test(test_gpu_equivalence_sp EXE test_equivalence LABELS gpu NP 2 ARGS --tp 2 --sp --device cuda)
# The pipeline on CUDA tensors (two ranks sharing one GPU: the MPI backend stages the point-to-point sends).
mm_test(test_gpu_equivalence_pp2 EXE test_equivalence LABELS gpu NP 2 ARGS --tp 1 --pp 2 --micro 4 --device cuda)
mm_test(test_gpu_equivalence_pp2_interleaved_bf16 EXE test_equivalence LABELS gpu NP 2 ARGS --tp 1 --pp 2 --chunks 2 --schedule interleaved --micro 2 --device cuda --dtype bf16 --steps 5)

# Trainer command line: bad configurations exit 1 (2 for a bad flag) on every rank, no rank aborted or left
# hanging, with a message naming the numbers.
set(MM_EXPECT ${CMAKE_SOURCE_DIR}/test/expect_error.sh)
set(MM_TRAIN $<TARGET_FILE:train_gpt> --device cpu --steps 1)
function(mm_cli_error name regex)
  add_test(NAME ${name} COMMAND ${MM_EXPECT} --exit "1|2" "${regex}" ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS mpi ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
endfunction()
mm_cli_error(cli_tp3_4heads "--tp 3 does not divide 4 heads" ${MM_MPIRUN} -np 3 ${MM_TRAIN} --tp 3 --heads 4)
mm_cli_error(cli_world6_tp4 "--tp 4 does not divide the world size 6" ${MM_MPIRUN} -np 6 ${MM_TRAIN} --tp 4)
mm_cli_error(cli_seq_not_divisible "--seq 30 is not divisible by --tp 4" ${MM_MPIRUN} -np 4 ${MM_TRAIN} --tp 4 --sp --seq 30)
mm_cli_error(cli_seq_too_long "--seq 512 exceeds the model's maximum sequence length 256 .--max-seq.*a fresh model takes --max-seq 512" ${MM_MPIRUN} -np 1 ${MM_TRAIN} --seq 512 --max-seq 256)
mm_cli_error(cli_batch_dp "--batch 3 is not divisible by the data-parallel size 2" ${MM_MPIRUN} -np 2 ${MM_TRAIN} --batch 3)
mm_cli_error(cli_micro_not_dividing "--batch 8 is not divisible by --micro-batch-size 3 x data-parallel size 1" ${MM_MPIRUN} -np 1 ${MM_TRAIN} --batch 8 --micro-batch-size 3)
mm_cli_error(cli_micro_contradiction "--num-microbatches 3 contradicts --micro-batch-size 2: --batch 8 over data-parallel size 2 makes 2 micro-batches" ${MM_MPIRUN} -np 2 ${MM_TRAIN} --batch 8 --micro-batch-size 2 --num-microbatches 3)
mm_cli_error(cli_num_micro_not_dividing "--num-microbatches 3 does not divide the 8 sequences per data-parallel rank" ${MM_MPIRUN} -np 1 ${MM_TRAIN} --batch 8 --num-microbatches 3)
# Pipeline layouts that cannot run: refused before allocating, naming the numbers.
mm_cli_error(cli_pp3_4layers "--pp 3 does not divide 4 layers" ${MM_MPIRUN} -np 3 ${MM_TRAIN} --pp 3)
mm_cli_error(cli_world3_tp1_pp2 "the world size 3 .mpirun -np 3. is not divisible by tp x pp = 1 x 2 = 2" ${MM_MPIRUN} -np 3 ${MM_TRAIN} --pp 2)
mm_cli_error(cli_pp4_2layers "--pp 4 needs at least 4 layers .one per stage.; the model has 2" ${MM_MPIRUN} -np 4 ${MM_TRAIN} --pp 4 --layers 2)
mm_cli_error(cli_pp2_micro_dp "--batch 6 is not divisible by --micro-batch-size 2 x data-parallel size 2" ${MM_MPIRUN} -np 4 ${MM_TRAIN} --pp 2 --batch 6 --micro-batch-size 2)
mm_cli_error(cli_interleaved_M_not_multiple "3 micro-batches are not a multiple of --pp 2" ${MM_MPIRUN} -np 2 ${MM_TRAIN} --pp 2 --num-layers-per-virtual-pipeline-stage 1 --batch 6 --num-microbatches 3)
mm_cli_error(cli_interleaved_k_not_dividing "--num-layers-per-virtual-pipeline-stage 2 does not divide the 3 layers of a stage" ${MM_MPIRUN} -np 2 ${MM_TRAIN} --pp 2 --layers 6 --num-layers-per-virtual-pipeline-stage 2)
mm_cli_error(cli_interleaved_without_k "--pipeline-schedule interleaved needs --num-layers-per-virtual-pipeline-stage" ${MM_MPIRUN} -np 2 ${MM_TRAIN} --pp 2 --pipeline-schedule interleaved)
mm_cli_error(cli_zero_bubble_pp1 "--pipeline-schedule zb-h1 needs --pp > 1" ${MM_MPIRUN} -np 1 ${MM_TRAIN} --pipeline-schedule zb-h1)
mm_cli_error(cli_interleaved_one_chunk "needs at least 2 model chunks per stage" ${MM_MPIRUN} -np 2 ${MM_TRAIN} --pp 2 --num-layers-per-virtual-pipeline-stage 2)
mm_cli_error(cli_unknown_flag "unknown flag --frobnicate" ${MM_MPIRUN} -np 1 ${MM_TRAIN} --frobnicate 1)
mm_cli_error(cli_bad_recompute "--recompute must be none.selective.full" ${MM_MPIRUN} -np 1 ${MM_TRAIN} --recompute some)
mm_cli_error(cli_bad_attention "--attention must be unfused.flash" ${MM_MPIRUN} -np 1 ${MM_TRAIN} --attention fused)
# Context parallelism's rules: unfused attention, a sequence not cut into 2c chunks, a CP rank's positions that
# SP cannot split by t, and a world that tp x cp does not divide.
mm_cli_error(cli_cp_unfused "--cp 2 needs --attention flash: ring attention merges" ${MM_MPIRUN} -np 2 ${MM_TRAIN} --cp 2 --attention unfused)
mm_cli_error(cli_cp_seq "--seq 70 is not divisible by 2 x cp = 4: context parallelism cuts the sequence into 2c chunks" ${MM_MPIRUN} -np 2 ${MM_TRAIN} --cp 2 --seq 70)
mm_cli_error(cli_cp_sp_seq "--seq 36 / cp 2 = 18 tokens per CP rank is not divisible by --tp 4" ${MM_MPIRUN} -np 8 ${MM_TRAIN} --cp 2 --tp 4 --sp --seq 36)
mm_cli_error(cli_cp_world "not divisible by tp x cp x pp = 2 x 2 x 1 = 4" ${MM_MPIRUN} -np 2 ${MM_TRAIN} --cp 2 --tp 2)
mm_cli_error(cli_missing_init "nope.bin" ${MM_MPIRUN} -np 1 ${MM_TRAIN} --init nope.bin)
mm_cli_error(cli_missing_train "missing_train.bin" ${MM_MPIRUN} -np 1 ${MM_TRAIN} --train missing_train.bin)
# NCCL with two ranks on one GPU: refused with a pointer to --comm mpi (needs a GPU: gpu label; any existing
# file passes the path check of --train, and the refusal comes before the data is read).
add_test(NAME cli_gpu_nccl_shared_gpu COMMAND ${MM_EXPECT} --gpu "use --comm mpi" ${MM_MPIRUN} -np 2 $<TARGET_FILE:train_gpt>
         --device cuda --comm nccl --tp 2 --steps 1 --train ${CMAKE_SOURCE_DIR}/README.md --val none)
set_tests_properties(cli_gpu_nccl_shared_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
# Flash attention's CUDA kernels take head dimensions up to 128: a model with 130 is refused before any step
# (before the data is read: any existing file passes the start-up path check of --train).
add_test(NAME cli_gpu_flash_head_dim COMMAND ${MM_EXPECT} --gpu "takes head dimensions up to 128; this model's is 130"
         ${MM_MPIRUN} -np 1 $<TARGET_FILE:train_gpt> --device cuda --attention flash --hidden 260 --heads 2 --steps 1
         --train ${CMAKE_SOURCE_DIR}/README.md --val none)
set_tests_properties(cli_gpu_flash_head_dim PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")

# Checkpoints under TP: train at tp 2 with SP and save one consolidated llm.c file; load it at tp 1 and at
# tp 4 and save again without training: the three files are byte-identical.
add_test(NAME cli_checkpoint_tp_roundtrip COMMAND bash ${CMAKE_SOURCE_DIR}/test/checkpoint_roundtrip.sh
         $<TARGET_FILE:train_gpt> $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(cli_checkpoint_tp_roundtrip PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
# A pipeline stage's activations at its schedule's peak == the formula, exactly (1F1B M >= p and M < p,
# AFAB, interleaved), over SP x recompute x dtype; nothing left after the step.
mm_executable(test_pipeline_memory SOURCES test/model/test_pipeline_memory.cu)
mm_test(test_pipeline_memory_pp2 EXE test_pipeline_memory LABELS mpi NP 2 ARGS --tp 1)
mm_test(test_pipeline_memory_tp2_pp2 EXE test_pipeline_memory LABELS mpi NP 4 ARGS --tp 2)
mm_test(test_pipeline_memory_pp1 EXE test_pipeline_memory LABELS mpi NP 1 ARGS --tp 1)
mm_test(test_pipeline_memory_flash_tp2_pp2 EXE test_pipeline_memory LABELS mpi NP 4 ARGS --tp 2 --attention flash)

# The trainer at cp 2 against one rank with flash attention: validation losses, the sample, the CP report.
add_test(NAME context_parallel_cli COMMAND bash ${CMAKE_SOURCE_DIR}/test/model/context_parallel_cli.sh
         $<TARGET_FILE:train_gpt> $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(context_parallel_cli PROPERTIES LABELS mpi TIMEOUT 180
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
