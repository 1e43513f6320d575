# The paper's formulas (recompute/memory_formulas.cu, recompute/formulas.cu) against the paper's printed numbers, and the calculator's CLI.
mm_test(test_formulas SOURCES test/test_formulas.cu MODULES formulas memory_formulas flash_memory memory_techniques pipeline_schedule
        zero_bubble_schedule pipeline_simulation runtime LABELS unit TIMEOUT 60)

# memory_calculator: the default tables and JSON run; a bad flag exits non-zero; docs/paper.md's 530B
# data-parallel example (39.15 s/iter on 2240 GPUs) gives 54.2% MFU, by flags and as the built-in 530B-dp8.
add_test(NAME calculator_text COMMAND $<TARGET_FILE:memory_calculator>)
add_test(NAME calculator_json COMMAND $<TARGET_FILE:memory_calculator> --json)
add_test(NAME calculator_bad_flag COMMAND $<TARGET_FILE:memory_calculator> --no-such-flag)
add_test(NAME calculator_bad_value COMMAND $<TARGET_FILE:memory_calculator> --tp eight)
add_test(NAME calculator_530b_dp COMMAND $<TARGET_FILE:memory_calculator> --model 530B --dp 8
         --global-batch 2240 --iter-time 39.15)
add_test(NAME calculator_530b_dp8 COMMAND $<TARGET_FILE:memory_calculator> --model 530B-dp8)
set_tests_properties(calculator_text calculator_json calculator_bad_flag calculator_bad_value calculator_530b_dp
                     calculator_530b_dp8 PROPERTIES LABELS unit TIMEOUT 60)
set_tests_properties(calculator_bad_flag calculator_bad_value PROPERTIES WILL_FAIL TRUE)
set_tests_properties(calculator_text PROPERTIES PASS_REGULAR_EXPRESSION "51\\.4%")
set_tests_properties(calculator_530b_dp calculator_530b_dp8 PROPERTIES PASS_REGULAR_EXPRESSION "54\\.2%")
# The first stage from the pipeline schedule, the model states with and without the distributed optimizer,
# the 530B data-parallel run, fractional bytes per parameter, context parallelism (--cp, its table, the K/V
# bytes) and refused layouts and values: numbers worked out by hand in test/calculator_cli.sh.
add_test(NAME calculator_cli COMMAND bash ${CMAKE_SOURCE_DIR}/test/calculator_cli.sh $<TARGET_FILE:memory_calculator>)
set_tests_properties(calculator_cli PROPERTIES LABELS unit TIMEOUT 60)
# Beyond the paper (tools/beyond_paper.cu): ZeRO and offloading at the paper's scale against numbers worked out by
# hand (test/calculator_beyond.sh), a verdict per run, the picture; and the measured rows of docs/paper.md (one
# run per technique on CPU ranks, every figure measured == formula: tools/beyond_paper_measured.sh).
add_test(NAME calculator_beyond_paper COMMAND bash ${CMAKE_SOURCE_DIR}/test/calculator_beyond.sh $<TARGET_FILE:memory_calculator>)
set_tests_properties(calculator_beyond_paper PROPERTIES LABELS unit TIMEOUT 60)
add_test(NAME beyond_paper_measured_rows COMMAND bash ${CMAKE_SOURCE_DIR}/tools/beyond_paper_measured.sh ${CMAKE_BINARY_DIR}
         "${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none")
set_tests_properties(beyond_paper_measured_rows PROPERTIES LABELS mpi TIMEOUT 180)
# The JSON must parse, hold the four models and the 530B dp-8 run, and carry the schedule's and the model
# states' numbers (checked with Python when it is installed): 530B's first stage holds 139 layers' worth
# (= 105(1 + 34/105)) and 2060874240 parameters per GPU, 7.5 bytes each at dp 8 with the distributed optimizer.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME calculator_json_valid
           COMMAND sh -c "\"$1\" --json | \"$2\" -c \"import json,sys; d=json.load(sys.stdin); m={x['name']: x for x in d['models']}; assert list(m)==['22B','175B','530B','1T','530B-dp8'], list(m); p=m['530B-dp8']; assert p['pipeline_first_stage']['in_flight_layers']==139==p['pipeline_first_stage']['paper_in_flight_layers']; assert p['first_stage_params_per_gpu']['total']==2060874240; assert p['bytes_per_param_distributed_optimizer']==7.5 and m['530B']['bytes_per_param_distributed_optimizer']==18; s=p['first_stage_memory_bytes']['tp_sp_selective']; assert s['model_states_distributed_optimizer']==2060874240*7.5 and s['fits_distributed_optimizer']\""
                   sh $<TARGET_FILE:memory_calculator> ${Python3_EXECUTABLE})
  set_tests_properties(calculator_json_valid PROPERTIES LABELS unit TIMEOUT 60)
  # Flash attention in the JSON, worked out by hand for 175B (sbh = 2048 x 12288 = 25165824, t = 8, a = 96):
  # Table 2's TP + SP row under flash 34sbh/8 + 4 x 96 x 2048/8 = 106954752 + 98304 = 107053056 bytes; the
  # selective rows equal the rows without selective; full recompute unchanged; Figure 7's TP + SP + flash
  # 100 x (4.25 + 0.00390625)/23 % of the paper's TP baseline; the first stage's 124 layers' worth of it with
  # nothing rebuilt. With --attention flash the paper's layouts turn flash: TP + selective = TP.
  add_test(NAME calculator_json_flash
           COMMAND sh -c "\"$1\" --json --model 175B | \"$2\" -c \"import json,sys; d=json.load(sys.stdin); assert d['attention']=='unfused'; m=d['models'][0]; t2=m['table2_bytes_per_layer']; assert t2[2]['flash_bytes']==107053056 and t2[2]['flash_formula']=='sbh(34/t + 4a/(ht))', t2[2]; assert t2[3]['flash_bytes']==t2[1]['flash_bytes'] and t2[4]['flash_bytes']==t2[2]['flash_bytes'] and t2[5]['flash_bytes']==t2[5]['bytes']; f=m['figure7_percent_of_tp']; assert abs(f['tp_sp_flash']-100*4.25390625/23)<1e-6 and f['four_a_over_h']==0.03125; s=m['first_stage_memory_bytes']['tp_sp_flash']; assert abs(s['layers']/(124*107053056)-1)<1e-9 and s['rebuilt_layer']==0\" && \"$1\" --json --model 175B --attention flash | \"$2\" -c \"import json,sys; d=json.load(sys.stdin); assert d['attention']=='flash'; s=d['models'][0]['first_stage_memory_bytes']; assert s['tp_selective']==s['tp'] and s['tp_sp_selective']==s['tp_sp_flash'], s\""
                   sh $<TARGET_FILE:memory_calculator> ${Python3_EXECUTABLE})
  set_tests_properties(calculator_json_flash PROPERTIES LABELS unit TIMEOUT 60)
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
