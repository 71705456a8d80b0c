# hf_run --save-quantized end to end (issue 37 item 2; nn/models/hf_int8.h): the quantized folder of
# gpt2-tiny runs with the same logits, hidden states and ids, bit for bit, as the f32 folder with
# --weights int8; --weights f32 of it, --save-quantized without --weights int8, with an input, or
# into the --model folder are errors before anything is written; transformers' Auto class refuses
# the folder (skipped visibly without transformers).
# cmake -DHF_RUN=<hf_run> -DHF=<tests/fixtures/hf> -DWORK=<scratch folder> -DPYTHON=<python3> -P int8_folder_test.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# Runs hf_run with ARGN; `ok` TRUE: must succeed, FALSE: must fail with `pattern` in its output.
function(hf_run ok pattern)
  execute_process(COMMAND ${HF_RUN} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(all "${out}${err}")
  if(ok AND NOT rc EQUAL 0)
    message(FATAL_ERROR "hf_run ${ARGN} failed (${rc}):\n${all}")
  elseif(NOT ok AND rc EQUAL 0)
    message(FATAL_ERROR "hf_run ${ARGN} succeeded; expected an error matching '${pattern}':\n${all}")
  endif()
  if(NOT all MATCHES "${pattern}")
    message(FATAL_ERROR "hf_run ${ARGN}: output does not match '${pattern}':\n${all}")
  endif()
  set(last_output "${all}" PARENT_SCOPE)
endfunction()

hf_run(TRUE "wrote the int8 folder" --model ${HF}/gpt2-tiny --weights int8 --save-quantized ${WORK}/q)
foreach(f config.json model.safetensors generation_config.json)
  if(NOT EXISTS ${WORK}/q/${f})
    message(FATAL_ERROR "the quantized folder lacks ${f}")
  endif()
endforeach()
file(READ ${WORK}/q/config.json config)
if(NOT config MATCHES "\"quant_method\": \"hedgehog_int8\"")
  message(FATAL_ERROR "config.json has no hedgehog_int8 quantization_config:\n${config}")
endif()

set(run_args --ids 5,17,99,42 --temperature 0 --max-new-tokens 6 --hidden-states)
hf_run(TRUE "generated ids" --model ${WORK}/q ${run_args} --out ${WORK}/from_folder)
string(REGEX MATCH "generated ids: [^\n]*" ids_folder "${last_output}")
hf_run(TRUE "generated ids" --model ${HF}/gpt2-tiny --weights int8 ${run_args} --out ${WORK}/at_load)
string(REGEX MATCH "generated ids: [^\n]*" ids_load "${last_output}")
if(NOT ids_folder STREQUAL ids_load)
  message(FATAL_ERROR "generated ids differ: quantized folder '${ids_folder}', --weights int8 '${ids_load}'")
endif()
foreach(f logits.npy hidden_states.npy)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/from_folder/${f} ${WORK}/at_load/${f}
                  RESULT_VARIABLE same)
  if(NOT same EQUAL 0)
    message(FATAL_ERROR "${f} differs between the quantized folder and the f32 folder with --weights int8")
  endif()
endforeach()
file(READ ${WORK}/from_folder/results.json results)
if(NOT results MATCHES "\"weights\": \"int8\"")
  message(FATAL_ERROR "results.json of the quantized folder does not say int8:\n${results}")
endif()

hf_run(FALSE "error: --weights f32: .*holds int8 weights.*load as int8 only" --model ${WORK}/q --weights f32 --ids 1,2)
hf_run(FALSE "error: --save-quantized writes int8 weights: give --weights int8"
       --model ${HF}/gpt2-tiny --save-quantized ${WORK}/x)
hf_run(FALSE "error: --save-quantized writes a folder and runs nothing"
       --model ${HF}/gpt2-tiny --weights int8 --save-quantized ${WORK}/x --ids 1,2)
file(COPY ${HF}/gpt2-tiny/ DESTINATION ${WORK}/src)
file(SHA256 ${WORK}/src/model.safetensors before)
hf_run(FALSE "error: --save-quantized .*this is the --model folder"
       --model ${WORK}/src --weights int8 --save-quantized ${WORK}/src/.)
file(SHA256 ${WORK}/src/model.safetensors after)
if(NOT before STREQUAL after)
  message(FATAL_ERROR "--save-quantized into the --model folder changed its weights")
endif()
# A source that fails to load (an unknown quant_method, no weights) leaves no folder behind.
file(COPY ${WORK}/q/ DESTINATION ${WORK}/bad)
file(READ ${WORK}/bad/config.json bad_config)
string(REPLACE "hedgehog_int8" "gptq" bad_config "${bad_config}")
file(WRITE ${WORK}/bad/config.json "${bad_config}")
hf_run(FALSE "error: .*quant_method 'gptq' is not one the engine reads" --model ${WORK}/bad --weights int8
       --save-quantized ${WORK}/x)
file(REMOVE ${WORK}/src/model.safetensors)  # fails in the load, after the folder's checks
hf_run(FALSE "error: hf: .*has neither model.safetensors" --model ${WORK}/src --weights int8 --save-quantized ${WORK}/x)
if(EXISTS ${WORK}/x)
  message(FATAL_ERROR "a refused --save-quantized created its folder")
endif()

# transformers must refuse the folder rather than read the int8 values as float weights.
execute_process(COMMAND ${PYTHON} -c "import transformers" RESULT_VARIABLE has_tf OUTPUT_QUIET ERROR_QUIET)
if(NOT has_tf EQUAL 0)
  message("skipped: transformers is not installed (the refusal of the quantized folder is not checked)")
else()
  execute_process(COMMAND ${PYTHON} -c
    "import sys, transformers\ntry:\n    transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])\nexcept ValueError as e:\n    print('refused:', e)\n    sys.exit(0)\nprint('loaded')\nsys.exit(1)"
    ${WORK}/q RESULT_VARIABLE refused OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT refused EQUAL 0 OR NOT out MATCHES "hedgehog_gpt2")
    message(FATAL_ERROR "transformers did not refuse the quantized folder:\n${out}${err}")
  endif()
endif()
file(REMOVE_RECURSE ${WORK})
