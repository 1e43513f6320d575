# GEMM-based ops (matmul, linear, attention) and the embedding / cross-entropy ops: CPU unit tests and the
# GPU-vs-CPU comparison (label gpu: exits 77 without a GPU).
mm_test(test_ops_gemm SOURCES test/test_ops_gemm.cu
        MODULES matmul linear attention embedding cross_entropy runtime LABELS unit)
mm_test(test_gpu_gemm SOURCES test/test_gpu_gemm.cu
        MODULES matmul linear attention embedding cross_entropy runtime LABELS gpu)
