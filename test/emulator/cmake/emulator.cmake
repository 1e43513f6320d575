# (In test/emulator/cmake/, out of the real build's glob of test/*/*.cmake: the real build never includes it.)
# The emulated-device build (make test-emulated, in build-emulated/): the project's CUDA sources compiled
# UNCHANGED as host C++ by g++, after a source transform (cuda_transform.py), against the emulated CUDA
# runtime, cuBLAS/cuBLASLt and NCCL of test/emulator/. Test infrastructure only: included by CMakeLists.txt
# when MM_EMULATED=ON, in place of the real build (no nvcc, no CUDA libraries are used).
#
# The same sources, programs and tests as the real build: the core files are globbed as CMakeLists.txt does,
# and the same CMake fragments (tools/, test/) register the same programs and tests through emulated
# versions of mm_executable and mm_test. bench/ is left out: its timings mean nothing on an emulator.
project(mini_megatron_emulated LANGUAGES C CXX ASM)
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
# The race mode: the same emulator built with ThreadSanitizer, for the race tests only (race_test.cmake).
emu_library(mm_emulated_tsan ${EMU_LIB_SOURCES})
target_compile_options(mm_emulated_tsan PRIVATE -fsanitize=thread)
target_link_options(mm_emulated_tsan PUBLIC -fsanitize=thread)

add_library(mm_deps INTERFACE)
target_include_directories(mm_deps BEFORE INTERFACE ${EMU_INCLUDES})
target_include_directories(mm_deps INTERFACE ${CMAKE_SOURCE_DIR} ${CBLAS_INCLUDE_DIR} ${PCRE2_INCLUDE_DIR}
                           ${NLOHMANN_JSON_INCLUDE_DIR})
target_compile_options(mm_deps INTERFACE ${EMU_FLAGS} -fopenmp)
target_compile_definitions(mm_deps INTERFACE MM_CPU_CLONES)
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
# The emulator's own tests: its negative controls and the race mode.
include(${EMU_DIR}/cmake/emulator_tests.cmake)
# The emulated cuBLAS/NCCL tests and the trainer on the emulated GPU (their owner's fragment).
include(${EMU_DIR}/trainer.cmake)

# Each test its own Open MPI session folder, as in CMakeLists.txt; and the test scripts' `nvidia-smi -L` sees
# the emulated GPUs (test/emulator/bin/nvidia-smi).
mm_isolate_mpi_sessions(ENV "PATH=${EMU_DIR}/bin:$ENV{PATH}")
# What can only mean something on real hardware, not run here, each with its reason:
# - cli_gpu_nccl_shared_gpu: the refusal of two ranks on one GPU; every emulated rank has a GPU of its own,
#   so the case cannot arise.
if(TEST cli_gpu_nccl_shared_gpu)
  set_tests_properties(cli_gpu_nccl_shared_gpu PROPERTIES DISABLED TRUE)
endif()
