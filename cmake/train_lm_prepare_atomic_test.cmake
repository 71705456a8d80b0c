# CTest case train_lm_prepare_keeps_previous (cmake -P), issue 27's repro: `train_lm prepare` into a
# folder that holds a preparation, with an input that is not UTF-8 (printf 'ok\n\xff bad\n'), must
# exit non-zero with "error: ... invalid UTF-8" and leave the previous meta.json and shards byte for
# byte as they were (it used to delete them first and leave an empty folder).
# -D: TRAIN_LM (the executable), INPUT (the WikiText fixture), TOKENIZER, WORK_DIR.
foreach(v TRAIN_LM INPUT TOKENIZER WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "train_lm_prepare_atomic_test.cmake: -D${v}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(out ${WORK_DIR}/data)
execute_process(COMMAND ${TRAIN_LM} prepare --input ${INPUT} --tokenizer ${TOKENIZER} --out ${out} --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train_lm_prepare_keeps_previous: the first preparation failed (${rc}):\n${o}\n${e}")
endif()

# Every entry of the folder with its SHA-256, hidden ones included, but the folder's lock file
# (.hh-lock: it names the run holding the folder, train/run_dir.h lock_output_folder).
function(snapshot var)
  file(GLOB entries LIST_DIRECTORIES true RELATIVE ${out} ${out}/* ${out}/.*)
  list(REMOVE_ITEM entries .hh-lock)
  list(SORT entries)
  set(s "")
  foreach(f ${entries})
    if(IS_DIRECTORY ${out}/${f})
      string(APPEND s "${f} <folder>\n")
    else()
      file(SHA256 ${out}/${f} h)
      string(APPEND s "${f} ${h}\n")
    endif()
  endforeach()
  set(${var} "${s}" PARENT_SCOPE)
endfunction()
snapshot(before)
if(NOT before MATCHES "meta.json" OR NOT before MATCHES "train_00000.bin")
  message(FATAL_ERROR "train_lm_prepare_keeps_previous: the first preparation wrote no shards:\n${before}")
endif()

execute_process(COMMAND sh -c "printf 'ok\\n\\377 bad\\n' > '${WORK_DIR}/bad.txt'")
execute_process(COMMAND ${TRAIN_LM} prepare --input ${WORK_DIR}/bad.txt --tokenizer ${TOKENIZER} --out ${out} --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
if(rc EQUAL 0 OR NOT "${o}${e}" MATCHES "error: .*bad.txt:2: invalid UTF-8")
  message(FATAL_ERROR "train_lm_prepare_keeps_previous: expected an invalid UTF-8 error, got exit ${rc}:\n${o}\n${e}")
endif()
snapshot(after)
if(NOT after STREQUAL before)
  message(FATAL_ERROR "train_lm_prepare_keeps_previous: the failed preparation changed ${out}:\nbefore:\n${before}\nafter:\n${after}")
endif()
message(STATUS "train_lm_prepare_keeps_previous: refused (exit ${rc}), ${out} unchanged")
