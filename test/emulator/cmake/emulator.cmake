# (In test/emulator/cmake/, out of the real build's glob of test/*/*.cmake: the real build never includes it.)
# The emulated-device build (make test-emulated, in build-emulated/): the project's CUDA sources compiled
# UNCHANGED as host C++ by g++, after a source transform (cuda_transform.py), against the emulated CUDA
# runtime, cuBLAS/cuBLASLt and NCCL of test/emulator/. Test infrastructure only: included by CMakeLists.txt
# when MM_EMULATED=ON, in place of the real build (no nvcc, no CUDA libraries are used).
#
# The same sources, programs and tests as the real build: the core files are globbed as CMakeLists.txt does,
# and the same CMake fragments (tools/, test/) register the same programs and tests through emulated
# versions of mm_executable and mm_test. bench/ is left out: its timings mean nothing on an emulator.
#
# MM_EMU_SANITIZER picks the checks compiled in (test/emulator/launch.cpp says what each finds):
#   address (the default, build-emulated/): AddressSanitizer on everything, the emulator included. Each
#           cudaMalloc, each static __shared__ array and each launch's dynamic shared memory is an allocation of
#           exactly its size: memcheck. Every test of this build is memchecked, the trainer runs included.
#   thread  (build-emulated-race/): ThreadSanitizer, the race mode: CUDA's barriers are the only
#           happens-before edges inside a block. make test-emulated builds only the kernel tests here.
#   none    no sanitizer (fastest; what a debugger session may prefer).
project(mini_megatron_emulated LANGUAGES C CXX ASM)
set(MM_EMU_SANITIZER address CACHE STRING
    "checks of the emulated build: address (memcheck), thread (race mode) or none")
set_property(CACHE MM_EMU_SANITIZER PROPERTY STRINGS address thread none)
if(MM_EMU_SANITIZER STREQUAL "address")
  # Without use-after-scope (the poisoning of a block's locals at every entry and exit of its scope): about a
  # fifth of the sanitizer's time in the kernels' loops, for a check that memcheck does not make.
  add_compile_options(-fsanitize=address -fno-omit-frame-pointer -fno-sanitize-address-use-after-scope)
  add_link_options(-fsanitize=address)
elseif(MM_EMU_SANITIZER STREQUAL "thread")
  add_compile_options(-fsanitize=thread)
  add_link_options(-fsanitize=thread)
elseif(NOT MM_EMU_SANITIZER STREQUAL "none")
  message(FATAL_ERROR "MM_EMU_SANITIZER=${MM_EMU_SANITIZER}: expected address, thread or none")
endif()
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE RelWithDebInfo)
endif()
set(EMU_DIR ${CMAKE_SOURCE_DIR}/test/emulator)

find_package(Python3 REQUIRED COMPONENTS Interpreter)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_path(CBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas
          /usr/include/x86_64-linux-gnu /usr/include)
find_library(OPENBLAS_LIB NAMES openblas)
find_path(PCRE2_INCLUDE_DIR pcre2.h)
find_library(PCRE2_LIB NAMES pcre2-8)
find_path(NLOHMANN_JSON_INCLUDE_DIR nlohmann/json.hpp)
# The toolkit's plain headers that work in host code as they are: cuda_bf16.h (and the cuda_fp16.h,
# vector_types.h it includes), library_types.h. Nothing else of the toolkit is used.
find_path(EMU_CUDA_HEADERS cuda_bf16.h PATHS /usr/local/cuda/include /usr/include ENV CUDA_HOME PATH_SUFFIXES include)
if(NOT CBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIB OR NOT PCRE2_LIB OR NOT NLOHMANN_JSON_INCLUDE_DIR OR NOT EMU_CUDA_HEADERS)
  message(FATAL_ERROR "emulated build: OpenBLAS, PCRE2, nlohmann-json and the CUDA toolkit's cuda_bf16.h are "
          "needed (make deps)")
endif()

