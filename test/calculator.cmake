# The paper's formulas (recompute/formulas.cu) against the paper's printed numbers, and the calculator's CLI.
mm_test(test_formulas SOURCES test/test_formulas.cu MODULES formulas runtime LABELS unit TIMEOUT 60)

# memory_calculator: the default tables and JSON run; a bad flag exits non-zero; docs/paper.md's 530B
# data-parallel example (39.15 s/iter on 2240 GPUs) gives 54.2% MFU.
add_test(NAME calculator_text COMMAND $<TARGET_FILE:memory_calculator>)
add_test(NAME calculator_json COMMAND $<TARGET_FILE:memory_calculator> --json)
add_test(NAME calculator_bad_flag COMMAND $<TARGET_FILE:memory_calculator> --no-such-flag)
add_test(NAME calculator_bad_value COMMAND $<TARGET_FILE:memory_calculator> --tp eight)
add_test(NAME calculator_530b_dp COMMAND $<TARGET_FILE:memory_calculator> --model 530B --dp 8
         --global-batch 2240 --iter-time 39.15)
set_tests_properties(calculator_text calculator_json calculator_bad_flag calculator_bad_value calculator_530b_dp
                     PROPERTIES LABELS unit TIMEOUT 60)
set_tests_properties(calculator_bad_flag calculator_bad_value PROPERTIES WILL_FAIL TRUE)
set_tests_properties(calculator_text PROPERTIES PASS_REGULAR_EXPRESSION "51\\.4%")
set_tests_properties(calculator_530b_dp PROPERTIES PASS_REGULAR_EXPRESSION "54\\.2%")
# The JSON must parse (checked with Python when it is installed).
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME calculator_json_valid
           COMMAND sh -c "\"$1\" --json | \"$2\" -c \"import json,sys; d=json.load(sys.stdin); assert len(d['models'])==4\""
                   sh $<TARGET_FILE:memory_calculator> ${Python3_EXECUTABLE})
  set_tests_properties(calculator_json_valid PROPERTIES LABELS unit TIMEOUT 60)
endif()
# The Figure 7 chart is written (needs libstb-dev; not registered without it). Same lookup as
# tools/calculator.cmake (a cached result: this fragment is included first).
find_path(MM_STB_INCLUDE_DIR NAMES stb_image_write.h
          HINTS ${CMAKE_SOURCE_DIR}/third_party/stb /usr/include/stb /usr/local/include/stb
          PATH_SUFFIXES stb)
if(MM_STB_INCLUDE_DIR)
  add_test(NAME calculator_chart COMMAND $<TARGET_FILE:memory_calculator> --chart
           ${CMAKE_BINARY_DIR}/figure7_test.png)
  set_tests_properties(calculator_chart PROPERTIES LABELS unit TIMEOUT 60)
endif()
