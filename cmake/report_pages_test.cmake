# The apps' report pages in headless Chromium (tests/report/report_pages_test.py, issue 35 item 4):
# small runs of convert_demo, hf_run, lra and ar_probe write their pages; no page may be wider than
# a 1024 px window and no text of a figure (titles, labels, legends) may fall outside it, as the
# browser lays them out. Skipped (exit 77) without Chromium.
find_program(HH_PYTHON3_PAGES python3)
if(HH_PYTHON3_PAGES)
  add_test(NAME hh_report_pages
           COMMAND ${HH_PYTHON3_PAGES} ${CMAKE_CURRENT_SOURCE_DIR}/tests/report/report_pages_test.py
                   $<TARGET_FILE_DIR:convert_demo> ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(hh_report_pages PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