# The emulated libraries' sources: the runtime (runtime.cpp, launch.cpp, ctx_switch.S), cuBLAS/cuBLASLt
# (cublas.cc) and NCCL (nccl.cc); their own tests (*_test.*) are programs of their own.
file(GLOB EMU_LIB_SOURCES CONFIGURE_DEPENDS ${EMU_DIR}/*.cpp ${EMU_DIR}/*.cc ${EMU_DIR}/*.S)
list(FILTER EMU_LIB_SOURCES EXCLUDE REGEX "_test\\.(cc|cpp)$")

# Those toolkit headers are copied into the build folder, alone: a quoted include is looked for in the
# includer's folder first, so in the toolkit's folder cuda_bf16.h would find the toolkit's
# vector_functions.h -> cuda_runtime_api.h instead of the emulator's.
set(EMU_CUDA_COPY ${CMAKE_BINARY_DIR}/emu_cuda_headers)
foreach(h cuda_bf16.h cuda_bf16.hpp cuda_fp16.h cuda_fp16.hpp vector_types.h library_types.h crt/host_defines.h
          nv/target nv/detail/__target_macros nv/detail/__preprocessor)
  get_filename_component(d ${h} DIRECTORY)
  file(COPY ${EMU_CUDA_HEADERS}/${h} DESTINATION ${EMU_CUDA_COPY}/${d})
endforeach()
set(EMU_INCLUDES ${EMU_DIR}/include ${EMU_CUDA_COPY})
# -include cuda_runtime.h: nvcc includes it in every .cu file implicitly. -fno-extern-tls-init: threadIdx and
# the other built-in variables are plain thread-local loads.
set(EMU_FLAGS -include cuda_runtime.h -fno-extern-tls-init)

function(emu_library name)
  add_library(${name} STATIC ${ARGN})
  target_include_directories(${name} BEFORE PUBLIC ${EMU_INCLUDES})
  target_include_directories(${name} PRIVATE ${EMU_DIR} ${CBLAS_INCLUDE_DIR})
  target_link_libraries(${name} PUBLIC MPI::MPI_CXX ${OPENBLAS_LIB} Threads::Threads)
endfunction()
find_package(Threads REQUIRED)
emu_library(mm_emulated ${EMU_LIB_SOURCES})
# The race mode: the fiber scheduler (launch.cpp) is not instrumented, so that only the kernels' accesses are
# checked, ordered by the happens-before edges it declares (and at a fraction of the cost of ignoring them).
if(MM_EMU_SANITIZER STREQUAL "thread")
  set_source_files_properties(${EMU_DIR}/launch.cpp PROPERTIES COMPILE_OPTIONS -fno-sanitize=thread
                              COMPILE_DEFINITIONS EMU_TSAN=1)
endif()

add_library(mm_deps INTERFACE)
target_include_directories(mm_deps BEFORE INTERFACE ${EMU_INCLUDES})
target_include_directories(mm_deps INTERFACE ${CMAKE_SOURCE_DIR} ${CBLAS_INCLUDE_DIR} ${PCRE2_INCLUDE_DIR}
                           ${NLOHMANN_JSON_INCLUDE_DIR})
target_compile_options(mm_deps INTERFACE ${EMU_FLAGS} -fopenmp)
# The CPU paths' function clones (ifunc resolvers, run by the dynamic loader before ThreadSanitizer's runtime
# is up) are left out of the race mode's build: they are CPU speed, not what it checks.
if(NOT MM_EMU_SANITIZER STREQUAL "thread")
  target_compile_definitions(mm_deps INTERFACE MM_CPU_CLONES)
endif()
target_link_libraries(mm_deps INTERFACE mm_emulated MPI::MPI_CXX OpenMP::OpenMP_CXX ${OPENBLAS_LIB} ${PCRE2_LIB})

# A .cu file becomes ${CMAKE_BINARY_DIR}/emu_src/<path>.cpp through the transform; its own folder is on the
# include path (for its "header.h" includes). emu_sources(OUT_VAR DIRS_VAR sources...)
function(emu_sources out dirs)
  set(result "")
  set(folders "")
  foreach(src ${ARGN})
    if(src MATCHES "^\\$<" OR NOT src MATCHES "\\.cu$")
      list(APPEND result ${src})
      continue()
    endif()
    get_filename_component(abs ${src} ABSOLUTE BASE_DIR ${CMAKE_SOURCE_DIR})
    file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${abs})
    set(gen ${CMAKE_BINARY_DIR}/emu_src/${rel}.cpp)
    get_property(done GLOBAL PROPERTY EMU_GEN_${rel})
    if(NOT done)
      set_property(GLOBAL PROPERTY EMU_GEN_${rel} 1)
      add_custom_command(OUTPUT ${gen} COMMAND ${Python3_EXECUTABLE} ${EMU_DIR}/cuda_transform.py ${abs} ${gen}
                         DEPENDS ${abs} ${EMU_DIR}/cuda_transform.py COMMENT "cuda_transform ${rel}" VERBATIM)
    endif()
    list(APPEND result ${gen})
    get_filename_component(d ${abs} DIRECTORY)
    list(APPEND folders ${d})
  endforeach()
  list(REMOVE_DUPLICATES folders)
  set(${out} ${result} PARENT_SCOPE)
  set(${dirs} ${folders} PARENT_SCOPE)
endfunction()

# The fragments' own add_library/add_executable calls on .cu files (tools/calculator.cmake's chart) go through
# the transform too. The emulator's headers come before the sources' own folders, so that a .cu file's
# #include "mma.cuh" finds test/emulator/include/mma.cuh, not layers/mma.cuh (the one header of the project that
# the emulated build replaces).
function(add_library name)
  emu_sources(srcs dirs ${ARGN})
  _add_library(${name} ${srcs})
  if(dirs)
    target_include_directories(${name} PRIVATE ${EMU_INCLUDES} ${dirs})
  endif()
endfunction()
function(add_executable name)
  emu_sources(srcs dirs ${ARGN})
  _add_executable(${name} ${srcs})
  if(dirs)
    target_include_directories(${name} PRIVATE ${EMU_INCLUDES} ${dirs})
  endif()
endfunction()

# The core, mm_executable and mm_test: the real build's own definitions (cmake/targets.cmake), through the
# add_library/add_executable above.
include(${CMAKE_SOURCE_DIR}/cmake/targets.cmake)

enable_testing()
file(GLOB MM_FRAGMENTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tools/*.cmake ${CMAKE_SOURCE_DIR}/test/*.cmake
     ${CMAKE_SOURCE_DIR}/test/*/*.cmake)
