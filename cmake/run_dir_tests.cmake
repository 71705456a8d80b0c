# The run folder (train/run_dir.h) in every app that writes an output folder: --out / (the root,
# issue 27: five apps wrote into it as root) is refused with "error: --out /: ..." before any work,
# and a failed run into an existing --out (a full disk injected at every checkpoint write) leaves
# the previous run's results as they were.
set(RD_OUT ${CMAKE_CURRENT_BINARY_DIR}/run_dir_tests)
set(RD_ROOT_CASES
    ar_probe "ar_probe ${AR_TINY_TEXT} --epochs 1 --feature-map softmax"
    lra "lra --preset tiny --generate --quiet --tasks listops --attentions elu"
    train_lm_train "train_lm train --data ${TLM}/data --preset tiny --quiet"
    train_lm_prepare "train_lm prepare --input ${LMFX}/wikitext --quiet"
    convert_bert "convert_bert --model ${HF}/bert-tiny-tok --task cola --data ${GLUE}/CoLA --preset tiny --quiet"
    convert_demo "convert_demo --part ar --quiet"
    hf_run "hf_run --model ${HF}/gpt2-tiny --ids 1")
list(LENGTH RD_ROOT_CASES n)
math(EXPR last "${n} / 2 - 1")
foreach(i RANGE ${last})
  math(EXPR a "2 * ${i}")
  math(EXPR b "2 * ${i} + 1")
  list(GET RD_ROOT_CASES ${a} name)
  list(GET RD_ROOT_CASES ${b} args)
  separate_arguments(args UNIX_COMMAND "${args}")
  add_test(NAME ${name}_rejects_out_root COMMAND ${args} --out /)
  # Refused before anything is read, generated or trained.
  set_tests_properties(${name}_rejects_out_root PROPERTIES PASS_REGULAR_EXPRESSION "error: --out /: .*system folder"
                       FAIL_REGULAR_EXPRESSION "associative recall:|examples from|train_lm: [0-9]+ run|prepared |teacher|loaded ")
endforeach()
set_tests_properties(train_lm_train_rejects_out_root PROPERTIES FIXTURES_REQUIRED train_lm_data)
# Through a symlink and "..": the folder they resolve to decides.
add_test(NAME lra_rejects_out_root_dotdot COMMAND lra --preset tiny --generate --quiet --out ${RD_OUT}/../../../../../../../../../../..)
set_tests_properties(lra_rejects_out_root_dotdot PROPERTIES PASS_REGULAR_EXPRESSION "error: --out .*resolves to '/'"
                     FAIL_REGULAR_EXPRESSION "examples from")

add_test(NAME ar_probe_keeps_previous_results COMMAND ${CMAKE_COMMAND} -DAPP=$<TARGET_FILE:ar_probe> -DOUT=${RD_OUT}/ar
         "-DARGS=${AR_TINY_TEXT} --epochs 1 --feature-map softmax,elu"
         "-DARGS2=${AR_TINY_TEXT} --epochs 1 --feature-map softmax,elu --lr 0.01"
         "-DFILES=config.json;results.json;results.csv;index.html;softmax/result.json;elu/result.json;training_curves.svg"
         -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/keeps_previous.cmake)
add_test(NAME lra_keeps_previous_results COMMAND ${CMAKE_COMMAND} -DAPP=$<TARGET_FILE:lra> -DOUT=${RD_OUT}/lra
         "-DARGS=--preset tiny --generate --quiet --tasks listops --attentions elu --steps 20 --eval-every 10"
         "-DARGS2=--preset tiny --generate --quiet --tasks listops --attentions elu --steps 21 --eval-every 10"
         "-DFILES=config.json;table6.csv;results.json;report.html;listops/elu/result.json"
         -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/keeps_previous.cmake)
# lra --generate: the data folder is built beside the previous one and swapped in when complete
# (core/replace_dir.h): a full disk at the last file the generator writes (another seed, so every
# file would differ) leaves the previous data as it was, the two files written before it included.
add_test(NAME lra_generate_keeps_previous_data COMMAND ${CMAKE_COMMAND} -DAPP=$<TARGET_FILE:lra> -DOUT=${RD_OUT}/lra_gen
         "-DARGS=--preset tiny --generate --quiet --tasks listops --attentions elu --steps 2 --eval-every 1"
         "-DARGS2=--preset tiny --generate --quiet --tasks listops --attentions elu --steps 2 --eval-every 1 --seed 5"
         "-DFILES=data/listops/basic_train.tsv;data/listops/basic_val.tsv;data/listops/basic_test.tsv"
         -DFAULT=basic_test.tsv -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/keeps_previous.cmake)
set_tests_properties(ar_probe_keeps_previous_results lra_keeps_previous_results lra_generate_keeps_previous_data
                     PROPERTIES PASS_REGULAR_EXPRESSION "previous results kept")

# One writer per --out (train::lock_output_folder, issue 36): two runs started at once into one
# folder; one completes, the other is refused naming the holder (cmake/one_writer.cmake).
add_test(NAME train_lm_one_writer_per_out COMMAND ${CMAKE_COMMAND} -DAPP=$<TARGET_FILE:train_lm> -DOUT=${RD_OUT}/one_writer_lm
         "-DARGS=train --data ${TLM}/data --preset tiny --context 32 --steps 30 --eval-every 10 --samples 0 --quiet --attentions softmax"
         -DMETRICS=softmax/metrics.jsonl -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/one_writer.cmake)
add_test(NAME ar_probe_one_writer_per_out COMMAND ${CMAKE_COMMAND} -DAPP=$<TARGET_FILE:ar_probe> -DOUT=${RD_OUT}/one_writer_ar
         "-DARGS=${AR_TINY_TEXT} --epochs 1 --feature-map softmax" -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/one_writer.cmake)
set_tests_properties(train_lm_one_writer_per_out ar_probe_one_writer_per_out PROPERTIES
                     PASS_REGULAR_EXPRESSION "one run completed, the other was refused")
set_tests_properties(train_lm_one_writer_per_out PROPERTIES FIXTURES_REQUIRED train_lm_data)
# Several runs: after each, the whole batch's progress and an overall estimate of the time left
# (train/run_scheduler.h's overall_label); the last line says nothing is left.
add_test(NAME ar_probe_overall_eta COMMAND ar_probe ${AR_TINY} --epochs 1 --feature-map softmax,elu,hedgehog
         --jobs 2 --out ${RD_OUT}/ar_eta)
set_tests_properties(ar_probe_overall_eta PROPERTIES PASS_REGULAR_EXPRESSION
                     "ar_probe: 1 of 3 runs done, [0-9:]+ elapsed, about [0-9:?]+ left.*ar_probe: 3 of 3 runs done, [0-9:]+ elapsed, about 0:00 left")
