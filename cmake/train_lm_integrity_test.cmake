# CTest case train_lm_resume_corrupt (cmake -P), issue 27's repro: a finished train_lm run whose
# checkpoint.safetensors is damaged, resumed with --resume, must end with "error: ..." naming the
# file and the tensor and a non-zero exit, never "ok" (it used to exit 0 with status ok and re-export
# the damaged weights). Two damages of model.transformer.wte.weight:
#   flip   one byte of its data (the checksum catches it);
#   nan    NaN written over its first element, in a file without checksums (as written before they
#          existed: the checksum keys renamed away), so only the finiteness check can catch it; the
#          load warns about the missing checksums. (NaN under a valid checksum: tests/test_integrity.cpp.)
# -D: TRAIN_LM (the executable), DATA (a prepared folder), WORK_DIR.
foreach(v TRAIN_LM DATA WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "train_lm_integrity_test.cmake: -D${v}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
set(args train --data ${DATA} --preset tiny --context 32 --steps 3 --eval-every 0 --samples 0 --quiet
    --attentions softmax --out ${WORK_DIR}/runs)
execute_process(COMMAND ${TRAIN_LM} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "softmax .* ok")
  message(FATAL_ERROR "train_lm_resume_corrupt: the first run failed (${rc}):\n${out}\n${err}")
endif()
set(ckpt ${WORK_DIR}/runs/softmax/checkpoint.safetensors)
set(tensor model.transformer.wte.weight)
file(COPY_FILE ${ckpt} ${WORK_DIR}/good.safetensors)

# The header: an 8-byte little-endian length N, then N bytes of JSON.
file(READ ${ckpt} len_hex LIMIT 8 HEX)
set(n 0)
foreach(i 7 6 5 4 3 2 1 0)
  math(EXPR at "${i} * 2")
  string(SUBSTRING ${len_hex} ${at} 2 byte)
  math(EXPR n "${n} * 256 + 0x${byte}")
endforeach()
file(READ ${ckpt} header OFFSET 8 LIMIT ${n})
string(JSON begin GET "${header}" ${tensor} data_offsets 0)
math(EXPR data_at "8 + ${n} + ${begin}")

# Writes the bytes given as octal escapes (printf) at offset `at` of the checkpoint, in place.
function(poke at octal)
  execute_process(COMMAND sh -c "printf '${octal}' | dd of='${ckpt}' bs=1 seek=${at} conv=notrunc 2>/dev/null"
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train_lm_resume_corrupt: writing into ${ckpt} failed")
  endif()
endfunction()

# Resumes and checks the error; `fragments` must all appear in the output.
function(resume_fails what)
  execute_process(COMMAND ${TRAIN_LM} ${args} --resume RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(all "${out}\n${err}")
  if(rc EQUAL 0 OR all MATCHES "softmax [^\n]* ok")
    message(FATAL_ERROR "train_lm_resume_corrupt (${what}): the damaged checkpoint was resumed (exit ${rc}):\n${all}")
  endif()
  foreach(frag "error: " ${ckpt} "'${tensor}'" ${ARGN})
    string(FIND "${all}" "${frag}" pos)
    if(pos EQUAL -1)
      message(FATAL_ERROR "train_lm_resume_corrupt (${what}): the output lacks \"${frag}\":\n${all}")
    endif()
  endforeach()
  message(STATUS "train_lm_resume_corrupt (${what}): refused, exit ${rc}")
endfunction()

# flip: the first data byte of the embedding, XOR 0x10 (read it, write it back changed).
file(READ ${ckpt} b0 OFFSET ${data_at} LIMIT 1 HEX)
math(EXPR flipped "0x${b0} ^ 0x10" OUTPUT_FORMAT DECIMAL)
math(EXPR o1 "${flipped} / 64")
math(EXPR o2 "(${flipped} / 8) % 8")
math(EXPR o3 "${flipped} % 8")
poke(${data_at} "\\${o1}${o2}${o3}")
resume_fails(flip "checksum mismatch")

# nan: the good file, checksum keys renamed away (same length: the header keeps its size), then
# NaN (0x7fc00000, little-endian) over the first element.
file(COPY_FILE ${WORK_DIR}/good.safetensors ${ckpt})
string(REPLACE "hedgehog.checksums" "hedgehog.unchecked" plain "${header}")
string(REPLACE "hedgehog.xxh3." "hedgehog.none." plain "${plain}")
file(WRITE ${WORK_DIR}/header.txt "${plain}")
execute_process(COMMAND sh -c "dd if='${WORK_DIR}/header.txt' of='${ckpt}' bs=1 seek=8 conv=notrunc 2>/dev/null")
poke(${data_at} "\\000\\000\\300\\177")
resume_fails(nan "non-finite" "warning: checkpoint ${ckpt} has no checksums")
