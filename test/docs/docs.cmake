# The documentation stays inside the repository: every *.md a tracked file names exists, no file points at a
# path of a particular machine or at the folder beside the repository, and a name said to be in a file is
# in it (test/docs/check_references.sh says exactly what counts). Runs on the source tree; needs only bash, awk and grep (git when available).
add_test(NAME docs_references COMMAND bash ${CMAKE_SOURCE_DIR}/test/docs/check_references.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(docs_references PROPERTIES LABELS unit TIMEOUT 60)

# Negative control for rule 5 (a name said to be in a file must be in it): the script runs on a planted
# document, written here into the build folder (never into the tree, which docs_references searches), that
# puts sync_gradients in the wrong file twice ("`name` in file" and "file's `name`"), and must fail with two
# hits; the same sentences with the right file must pass, both claims checked. The sentences are assembled
# from variables so that this file itself makes no claim.
set(MM_PLANTED ${CMAKE_BINARY_DIR}/docs_planted)
set(MM_NAME "`sync_gradients`")
set(MM_EXT cu)
set(MM_RIGHT model/train_step.${MM_EXT})
file(WRITE ${MM_PLANTED}/wrong_file.txt
     "The gradients are synchronized by ${MM_NAME} in parallel/comm.${MM_EXT}, and model/gpt.${MM_EXT}'s ${MM_NAME} averages them.\n")
file(WRITE ${MM_PLANTED}/right_file.txt
     "The gradients are synchronized by ${MM_NAME} in ${MM_RIGHT}, and ${MM_RIGHT}'s ${MM_NAME} averages them.\n")
add_test(NAME docs_references_planted_wrong_file
         COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh
                 "check_references: 2 reference.s. that lead outside the repository or to a file without the name"
                 bash ${CMAKE_SOURCE_DIR}/test/docs/check_references.sh ${CMAKE_SOURCE_DIR} ${MM_PLANTED}/wrong_file.txt)
add_test(NAME docs_references_planted_right_file
         COMMAND bash ${CMAKE_SOURCE_DIR}/test/docs/check_references.sh ${CMAKE_SOURCE_DIR} ${MM_PLANTED}/right_file.txt)
set_tests_properties(docs_references_planted_wrong_file docs_references_planted_right_file PROPERTIES LABELS unit TIMEOUT 60)
set_tests_properties(docs_references_planted_right_file PROPERTIES PASS_REGULAR_EXPRESSION "2 names said to be in a file are there")

# The README's "Read the paper in the code": at most 2,000 lines, in the paper's order, calling down only
# (test/docs/paper_path.sh). Negative control: a planted section that lists context parallelism's file must
# fail on what that file includes.
add_test(NAME paper_path COMMAND bash ${CMAKE_SOURCE_DIR}/test/docs/paper_path.sh ${CMAKE_SOURCE_DIR})
file(WRITE ${MM_PLANTED}/paper_path_sideways.txt
     "## Read the paper in the code\n\n| files | paper | what |\n|---|---|---|\n| `parallel/context_parallel.cu` | §2 | planted |\n")
add_test(NAME paper_path_planted_sideways
         COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh "includes what lies beyond the paper"
                 bash ${CMAKE_SOURCE_DIR}/test/docs/paper_path.sh ${CMAKE_SOURCE_DIR} ${MM_PLANTED}/paper_path_sideways.txt)
set_tests_properties(paper_path paper_path_planted_sideways PROPERTIES LABELS unit TIMEOUT 60)
# Negative controls: a planted path whose files include the calculator's formulas (after the path's own
# memory_formulas.h, which must pass: line 2 is the first named), ZeRO's model-state table and flash attention's
# memory; each must fail on its include.
file(WRITE ${MM_PLANTED}/paper_path_memory/calculator.h "#include \"memory_formulas.h\"\n#include \"../recompute/formulas.h\"\n")
file(WRITE ${MM_PLANTED}/paper_path_memory/states.h "#include \"model_state_memory.h\"\n")
file(WRITE ${MM_PLANTED}/paper_path_memory/flash.h "#include \"../recompute/flash_memory.h\"\n")
file(WRITE ${MM_PLANTED}/paper_path_memory.txt
     "## Read the paper in the code\n\n| files | paper | what |\n|---|---|---|\n| `${MM_PLANTED}/paper_path_memory/calculator.h` | §2 | planted |\n| `${MM_PLANTED}/paper_path_memory/states.h` | §2 | planted |\n| `${MM_PLANTED}/paper_path_memory/flash.h` | §2 | planted |\n")
foreach(what "calculator.h includes what lies beyond the paper: 2:#include ....recompute/formulas.h"
             "states.h includes what lies beyond the paper: 1:#include .model_state_memory.h"
             "flash.h includes what lies beyond the paper: 1:#include ....recompute/flash_memory.h")
  string(REGEX MATCH "^[a-z]+" planted "${what}")
  add_test(NAME paper_path_planted_${planted}
           COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 1 "${what}"
                   bash ${CMAKE_SOURCE_DIR}/test/docs/paper_path.sh ${CMAKE_SOURCE_DIR} ${MM_PLANTED}/paper_path_memory.txt)
  set_tests_properties(paper_path_planted_${planted} PROPERTIES LABELS unit TIMEOUT 60)
endforeach()

# The floors and the circles (test/docs/layering.sh). Negative controls: planted trees in the build folder, one
# whose layers/ includes model/, one where two files include each other's headers; each must fail on that.
add_test(NAME layering COMMAND bash ${CMAKE_SOURCE_DIR}/test/docs/layering.sh ${CMAKE_SOURCE_DIR})
file(WRITE ${MM_PLANTED}/layering_floor/layers/op.cu "#include \"../model/gpt.h\"\n")
file(WRITE ${MM_PLANTED}/layering_floor/model/gpt.h "#pragma once\n")
file(WRITE ${MM_PLANTED}/layering_circle/train/run.cu "#include \"bookkeeping.h\"\n")
file(WRITE ${MM_PLANTED}/layering_circle/train/bookkeeping.cu "#include \"run.h\"\n")
add_test(NAME layering_planted_floor
         COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 1 "layers/op.cu includes a floor above it"
                 bash ${CMAKE_SOURCE_DIR}/test/docs/layering.sh ${MM_PLANTED}/layering_floor)
add_test(NAME layering_planted_circle
         COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 1 "a circle: bookkeeping and run include each other"
                 bash ${CMAKE_SOURCE_DIR}/test/docs/layering.sh ${MM_PLANTED}/layering_circle)
# A line over 120 characters in a file of the paper's path fails paper_path (a planted file and section).
string(REPEAT "x" 121 MM_LONG)
file(WRITE ${MM_PLANTED}/long_line.h "// ${MM_LONG}\n")
file(WRITE ${MM_PLANTED}/paper_path_long_line.txt
     "## Read the paper in the code\n\n| files | paper | what |\n|---|---|---|\n| `${MM_PLANTED}/long_line.h` | §2 | planted |\n")
add_test(NAME paper_path_planted_long_line
         COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 1 "long_line.h has lines over 120 characters: line.s. 1"
                 bash ${CMAKE_SOURCE_DIR}/test/docs/paper_path.sh ${CMAKE_SOURCE_DIR} ${MM_PLANTED}/paper_path_long_line.txt)
set_tests_properties(layering layering_planted_floor layering_planted_circle paper_path_planted_long_line
                     PROPERTIES LABELS unit TIMEOUT 60)

# The README's commands as written (test/docs/readme_commands.py): make train builds what Quick start says, every
# flag of a README command is in its program's --help, every Python line uses the interpreter make deps installs
# for. Needs the programs (built by make test).
add_test(NAME readme_commands COMMAND python3 ${CMAKE_SOURCE_DIR}/test/docs/readme_commands.py ${CMAKE_SOURCE_DIR}
         ${CMAKE_BINARY_DIR})
set_tests_properties(readme_commands PROPERTIES LABELS unit TIMEOUT 300)
# Negative control: a planted README (beside the real Makefile) whose Quick start names the right programs but
# whose commands give train_gpt a flag it does not have and run a Python line with another interpreter.
set(MM_README README)  # the file name assembled, so that this file names no Markdown file outside the tree
set(MM_EXT_MD md)
file(WRITE ${MM_PLANTED}/readme_root/${MM_README}.md
     "## Quick start\n\nbuilds the trainer `build/train_gpt`, `build/prepare_data`, `build/generate`, `build/draw_pipeline`, for this machine\n\n```\nbuild/train_gpt --frobnicate 3\npython3 -c \"import torch\"\n```\n")
configure_file(${CMAKE_SOURCE_DIR}/Makefile ${MM_PLANTED}/readme_root/Makefile COPYONLY)
add_test(NAME readme_commands_planted
         COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 1 "build/train_gpt --frobnicate: not a flag"
                 python3 ${CMAKE_SOURCE_DIR}/test/docs/readme_commands.py ${MM_PLANTED}/readme_root ${CMAKE_BINARY_DIR})
set_tests_properties(readme_commands_planted PROPERTIES LABELS unit TIMEOUT 60)
# Negative controls for the docs pages (docs/*.md), one planted page each beside a clean README, each failing for
# its own reason: an mpirun block without the Open MPI export, a template in a command, a program without its
# path, and a quick command that lacks a required flag (draw_pipeline --ideal without --pp; it is run).
set(MM_QUICK "## Quick start\n\nbuilds the trainer `build/train_gpt`, `build/prepare_data`, `build/generate`, `build/draw_pipeline`, for this machine\n")
set(MM_PAGE_no_export "```\nmpirun -np 2 build/train_gpt --tp 2\n```\n")
set(MM_WHY_no_export "a block runs mpirun before exporting OMPI_ALLOW_RUN_AS_ROOT")
set(MM_PAGE_template "```\nbuild/train_gpt --pipeline-schedule 1f1b (or zb-h1) --steps 8\n```\n")
set(MM_WHY_template "a command with a template in it")
set(MM_PAGE_bare "Draw it: `draw_pipeline --ideal --schedule zb-h2 --post-validation`.\n")
set(MM_WHY_bare "'draw_pipeline' without its path")
set(MM_PAGE_missing_flag "```\nbuild/draw_pipeline --ideal --schedule zb-h2 --post-validation --out x.png\n```\n")
set(MM_WHY_missing_flag "exits 2: build/draw_pipeline --ideal --schedule zb-h2.*--ideal needs --pp")
foreach(case no_export template bare missing_flag)
  file(WRITE ${MM_PLANTED}/docs_${case}/${MM_README}.md "${MM_QUICK}")
  file(WRITE ${MM_PLANTED}/docs_${case}/docs/page.${MM_EXT_MD} "${MM_PAGE_${case}}")
  configure_file(${CMAKE_SOURCE_DIR}/Makefile ${MM_PLANTED}/docs_${case}/Makefile COPYONLY)
  add_test(NAME readme_commands_planted_${case}
           COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 1 "${MM_WHY_${case}}"
                   python3 ${CMAKE_SOURCE_DIR}/test/docs/readme_commands.py ${MM_PLANTED}/docs_${case} ${CMAKE_BINARY_DIR})
  set_tests_properties(readme_commands_planted_${case} PROPERTIES LABELS unit TIMEOUT 60)
endforeach()

# The tour of one training step (docs/code_map.md): every "A calls B" it says is a call in A's body
# (test/docs/check_tour.py). Negative control: a planted tour that says main calls train_step directly (the claim a
# reviewer found false: main calls take_step, which calls train_step) must fail, naming it.
add_test(NAME docs_tour COMMAND python3 ${CMAKE_SOURCE_DIR}/test/docs/check_tour.py ${CMAKE_SOURCE_DIR})
file(WRITE ${MM_PLANTED}/tour_wrong_call.txt
     "### A tour of one training step, in call order\n\n1. `main` in train_gpt.${MM_EXT} calls `train_step` in model/train_step.${MM_EXT}.\n")
add_test(NAME docs_tour_planted_wrong_call
         COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 1 "`main` .train_gpt.cu. is said to call `train_step`, but its body does not"
                 python3 ${CMAKE_SOURCE_DIR}/test/docs/check_tour.py ${CMAKE_SOURCE_DIR} ${MM_PLANTED}/tour_wrong_call.txt)
set_tests_properties(docs_tour docs_tour_planted_wrong_call PROPERTIES LABELS unit TIMEOUT 60)
