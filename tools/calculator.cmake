# The paper-scale memory and FLOPs calculator (tools/memory_calculator.cu) and the PNG chart writer it uses
# (tools/chart.cu, module "chart": reusable by any program with MODULES chart).
#
# Charts need stb_image_write.h and stb_easy_font.h (Debian/Ubuntu package libstb-dev). Without them the
# project still builds; writing a chart then fails with a message naming the package.
find_path(MM_STB_INCLUDE_DIR NAMES stb_image_write.h
          HINTS ${CMAKE_SOURCE_DIR}/third_party/stb /usr/include/stb /usr/local/include/stb
          PATH_SUFFIXES stb)
add_library(mm_chart OBJECT ${CMAKE_SOURCE_DIR}/tools/chart.cu)
target_link_libraries(mm_chart PUBLIC mm_deps)
if(MM_STB_INCLUDE_DIR AND EXISTS ${MM_STB_INCLUDE_DIR}/stb_easy_font.h)
  target_include_directories(mm_chart PRIVATE ${MM_STB_INCLUDE_DIR})
else()
  message(WARNING "stb headers not found (apt-get install libstb-dev): charts (--chart) are disabled")
  target_compile_definitions(mm_chart PRIVATE MM_NO_STB)
endif()

mm_executable(memory_calculator SOURCES tools/memory_calculator.cu tools/calculator_results.cu tools/calculator_print.cu
              tools/beyond_paper.cu
              MODULES formulas memory_formulas flash_memory memory_techniques pipeline_schedule zero_bubble_schedule offload_schedule chart runtime)
