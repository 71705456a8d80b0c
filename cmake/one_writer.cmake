# Two runs into one --out started at the same moment (issue 36: both exited 0, and metrics.jsonl
# held lines of both, some glued together): execute_process starts its COMMANDs at once (a
# pipeline; each run's output goes to its own log, so nothing flows through the pipe). One run
# must complete and the other refuse before any work, naming the holder's pid and host
# (train::lock_output_folder); the winner's metrics.jsonl must hold JSON lines only.
#   cmake -DAPP=<exe> -DOUT=<dir> -DARGS="..." [-DMETRICS=<file in OUT>] -P one_writer.cmake
separate_arguments(args UNIX_COMMAND "${ARGS}")
file(REMOVE_RECURSE "${OUT}" "${OUT}-1.log" "${OUT}-2.log")
get_filename_component(parent "${OUT}" DIRECTORY)
file(MAKE_DIRECTORY "${parent}")
execute_process(COMMAND sh -c "\"$0\" \"$@\" >\"${OUT}-1.log\" 2>&1" ${APP} ${args} --out ${OUT}
                COMMAND sh -c "\"$0\" \"$@\" >\"${OUT}-2.log\" 2>&1" ${APP} ${args} --out ${OUT}
                RESULTS_VARIABLE rcs TIMEOUT 600)
file(READ "${OUT}-1.log" log1)
file(READ "${OUT}-2.log" log2)
list(GET rcs 0 rc1)
list(GET rcs 1 rc2)
set(refusal "error: --out [^\n]*: another run is writing into this folder \\(pid [0-9]+ on host [^;]+; lock file [^\n]*\\.hh-lock\\)")
if(rc1 EQUAL 0 AND NOT rc2 EQUAL 0)
  set(loser "${log2}")
elseif(rc2 EQUAL 0 AND NOT rc1 EQUAL 0)
  set(loser "${log1}")
else()
  message(FATAL_ERROR "expected one run to complete and one to be refused, got exit codes ${rc1} and ${rc2}:\n"
                      "--- run 1:\n${log1}\n--- run 2:\n${log2}")
endif()
if(NOT loser MATCHES "${refusal}")
  message(FATAL_ERROR "the second run did not name the holder:\n${loser}")
endif()
if(DEFINED METRICS)
  file(STRINGS "${OUT}/${METRICS}" lines)
  list(LENGTH lines n)
  foreach(line IN LISTS lines)
    string(JSON type ERROR_VARIABLE bad TYPE "${line}")
    if(bad OR NOT type STREQUAL "OBJECT")
      message(FATAL_ERROR "${OUT}/${METRICS}: a line that is not a JSON object: ${line}")
    endif()
  endforeach()
  message(STATUS "${METRICS}: ${n} JSON lines")
endif()
string(REGEX MATCH "${refusal}" said "${loser}")
message(STATUS "one run completed, the other was refused: ${said}")
