# Include check: one generated translation unit per project header, `#include "that/header.h"`
# and nothing else, compiled as the object library hh_header_check. A header that leans on
# something its includer happened to include first fails to compile here. Not part of `all`
# (CI builds it: cmake --build B --target hh_header_check). CUDA headers are checked in CUDA
# builds only: .h ones with the host compiler plus the CUDA include path, .cuh ones with nvcc.
file(GLOB_RECURSE HH_CHECKED_HEADERS CONFIGURE_DEPENDS RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}
  core/*.h autograd/*.h nn/*.h data/*.h train/*.h experiments/*.h serve/*.h cli/*.h apps/*.h tests/*.h tools/*.h cuda/*.h cuda/*.cuh)
set(hh_header_tus)
foreach(h ${HH_CHECKED_HEADERS})
  set(ext cpp)
  if(h MATCHES "\\.cuh$")
    set(ext cu)
  endif()
  # Headers that include CUDA's own headers need the toolkit; skip them without it.
  file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/${h} cuda_includes REGEX "#include <(cuda|cublas)")
  if((cuda_includes OR ext STREQUAL "cu") AND NOT HH_WITH_CUDA)
    continue()
  endif()
  string(MAKE_C_IDENTIFIER "${h}" id)
  set(tu ${CMAKE_CURRENT_BINARY_DIR}/header_check/${id}.${ext})
  file(CONFIGURE OUTPUT ${tu} CONTENT "#include \"${h}\"  // and nothing else\n")
  list(APPEND hh_header_tus ${tu})
endforeach()
add_library(hh_header_check OBJECT EXCLUDE_FROM_ALL ${hh_header_tus})
target_include_directories(hh_header_check PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
# The test helper headers locate fixtures through it, as hh_tests does.
target_compile_definitions(hh_header_check PRIVATE HH_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}")
target_compile_options(hh_header_check PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${HH_WARNINGS}>)
target_link_libraries(hh_header_check PRIVATE Eigen3::Eigen nlohmann_json::nlohmann_json OpenMP::OpenMP_CXX)
if(HH_BUILD_TESTS)
  target_link_libraries(hh_header_check PRIVATE doctest::doctest)
endif()
if(HH_WITH_CUDA)
  target_link_libraries(hh_header_check PRIVATE CUDA::cudart CUDA::cublas)
  target_compile_options(hh_header_check PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
endif()
