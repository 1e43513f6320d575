# GPT-2 in and out of Hugging Face's format (model/hf_gpt2.cu, model/safetensors.cu), against transformers itself:
# loss equality at tp 1, tp 2, pp 2 and the byte-identical round trip (load), and a model trained at
# tp 2 x pp 2 x dp 2 with the distributed optimizer that transformers loads with the trainer's loss (train), and
# greedy generation: GPT2LMHeadModel.generate's 64 tokens equal build/generate's on a model the trainer saved (generate).
# Skipped (77) when /usr/bin/python3 has no transformers (make deps installs it).
foreach(c load train generate)
  add_test(NAME hf_gpt2_${c} COMMAND bash ${CMAKE_SOURCE_DIR}/test/model/test_hf_gpt2.sh $<TARGET_FILE:train_gpt>
           ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}" ${c} $<TARGET_FILE:generate>)
  set_tests_properties(hf_gpt2_${c} PROPERTIES LABELS mpi SKIP_RETURN_CODE 77 TIMEOUT 300
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
# The format itself without transformers: round trips in fp32 and bf16, the Conv1D layout, F16, the other
# spellings, and the safetensors header's refusals (label unit, always runs).
mm_test(test_hf_gpt2 SOURCES ${CMAKE_SOURCE_DIR}/test/model/test_hf_gpt2.cu
        MODULES hf_gpt2 safetensors checkpoint atomic_file paths runtime LABELS unit TIMEOUT 120)
