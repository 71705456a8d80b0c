# The Python module's tests (tests/python, pytest) against the module this build made
# (build/python/hedgehog). Skipped (77), saying why, where the module was not configured (no Python
# 3 with nanobind, or a sanitizer build), not built (a build of other targets only) or pytest /
# numpy are missing.
if(HH_PYTHON_BUILT)
  add_test(NAME python_module COMMAND sh -c
           "\"$0\" -c 'import numpy, pytest' 2>/dev/null || { echo 'skipped: python3 has no numpy or pytest'; exit 77; }; ls \"$1\"/hedgehog/_hedgehog*.so >/dev/null 2>&1 || { echo 'skipped: the module is not built in this tree (cmake --build . --target _hedgehog)'; exit 77; }; PYTHONPATH=\"$1\" \"$0\" -m pytest -q -p no:cacheprovider \"$2\""
           ${Python_EXECUTABLE} ${CMAKE_BINARY_DIR}/python ${CMAKE_CURRENT_SOURCE_DIR}/tests/python)
  set_tests_properties(python_module PROPERTIES SKIP_RETURN_CODE 77 PASS_REGULAR_EXPRESSION "[0-9]+ passed"
                       FAIL_REGULAR_EXPRESSION "[0-9]+ failed|[0-9]+ errors?")
else()
  add_test(NAME python_module COMMAND sh -c "echo 'skipped: the Python module was not built (pip install nanobind, then reconfigure)'; exit 77")
  set_tests_properties(python_module PROPERTIES SKIP_RETURN_CODE 77)
endif()
