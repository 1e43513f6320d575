# Activation offloading (recompute/activation_offload.cu, model/offload_model.cu): bit for bit the run without it,
# the bytes copied each way and the host pool's peak == formula, the device's activations at the schedule's
# peak == formula; the first-stage policy keeps on every stage what the last one keeps (measured).
mm_executable(test_activation_offload SOURCES test/model/test_activation_offload.cu)
mm_test(test_activation_offload_layers EXE test_activation_offload LABELS mpi NP 1 ARGS --policy layers --micro 2)
mm_test(test_activation_offload_tp2_sp_full EXE test_activation_offload LABELS mpi NP 2 ARGS --tp 2 --sp --recompute full --policy layers:4)
mm_test(test_activation_offload_cp2_bf16_selective EXE test_activation_offload LABELS mpi NP 2
        ARGS --cp 2 --dtype bf16 --recompute selective --policy layers:2)
mm_test(test_activation_offload_first_stage_pp2 EXE test_activation_offload LABELS mpi NP 2 ARGS --pp 2 --micro 4 --batch 8 --policy in-flight)
mm_test(test_activation_offload_first_stage_pp2_zbh1_zero3 EXE test_activation_offload LABELS mpi NP 4
        ARGS --pp 2 --schedule zb-h1 --micro 4 --batch 8 --policy in-flight --zero 3)
mm_test(test_activation_offload_interleaved EXE test_activation_offload LABELS mpi NP 2
        ARGS --pp 2 --chunks 2 --schedule interleaved --micro 2 --policy layers:1)
# On the GPU (and the emulated one, make test-emulated): the copies on their own stream, ordered by events; and the
# negative control: without the copy stream's wait for the layer's forward, the gradients must differ.
mm_test(test_gpu_activation_offload EXE test_activation_offload LABELS gpu NP 1 ARGS --device cuda --policy layers --micro 2)
mm_test(test_gpu_activation_offload_first_stage_pp2 EXE test_activation_offload LABELS gpu NP 2
        ARGS --device cuda --pp 2 --micro 4 --batch 8 --policy in-flight)
# The forward's peak at pp 1 (measured mid-chunk by the allocator): with offloading at least L − 3 layers lower than
# without, since a layer's blocks go back one layer later (model/offload_layers.cu); released only at the chunk's end,
# it fails. The CPU copies at once, so only the GPU's (and the emulated one's) event-ordered path can show it.
mm_test(test_gpu_activation_offload_forward_peak EXE test_activation_offload LABELS gpu NP 1 ARGS --device cuda --forward-peak --layers 8)
mm_test(test_activation_offload_forward_peak EXE test_activation_offload LABELS mpi NP 1 ARGS --forward-peak --layers 8)
mm_test(test_gpu_activation_offload_without_wait_fails EXE test_activation_offload LABELS gpu NP 1
        ARGS --device cuda --policy layers --skip-offload-wait --steps 1)
# Bad input: two offloading policies at once (a flag error: exit 2); more layers than a model chunk has (a layout
# refused: exit 1). Every rank leaves on its own (expect_error.sh --exit).
add_test(NAME cli_offload_two_policies COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 2
         "--cpu-offloading-num-layers and --offload-beyond-in-flight are two offloading policies: give one"
         ${MM_MPIRUN} -np 1 $<TARGET_FILE:train_gpt> --device cpu --steps 1 --cpu-offloading-num-layers 1 --offload-beyond-in-flight 1)
add_test(NAME cli_offload_layers_beyond_chunk COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 1
         "--cpu-offloading-num-layers 5 exceeds the 4 layers of a model chunk"
         ${MM_MPIRUN} -np 1 $<TARGET_FILE:train_gpt> --device cpu --steps 1 --cpu-offloading --cpu-offloading-num-layers 5)
set_tests_properties(cli_offload_two_policies cli_offload_layers_beyond_chunk PROPERTIES LABELS mpi
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
