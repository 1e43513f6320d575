# One test per op file of layers/ (test/layers/test_<op>.cu), each registered twice from one executable:
#   test_<op>      label unit: the fast CPU path against the op's plain math, layers/reference/<op>.h (--cpu;
#                  make test-asan runs these)
#   test_gpu_<op>  label gpu:  every CUDA kernel of the op against the fast CPU path and the same reference
#                  (--gpu; exits 77, a skip, when no GPU is visible)
# MODULES: the op's own object library and what it calls, nothing else.
mm_test(test_matmul SOURCES test/layers/test_matmul.cu MODULES matmul runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_matmul EXE test_matmul LABELS gpu ARGS --gpu)
mm_test(test_linear SOURCES test/layers/test_linear.cu MODULES linear weight_grad_queue activation_allocator matmul runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_linear EXE test_linear LABELS gpu ARGS --gpu)
mm_test(test_attention SOURCES test/layers/test_attention.cu MODULES attention matmul runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_attention EXE test_attention LABELS gpu ARGS --gpu)
mm_test(test_flash_attention SOURCES test/layers/test_flash_attention.cu MODULES flash_attention attention matmul runtime
        LABELS unit ARGS --cpu)
mm_test(test_gpu_flash_attention EXE test_flash_attention LABELS gpu ARGS --gpu)
mm_test(test_embedding SOURCES test/layers/test_embedding.cu MODULES embedding runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_embedding EXE test_embedding LABELS gpu ARGS --gpu)
mm_test(test_cross_entropy SOURCES test/layers/test_cross_entropy.cu MODULES cross_entropy runtime LABELS unit
        ARGS --cpu)
mm_test(test_gpu_cross_entropy EXE test_cross_entropy LABELS gpu ARGS --gpu)
mm_test(test_dropout SOURCES test/layers/test_dropout.cu MODULES dropout runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_dropout EXE test_dropout LABELS gpu ARGS --gpu)
mm_test(test_layernorm SOURCES test/layers/test_layernorm.cu MODULES layernorm runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_layernorm EXE test_layernorm LABELS gpu ARGS --gpu)
mm_test(test_gelu SOURCES test/layers/test_gelu.cu MODULES gelu runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_gelu EXE test_gelu LABELS gpu ARGS --gpu)
mm_test(test_adamw SOURCES test/layers/test_adamw.cu MODULES adamw runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_adamw EXE test_adamw LABELS gpu ARGS --gpu)
# Philox is header-only host/device code; the GPU kernels' masks are compared bit for bit in test_gpu_dropout
# and test_gpu_attention, so this one has CPU checks only.
mm_test(test_philox SOURCES test/layers/test_philox.cu MODULES runtime LABELS unit ARGS --cpu)
# The runtime's buffers: tensor_convert and the host round trips (the stream-ordered ones of a step's path).
mm_test(test_runtime SOURCES test/layers/test_runtime.cu MODULES runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_runtime EXE test_runtime LABELS gpu ARGS --gpu)
# Every kernel instantiation the trainer can pick is reached by a gpu test's shape (test/layers/gpu_shapes.h);
# the choices are host functions, so this runs without a GPU.
mm_test(test_kernel_coverage SOURCES test/layers/test_kernel_coverage.cu MODULES attention layernorm linear weight_grad_queue activation_allocator matmul
        runtime LABELS unit)