list(FILTER MM_FRAGMENTS EXCLUDE REGEX "/test/emulator/")  # (its own fragments are in cmake/, out of the glob)
list(SORT MM_FRAGMENTS)
foreach(frag ${MM_FRAGMENTS})
  include(${frag})
endforeach()
# The kernel tests, and the variants of a test (another thread order, a mutant).
include(${EMU_DIR}/cmake/variants.cmake)
# The emulator's own tests: its negative controls, the modes' controls, the second thread order.
include(${EMU_DIR}/cmake/emulator_tests.cmake)
# The emulated cuBLAS/NCCL tests and the trainer on the emulated GPU (their owner's fragment).
include(${EMU_DIR}/trainer.cmake)
# make mutants (test/emulator/mutants.py): its list of mutants, in the mutants' own build folders only.
if(MM_EMU_MUTANTS)
  include(${MM_EMU_MUTANTS})
  get_property(programs GLOBAL PROPERTY EMU_MUTANT_PROGRAMS)
  add_custom_target(emu_mutant_programs DEPENDS ${programs})
endif()

# Each test its own Open MPI session folder, as in CMakeLists.txt; and the test scripts' `nvidia-smi -L` sees
# the emulated GPUs (test/emulator/bin/nvidia-smi).
mm_isolate_mpi_sessions(ENV "PATH=${EMU_DIR}/bin:$ENV{PATH}")
# No skip: on the emulated device every GPU test must run, so exit code 77 is a failure here (mm_test sets no
# SKIP_RETURN_CODE in this build; the tests registered with add_test lose theirs below). The negative control
# emu_skip_fails_the_run shows a gpu test that finds no GPU failing the run. What can only mean something on
# real hardware is not run here, each named with its reason:
# - cli_gpu_nccl_shared_gpu: the refusal of two ranks on one GPU; every emulated rank has a GPU of its own,
#   so the case cannot arise.
# The sanitizers make a test 1.5 to 3 times slower: no test of this build stops for time before 900 s (make
# test-emulated's --timeout), so that a limit set for the plain build does not fail a slow but correct run.
get_property(emu_all_tests DIRECTORY PROPERTY TESTS)
foreach(t ${emu_all_tests})
  set_property(TEST ${t} PROPERTY SKIP_RETURN_CODE)
  get_test_property(${t} TIMEOUT limit)
  if(limit AND limit LESS 900)
    set_tests_properties(${t} PROPERTIES TIMEOUT 900)
  endif()
endforeach()
if(TEST cli_gpu_nccl_shared_gpu)
  set_tests_properties(cli_gpu_nccl_shared_gpu PROPERTIES DISABLED TRUE)
endif()
