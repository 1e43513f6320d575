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
