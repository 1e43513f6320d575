# Variants of the registered tests on the emulated device (included by emulator.cmake after every fragment):
# the kernel tests, the same test in another thread order, and mutants (a test's program rebuilt with one
# source file patched). Test infrastructure only.

# ---- the kernel tests -------------------------------------------------------------------------------------------
# Every file of layers/ and parallel/ with a kernel (__global__) and its gpu tests: the tests named after it
# (test_gpu_<file>, test_gpu_<file>_..., but not those of a longer-named kernel file: test_gpu_<file>_tc belongs
# to <file>_tc.cu), else the gpu tests whose program links the file's object library.
# EMU_KERNEL_TESTS: all of them, once; EMU_TESTS_OF_<file> (e.g. EMU_TESTS_OF_layers/linear.cu): one file's;
# ${CMAKE_BINARY_DIR}/emu_kernel_tests.txt: "layers/x.cu: test ..." per file, what mutants.py reads. A kernel
# file without a gpu test is an error: nothing would run its kernels on the emulated device.
file(GLOB EMU_KERNEL_FILES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/layers/*.cu ${CMAKE_SOURCE_DIR}/parallel/*.cu)
get_property(emu_all_tests DIRECTORY PROPERTY TESTS)
set(EMU_KERNEL_TESTS "")
set(emu_map "")
foreach(f ${EMU_KERNEL_FILES})
  file(STRINGS ${f} kernels REGEX "__global__")
  if(NOT kernels)
    continue()
  endif()
  get_filename_component(stem ${f} NAME_WE)
  file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${f})
  set(mine "")
  foreach(t ${emu_all_tests})
    get_test_property(${t} LABELS labels)
    if(NOT "gpu" IN_LIST labels)
      continue()
    endif()
    if(t MATCHES "^test_gpu_${stem}(_|$)")
      # Not a test of a longer-named kernel file (test_gpu_flash_attention_tc is flash_attention_tc.cu's).
      set(other FALSE)
      foreach(g ${EMU_KERNEL_FILES})
        get_filename_component(gstem ${g} NAME_WE)
        string(LENGTH "${gstem}" glen)
        string(LENGTH "${stem}" slen)
        if(glen GREATER slen AND t MATCHES "^test_gpu_${gstem}(_|$)")
          set(other TRUE)
        endif()
      endforeach()
      if(NOT other)
        list(APPEND mine ${t})
      endif()
    endif()
  endforeach()
  if(NOT mine)
    foreach(t ${emu_all_tests})
      get_test_property(${t} LABELS labels)
      get_property(exe GLOBAL PROPERTY MM_TEST_EXE_${t})
      if(NOT "gpu" IN_LIST labels OR NOT exe)
        continue()
      endif()
      get_target_property(libs ${exe} LINK_LIBRARIES)
      if("mm_${stem}" IN_LIST libs)
        list(APPEND mine ${t})
      endif()
    endforeach()
  endif()
  if(NOT mine)
    message(FATAL_ERROR "${rel} has kernels but no gpu test: name one test_gpu_${stem} (or link mm_${stem} into a "
            "gpu test), so that the emulated device runs its kernels")
  endif()
  list(APPEND EMU_KERNEL_TESTS ${mine})
  set(EMU_TESTS_OF_${rel} ${mine})
  string(REPLACE ";" " " mine_text "${mine}")
  string(APPEND emu_map "${rel}: ${mine_text}\n")
endforeach()
list(REMOVE_DUPLICATES EMU_KERNEL_TESTS)
file(WRITE ${CMAKE_BINARY_DIR}/emu_kernel_tests.txt "${emu_map}")

# ---- a test's variant ---------------------------------------------------------------------------------------------
# emu_variant_test(NAME FROM [EXE program] [ENV NAME=value ...] [LABELS ...] [EXPECT STATUS REGEX]): the test
# FROM (registered by mm_test) again: the same ranks and arguments, on EXE (default: its own program), with its
# environment plus ENV. EXPECT: a negative control, run through expect_failure.sh (it must end with STATUS and
# print a line matching REGEX).
function(emu_variant_test name from)
  cmake_parse_arguments(A "" "EXE;TIMEOUT" "ENV;LABELS;EXPECT" ${ARGN})
  get_property(exe GLOBAL PROPERTY MM_TEST_EXE_${from})
  get_property(np GLOBAL PROPERTY MM_TEST_NP_${from})
  get_property(args GLOBAL PROPERTY MM_TEST_ARGS_${from})
  if(NOT exe)
    message(FATAL_ERROR "emu_variant_test(${name}): ${from} was not registered by mm_test")
  endif()
  if(A_EXE)
    set(exe ${A_EXE})
  endif()
  set(cmd $<TARGET_FILE:${exe}> ${args})
  if(np)
    set(cmd ${MM_MPIRUN} -np ${np} ${cmd})
  endif()
  if(A_EXPECT)
    list(GET A_EXPECT 0 status)
    list(GET A_EXPECT 1 regex)
    set(cmd bash ${EMU_DIR}/expect_failure.sh 600 ${status} ${regex} ${cmd})
  endif()
  add_test(NAME ${name} COMMAND ${cmd})
  get_test_property(${from} ENVIRONMENT env)
  get_test_property(${from} TIMEOUT timeout)
  if(A_TIMEOUT)
    set(timeout ${A_TIMEOUT})
  endif()
  if(NOT env)
    set(env "")
  endif()
  list(APPEND env ${A_ENV})
  set_tests_properties(${name} PROPERTIES LABELS "${A_LABELS}" ENVIRONMENT "${env}" TIMEOUT ${timeout})
endfunction()

# ---- mutants ------------------------------------------------------------------------------------------------------
# emu_mutant(NAME SOURCE file.cu MUTATION args... TESTS test... [LABELS ...] [ENV ...] [EXPECT STATUS REGEX]
#            [REVERSE]):
# the tests TESTS, each on a copy of its program built with SOURCE patched by `mutants.py apply MUTATION...` (one
# barrier deleted, one shared array a row short, one expression changed). The patched copy goes through the
# same transform, under the original file's name (reports and gdb point into the real file); the program
# links it in place of SOURCE's object library (and of the core library, for a program that links the whole
# core). Tests NAME__<test>, and with REVERSE (outside the race mode) NAME__<test>_reverse, in the reverse thread
# order. test/emulator/mutants.py makes a list of these for `make mutants`; the flash key
# bound's negative control is one (emulator_tests.cmake).
function(emu_mutant name)
  cmake_parse_arguments(A "REVERSE" "SOURCE" "MUTATION;TESTS;LABELS;EXPECT;ENV" ${ARGN})
  get_filename_component(abs ${A_SOURCE} ABSOLUTE BASE_DIR ${CMAKE_SOURCE_DIR})
  get_filename_component(stem ${abs} NAME_WE)
  get_filename_component(dir ${abs} DIRECTORY)
  file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${abs})
  set(patched ${CMAKE_BINARY_DIR}/mutants/${name}/${rel})
  add_custom_command(OUTPUT ${patched}.cpp
                     COMMAND ${Python3_EXECUTABLE} ${EMU_DIR}/mutants.py apply ${abs} ${patched} ${A_MUTATION}
                     COMMAND ${Python3_EXECUTABLE} ${EMU_DIR}/cuda_transform.py ${patched} ${patched}.cpp --name ${abs}
                     DEPENDS ${abs} ${EMU_DIR}/mutants.py ${EMU_DIR}/cuda_transform.py
                     COMMENT "mutant ${name}: ${rel}" VERBATIM)
  set(lib mm_${stem}__${name})
  _add_library(${lib} OBJECT ${patched}.cpp)
  target_include_directories(${lib} PRIVATE ${EMU_INCLUDES} ${dir})  # the emulator's mma.cuh first
  target_link_libraries(${lib} PUBLIC mm_deps)
  foreach(t ${A_TESTS})
    get_property(exe GLOBAL PROPERTY MM_TEST_EXE_${t})
    if(NOT exe)
      message(FATAL_ERROR "emu_mutant(${name}): ${t} was not registered by mm_test")
    endif()
    set(clone ${exe}__${name})
    if(NOT TARGET ${clone})
      get_target_property(srcs ${exe} SOURCES)
      get_target_property(libs ${exe} LINK_LIBRARIES)
      get_target_property(incs ${exe} INCLUDE_DIRECTORIES)
      if("mm_core" IN_LIST libs AND NOT TARGET mm_core__${name})
        set(objects ${MM_OBJECTS})
        list(TRANSFORM objects REPLACE "^\\$<TARGET_OBJECTS:mm_${stem}>$" "$<TARGET_OBJECTS:${lib}>")
        _add_library(mm_core__${name} STATIC ${objects})
        target_link_libraries(mm_core__${name} PUBLIC mm_deps)
      endif()
      if(NOT "mm_${stem}" IN_LIST libs AND NOT "mm_core" IN_LIST libs)
        message(FATAL_ERROR "emu_mutant(${name}): ${exe} links neither mm_${stem} nor mm_core: ${rel} is not in it")
      endif()
      list(TRANSFORM libs REPLACE "^mm_${stem}$" ${lib})
      list(TRANSFORM libs REPLACE "^mm_core$" mm_core__${name})
      _add_executable(${clone} ${srcs})
      if(incs)
        target_include_directories(${clone} PRIVATE ${incs})
      endif()
      target_link_libraries(${clone} PRIVATE ${libs})
      set_property(GLOBAL APPEND PROPERTY EMU_MUTANT_PROGRAMS ${clone})
    endif()
    emu_variant_test(${name}__${t} ${t} EXE ${clone} ENV ${A_ENV} LABELS ${A_LABELS} EXPECT ${A_EXPECT})
    if(A_REVERSE AND NOT MM_EMU_SANITIZER STREQUAL "thread")
      emu_variant_test(${name}__${t}_reverse ${t} EXE ${clone} ENV ${A_ENV} EMU_THREAD_ORDER=reverse
                       LABELS ${A_LABELS} EXPECT ${A_EXPECT})
    endif()
  endforeach()
endfunction()
