# CTest case install_consumer (cmake -P): install BUILD_DIR into WORK_DIR/prefix, configure, build
# and run tests/install against it, then check that the consumer does not link CUDA (link line and
# readelf -d) and that no installed header includes Eigen or nlohmann_json.
foreach(v BUILD_DIR SOURCE_DIR WORK_DIR CXX)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "test_install.cmake: -D${v}=... is required")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()
set(prefix ${WORK_DIR}/prefix)
set(cbuild ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --config ${BUILD_TYPE})

# Private headers must stay private: nothing installed may need the build-only dependencies.
file(GLOB_RECURSE headers ${prefix}/include/*.h)
foreach(h ${headers})
  file(STRINGS ${h} bad REGEX "#include [<\"](Eigen|nlohmann|png|utf8proc|xxhash)")
  if(bad)
    message(FATAL_ERROR "install_consumer: installed header ${h} includes a build-only dependency: ${bad}")
  endif()
endforeach()

run("consumer configure" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install -B ${cbuild}
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix}
    -DHEDGEHOG_INCLUDE_ROOT=${prefix}/include/hedgehog -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
run("consumer build" ${CMAKE_COMMAND} --build ${cbuild} --config ${BUILD_TYPE})
run("consumer run" ${cbuild}/app)
if(NOT last_output MATCHES "[0-9]")
  message(FATAL_ERROR "install_consumer: the README example printed no numbers:\n${last_output}")
endif()

# CUDA must be absent from the consumer: from its link command and from its dynamic section.
file(GLOB_RECURSE link_files ${cbuild}/CMakeFiles/app.dir/link.txt)
foreach(f ${link_files})
  file(READ ${f} link_line)
  if(link_line MATCHES "(cudart|cublas|libcuda|cuda/lib)")
    message(FATAL_ERROR "install_consumer: the consumer's link line names CUDA:\n${link_line}")
  endif()
endforeach()
find_program(READELF readelf)
if(READELF)
  run("readelf" ${READELF} -d ${cbuild}/app)
  if(last_output MATCHES "(cudart|cublas|libcuda)")
    message(FATAL_ERROR "install_consumer: the consumer needs a CUDA library:\n${last_output}")
  endif()
endif()
message(STATUS "install_consumer: OK (prefix ${prefix})")
