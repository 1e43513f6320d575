# Element-wise ops and their reductions: dropout (+bias +residual), layernorm, gelu, residual, adamw.
# test_ops_elementwise: CPU reference (finite differences, Philox known answers, dropout coordinates, AdamW).
# test_gpu_elementwise: every CUDA kernel against the CPU reference (skips with 77 without a GPU).
mm_test(test_ops_elementwise SOURCES test/test_ops_elementwise.cu
        MODULES dropout layernorm gelu residual adamw runtime LABELS unit)
mm_test(test_gpu_elementwise SOURCES test/test_gpu_elementwise.cu
        MODULES dropout layernorm gelu residual adamw runtime LABELS gpu)
