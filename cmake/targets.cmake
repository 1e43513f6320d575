# targets.cmake — the project's targets and test helper, shared by the real build (CMakeLists.txt) and the
# emulated one (test/emulator/cmake/emulator.cmake, which routes add_library/add_executable through its
# source transform first).
#
# One object library per source file (one concept per file): the trainer links them all (mm_core), a unit
# test links only the concepts it tests, and each file is compiled once.
file(GLOB MM_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/layers/*.cu ${CMAKE_SOURCE_DIR}/parallel/*.cu ${CMAKE_SOURCE_DIR}/recompute/*.cu
  ${CMAKE_SOURCE_DIR}/model/*.cu ${CMAKE_SOURCE_DIR}/data/*.cu ${CMAKE_SOURCE_DIR}/train/*.cu)
set(MM_OBJECTS "")
foreach(src ${MM_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  add_library(mm_${name} OBJECT ${src})
  target_link_libraries(mm_${name} PUBLIC mm_deps)
  list(APPEND MM_OBJECTS $<TARGET_OBJECTS:mm_${name}>)
endforeach()
# AdamW's CPU loop calls sqrtf. Allowed to skip errno for a negative argument, the compiler vectorises it: the
# same IEEE square roots, and nothing reads errno (bench/PERF_NOTES.md, "AdamW").
target_compile_options(mm_adamw PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fno-math-errno>
                       $<$<COMPILE_LANGUAGE:CXX>:-fno-math-errno>)
add_library(mm_core STATIC ${MM_OBJECTS})
target_link_libraries(mm_core PUBLIC mm_deps)

# mm_executable(NAME SOURCES ... [MODULES m1 m2 ...]): a program; MODULES are object libraries (file names
# without extension, e.g. layernorm runtime); without MODULES it links the whole core library.
function(mm_executable name)
  cmake_parse_arguments(A "" "" "SOURCES;MODULES" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  if(A_MODULES)
    foreach(m ${A_MODULES})
      target_link_libraries(${name} PRIVATE mm_${m})
    endforeach()
    target_link_libraries(${name} PRIVATE mm_deps)
  else()
    target_link_libraries(${name} PRIVATE mm_core)
  endif()
endfunction()

# mm_test(NAME SOURCES ... [MODULES ...] LABELS unit|mpi|gpu [NP n] [ARGS ...] [TIMEOUT s])
# NP launches the test under mpirun with n ranks (oversubscribed); exit code 77 is a skip (a gpu test without a
# GPU), except in the emulated build (MM_EMULATED), where every GPU test must run: there it is a failure.
# The test's program, ranks and arguments are kept as global properties (MM_TEST_EXE_<name>, MM_TEST_NP_<name>,
# MM_TEST_ARGS_<name>), from which the emulated build makes its variants of a test (another thread order, the
# race mode, a mutant: test/emulator/cmake/).
set(MM_MPIRUN ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
function(mm_test name)
  cmake_parse_arguments(A "" "NP;TIMEOUT;EXE" "SOURCES;MODULES;LABELS;ARGS" ${ARGN})
  set(exe ${name})
  if(A_EXE)
    set(exe ${A_EXE})
  else()
    mm_executable(${name} SOURCES ${A_SOURCES} MODULES ${A_MODULES})
  endif()
  if(A_NP)
    add_test(NAME ${name} COMMAND ${MM_MPIRUN} -np ${A_NP} $<TARGET_FILE:${exe}> ${A_ARGS})
  else()
    add_test(NAME ${name} COMMAND $<TARGET_FILE:${exe}> ${A_ARGS})
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${A_LABELS}"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
  if(NOT MM_EMULATED)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
  set_property(GLOBAL PROPERTY MM_TEST_EXE_${name} ${exe})
  set_property(GLOBAL PROPERTY MM_TEST_NP_${name} "${A_NP}")
  set_property(GLOBAL PROPERTY MM_TEST_ARGS_${name} "${A_ARGS}")
  if(A_TIMEOUT)
    set_tests_properties(${name} PROPERTIES TIMEOUT ${A_TIMEOUT})
  else()
    set_tests_properties(${name} PROPERTIES TIMEOUT 600)
  endif()
endfunction()

# Open MPI 4 puts every job's session directory under ONE folder per user and host (/tmp/ompi.<host>.<uid>).
# When ctest runs two mpirun jobs at once, one job's cleanup can remove that folder just as the other creates
# its own inside it, and the second job dies with "orte_session_dir failed" (seen once in CI). So each test
# gets a base folder of its own. Short paths under /tmp: the session folder holds Unix sockets, whose paths
# must stay under ~100 characters. mm_isolate_mpi_sessions([ENV ...]): after every test is registered; each
# ENV entry (NAME=value) is added to every test too.
function(mm_isolate_mpi_sessions)
  cmake_parse_arguments(A "" "" "ENV" ${ARGN})
  string(MD5 hash "${CMAKE_BINARY_DIR}")
  string(SUBSTRING "${hash}" 0 8 hash)
  get_property(tests DIRECTORY PROPERTY TESTS)
  set(index 0)
  foreach(t ${tests})
    math(EXPR index "${index} + 1")
    set(dir /tmp/mm-${hash}/${index})
    file(MAKE_DIRECTORY ${dir})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "OMPI_MCA_orte_tmpdir_base=${dir}")
    foreach(e ${A_ENV})
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "${e}")
    endforeach()
  endforeach()
endfunction()
