# The documentation stays inside the repository: every *.md a tracked file names exists, and no file points
# at a path of a particular machine or at the folder beside the repository (test/docs/check_references.sh
# says exactly what counts). Runs on the source tree; needs only bash, awk and grep (git when available).
add_test(NAME docs_references COMMAND bash ${CMAKE_SOURCE_DIR}/test/docs/check_references.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(docs_references PROPERTIES LABELS unit TIMEOUT 60)
