# data/eval_file.cu: llm.c's multiple-choice eval files (HellaSwag): format, rows, scoring, DP split.
mm_test(test_eval_file SOURCES ${CMAKE_SOURCE_DIR}/test/data/test_eval_file.cu MODULES eval_file atomic_file paths runtime LABELS unit)
