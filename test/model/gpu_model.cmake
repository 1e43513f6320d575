# A whole step at a real layer shape on the GPU: one GPT-2 small layer (C 768, 12 heads, S 1024) against the
# CPU (test/model/test_gpu_gpt2_layer.cu; label gpu, exit 77 without a GPU).
mm_test(test_gpu_gpt2_layer SOURCES test/model/test_gpu_gpt2_layer.cu LABELS gpu NP 1 ARGS --dtype fp32 TIMEOUT 300)
mm_test(test_gpu_gpt2_layer_bf16 EXE test_gpu_gpt2_layer LABELS gpu NP 1 ARGS --dtype bf16 TIMEOUT 300)
