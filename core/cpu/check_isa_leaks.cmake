# CTest: no AVX2/AVX-512 instruction in the library can run on a baseline x86-64 CPU unless it
# was dispatched there on cpu_isa() (core/cpu/cpu_kernels.h, core/cpu/cpu_gemm.cpp).
#   cmake -DLIB=<libhedgehog.a> -DAVX2_OBJECT=<hh_cpu_avx2.o> -DAR=<ar> -DNM=<nm>
#         -DOBJDUMP=<objdump> -DREADELF=<readelf> -P check_isa_leaks.cmake
# 1. The AVX2 kernel object exports only CpuKernelsAvx2 members: nothing it compiled for AVX2
#    (Eigen, std and our inline functions and templates) can be chosen by the linker for a
#    baseline caller.
# 2. It has no static initializers (they would run at start-up on any CPU).
# 3. Every other object of the library uses no ymm/zmm register, except the hand-written GEMM
#    kernels (sgemm_avx2/sgemm_avx512, the int8 qgemm_avx2/qgemm_avx512, the row sum's
#    rowsum_avx: functions with a target attribute, called only on their path).
foreach(var LIB AVX2_OBJECT AR NM OBJDUMP READELF)
  if(NOT ${var})
    message(FATAL_ERROR "check_isa_leaks: -D${var}=... is required")
  endif()
endforeach()
get_filename_component(LIB ${LIB} ABSOLUTE)

execute_process(COMMAND ${NM} --defined-only -g ${AVX2_OBJECT} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_isa_leaks: ${NM} failed on ${AVX2_OBJECT}")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${syms}")
set(exported 0)
foreach(line IN LISTS lines)
  string(REGEX REPLACE "^.* " "" sym "${line}")
  if(sym MATCHES "^_ZN2hh14CpuKernelsAvx2")
    math(EXPR exported "${exported} + 1")
  else()
    message(FATAL_ERROR "check_isa_leaks: ${AVX2_OBJECT} exports ${sym}, which baseline code could link to")
  endif()
endforeach()
if(exported EQUAL 0)
  message(FATAL_ERROR "check_isa_leaks: ${AVX2_OBJECT} exports no CpuKernelsAvx2 member")
endif()

execute_process(COMMAND ${READELF} -S -W ${AVX2_OBJECT} OUTPUT_VARIABLE sections)
if(sections MATCHES "\\.init_array|\\.ctors|\\.preinit_array")
  message(FATAL_ERROR "check_isa_leaks: ${AVX2_OBJECT} has static initializers (they run on every CPU)")
endif()

# Each member of the archive, disassembled on its own.
set(dir ${CMAKE_CURRENT_BINARY_DIR}/check_isa_leaks.d)
file(REMOVE_RECURSE ${dir})
file(MAKE_DIRECTORY ${dir})
execute_process(COMMAND ${AR} x ${LIB} WORKING_DIRECTORY ${dir} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_isa_leaks: ${AR} x ${LIB} failed")
endif()
file(GLOB members ${dir}/*.o)
set(checked 0)
foreach(obj IN LISTS members)
  get_filename_component(name ${obj} NAME)
  if(name MATCHES "^(sgemm_avx2\\.cpp|sgemm_avx512\\.cpp|qgemm_avx2\\.cpp|qgemm_avx512\\.cpp|rowsum_avx\\.cpp|hh_cpu_avx2)\\.o$")
    continue()
  endif()
  execute_process(COMMAND ${OBJDUMP} -d --no-show-raw-insn ${obj} OUTPUT_VARIABLE code RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_isa_leaks: ${OBJDUMP} failed on ${name}")
  endif()
  string(REGEX MATCH "[^\n]*%[yz]mm[^\n]*" wide "${code}")
  if(wide)
    message(FATAL_ERROR "check_isa_leaks: ${name} uses a wide register outside a dispatched kernel:\n${wide}")
  endif()
  math(EXPR checked "${checked} + 1")
endforeach()
file(REMOVE_RECURSE ${dir})
if(checked LESS 10)
  message(FATAL_ERROR "check_isa_leaks: only ${checked} objects found in ${LIB}")
endif()
message(STATUS "check_isa_leaks: ${exported} AVX2 entry points; ${checked} other objects use no ymm/zmm register")
