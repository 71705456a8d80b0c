# train_lm end to end on the committed WikiText fixture (tests/fixtures/wikitext: hand-written wiki
# text and gpt2-bytes, a small byte-level GPT-2 tokenizer): prepare, train two attentions, resume,
# sample. Bad input must give "error: " and a non-zero exit before any training.
set(LMFX ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures)
set(TLM ${CMAKE_CURRENT_BINARY_DIR}/train_lm_tests)
add_test(NAME train_lm_prepare COMMAND train_lm prepare --input ${LMFX}/wikitext --tokenizer ${LMFX}/wikitext/gpt2-bytes
         --out ${TLM}/data --quiet)
set_tests_properties(train_lm_prepare PROPERTIES FIXTURES_SETUP train_lm_data
                     PASS_REGULAR_EXPRESSION "train +[0-9]+ tokens.*valid +[0-9]+ tokens")
set(TLM_TINY train --data ${TLM}/data --preset tiny --context 32 --steps 12 --eval-every 6 --samples 2
    --sample-tokens 6 --quiet --attentions softmax,hedgehog)
add_test(NAME train_lm_tiny COMMAND train_lm ${TLM_TINY} --out ${TLM}/runs)
set_tests_properties(train_lm_tiny PROPERTIES FIXTURES_REQUIRED train_lm_data FIXTURES_SETUP train_lm_runs
                     PASS_REGULAR_EXPRESSION "softmax +[0-9.]+ +[0-9.]+ +- .*ok\nhedgehog +[0-9.]+ .*ok\n.*samples from hedgehog.*report: ")
# A gated attention (GLA's gate on hedgehog): trained, named hedgehog+gla, sampled through the
# gated recurrent step, exported with config.json hedgehog.gate.
add_test(NAME train_lm_tiny_gated COMMAND train_lm train --data ${TLM}/data --preset tiny --context 32 --steps 6
         --eval-every 6 --samples 1 --sample-tokens 4 --quiet --attentions hedgehog --gate gla --out ${TLM}/gated)
set_tests_properties(train_lm_tiny_gated PROPERTIES FIXTURES_REQUIRED train_lm_data
                     PASS_REGULAR_EXPRESSION "hedgehog\\+gla +[0-9.]+ .*ok\n.*samples from hedgehog\\+gla.*report: ")
# The gated delta rule (Gated DeltaNet's gate on hedgehog) likewise: trained through the chunked op,
# sampled through its decoding step, exported with hedgehog.gate "delta".
add_test(NAME train_lm_tiny_gated_delta COMMAND train_lm train --data ${TLM}/data --preset tiny --context 32 --steps 6
         --eval-every 6 --samples 1 --sample-tokens 4 --quiet --attentions hedgehog --gate delta --out ${TLM}/gated_delta)
set_tests_properties(train_lm_tiny_gated_delta PROPERTIES FIXTURES_REQUIRED train_lm_data
                     PASS_REGULAR_EXPRESSION "hedgehog\\+delta +[0-9.]+ .*ok\n.*samples from hedgehog\\+delta.*report: ")
# GLA's output (--gate-output groupnorm: no normalizer, an RMSNorm per head) likewise, exported
# with config.json hedgehog.gate_output "groupnorm".
add_test(NAME train_lm_tiny_gated_groupnorm
         COMMAND sh -c "\"$0\" \"$@\" && grep -q '\"gate_output\": *\"groupnorm\"' '${TLM}/gated_groupnorm/hedgehog+gla/model/config.json' && echo 'exported gate_output groupnorm'"
         $<TARGET_FILE:train_lm> train --data ${TLM}/data --preset tiny --context 32 --steps 6 --eval-every 6
         --samples 1 --sample-tokens 4 --quiet --attentions hedgehog --gate gla --gate-output groupnorm
         --out ${TLM}/gated_groupnorm)
set_tests_properties(train_lm_tiny_gated_groupnorm PROPERTIES FIXTURES_REQUIRED train_lm_data PASS_REGULAR_EXPRESSION
                     "hedgehog\\+gla +[0-9.]+ .*ok\n.*samples from hedgehog\\+gla.*report: .*exported gate_output groupnorm")
# The exported folder is an HF GPT-2 folder that hf_run and train_lm sample load (Hedgehog attention,
# recurrent decoding), with the tokenizer files copied.
add_test(NAME train_lm_sample COMMAND train_lm sample --model ${TLM}/runs/hedgehog/model --tokens 5 --samples 1
         --prompt "The river")
set_tests_properties(train_lm_sample PROPERTIES FIXTURES_REQUIRED train_lm_runs PASS_REGULAR_EXPRESSION "^The river.*\n---")
# A run's checkpoint samples too (the tokenizer is the one its data was prepared with).
add_test(NAME train_lm_sample_checkpoint COMMAND train_lm sample --checkpoint ${TLM}/runs/softmax/checkpoint.safetensors
         --tokens 5 --samples 2 --prompt "The river")
set_tests_properties(train_lm_sample_checkpoint PROPERTIES FIXTURES_REQUIRED train_lm_runs
                     PASS_REGULAR_EXPRESSION "^The river.*\n---\nThe river.*\n---")
add_test(NAME train_lm_export_hf_run COMMAND hf_run --model ${TLM}/runs/softmax/model --prompt "The" --temperature 0
         --max-new-tokens 3 --stop-at-eos=false)
set_tests_properties(train_lm_export_hf_run PROPERTIES FIXTURES_REQUIRED train_lm_runs
                     PASS_REGULAR_EXPRESSION "generated ids: \\[[0-9]+,[0-9]+,[0-9]+\\]")
# The byte-level tokenizer (prepare's default) has no files: the export writes it as GPT-2 files,
# which hf_run reads as the same tokenizer ("Hé" is the bytes 72, 195, 169).
add_test(NAME train_lm_prepare_bytes COMMAND train_lm prepare --input ${LMFX}/wikitext --out ${TLM}/data_bytes --quiet)
set_tests_properties(train_lm_prepare_bytes PROPERTIES FIXTURES_SETUP train_lm_data_bytes
                     PASS_REGULAR_EXPRESSION "vocabulary 257")
add_test(NAME train_lm_tiny_bytes COMMAND train_lm train --data ${TLM}/data_bytes --preset tiny --context 32 --steps 2
         --samples 0 --quiet --attentions softmax --out ${TLM}/runs_bytes)
set_tests_properties(train_lm_tiny_bytes PROPERTIES FIXTURES_REQUIRED train_lm_data_bytes
                     FIXTURES_SETUP train_lm_runs_bytes PASS_REGULAR_EXPRESSION "softmax +[0-9.]+ .*ok
")
add_test(NAME train_lm_export_bytes_tokenizer COMMAND hf_run --model ${TLM}/runs_bytes/softmax/model --prompt "Hé"
         --temperature 0 --max-new-tokens 1)
set_tests_properties(train_lm_export_bytes_tokenizer PROPERTIES FIXTURES_REQUIRED train_lm_runs_bytes
                     PASS_REGULAR_EXPRESSION "prompt ids: +\\[72,195,169\\]")
# --resume with other settings is refused before any work; with the same ones the finished runs stand.
add_test(NAME train_lm_resume_other COMMAND train_lm ${TLM_TINY} --dim 64 --resume --out ${TLM}/runs)
set_tests_properties(train_lm_resume_other PROPERTIES FIXTURES_REQUIRED train_lm_runs
                     PASS_REGULAR_EXPRESSION "error: checkpoint [^\n]*another configuration \\(differs in /model/n_embd\\)")
add_test(NAME train_lm_resume_same COMMAND train_lm ${TLM_TINY} --resume --out ${TLM}/runs)
set_tests_properties(train_lm_resume_same PROPERTIES FIXTURES_REQUIRED train_lm_runs
                     DEPENDS "train_lm_resume_other;train_lm_sample;train_lm_export_hf_run;train_lm_sample_checkpoint"
                     PASS_REGULAR_EXPRESSION "softmax +[0-9.]+ .*ok\nhedgehog +[0-9.]+ .*ok\n" FAIL_REGULAR_EXPRESSION "error: ")

# Pairs: arguments (one string, split like a shell line) and a fragment of the expected error.
set(TLM_BAD ${TLM}/bad)
file(MAKE_DIRECTORY ${TLM_BAD}/empty_dir)
file(WRITE ${TLM_BAD}/empty.txt "")
set(T "train --data ${TLM}/data --preset tiny --out ${TLM_BAD}/out")
set(TRAIN_LM_BAD
    "" "usage: train_lm prepare|train|sample"
    "fit" "unknown command 'fit'"
    "prepare --out ${TLM_BAD}/p" "--input is required"
    "prepare --input /nonexistent/hh --out ${TLM_BAD}/p" "/nonexistent/hh does not exist"
    "prepare --input ${TLM_BAD}/empty.txt --out ${TLM_BAD}/p" "empty.txt"
    "prepare --input ${TLM_BAD}/empty_dir --out ${TLM_BAD}/p" "empty_dir"
    "prepare --input ${LMFX}/wikitext/gpt2-bytes/model.safetensors --out ${TLM_BAD}/p" "model.safetensors"
    "prepare --input ${LMFX}/wikitext --tokenizer /nonexistent/tok --out ${TLM_BAD}/p" "/nonexistent/tok"
    "prepare --input ${LMFX}/wikitext --out ${CMAKE_CURRENT_SOURCE_DIR}/CMakeLists.txt" "not a folder"
    "train --preset tiny --out ${TLM_BAD}/out" "--data is required"
    "train --data /nonexistent/prepared --out ${TLM_BAD}/out" "/nonexistent/prepared"
    "${T} --positions 64 --context 65" "--context 65 is longer than the model's 64 positions"
    "${T} --attentions softmax,nope" "unknown attention 'nope'"
    "${T} --attentions softmax,softmax" "'softmax' is given twice"
    "${T} --gate delta,delta" "'delta' is listed twice"
    "${T} --gate mamba" "unknown gate 'mamba'"
    "${T} --dim 30 --heads 4" "n_embd (30) must be a positive multiple of n_head (4)"
    "${T} --batch 6 --accumulation 4" "--batch 6 must be a positive multiple of --accumulation (4)"
    "${T} --schedule onecycle --steps 0" "--steps"
    "${T} --schedule zigzag" "zigzag"
    "${T} --dist carrier-pigeon" "carrier-pigeon"
    "train --data ${TLM}/data --preset huge --out ${TLM_BAD}/out" "--preset: unknown preset 'huge'"
    "${T} --bogus 1" "unknown flag --bogus"
    "${T} --device tpu" "tpu"
    "${T} --top-p 0" "--top-p"
    "${T} --init /nonexistent/model" "--init: /nonexistent/model does not exist"
    "${T} --init ${LMFX}/hf/llama-tiny-tok" "holds a LlamaForCausalLM, this run trains a GPT2LMHeadModel"
    "${T} --arch mamba" "--arch: unknown architecture 'mamba' (valid: gpt2, llama)"
    "${T} --rope-theta 500000" "--rope-theta is for --arch llama"
    "train --data ${TLM}/data --preset tiny --out ${CMAKE_CURRENT_SOURCE_DIR}/CMakeLists.txt" "not a folder"
    "sample --model /nonexistent/model" "/nonexistent/model is not a folder"
    "sample" "give one of --model and --checkpoint"
    "sample --checkpoint ${LMFX}/wikitext/gpt2-bytes/model.safetensors" "is not a train_lm checkpoint")
list(LENGTH TRAIN_LM_BAD n)
math(EXPR last "${n} / 2 - 1")
foreach(i RANGE ${last})
  math(EXPR a "2 * ${i}")
  math(EXPR b "2 * ${i} + 1")
  list(GET TRAIN_LM_BAD ${a} args)
  list(GET TRAIN_LM_BAD ${b} msg)
  separate_arguments(args UNIX_COMMAND "${args}")
  add_test(NAME train_lm_rejects_${i} COMMAND train_lm ${args})
  string(REGEX REPLACE "([][().*+?^$|\\\\])" "\\\\\\1" msg_re "${msg}")
  # The cases share output folders, whose lock (one writer) must not make one fail for another.
  set_tests_properties(train_lm_rejects_${i} PROPERTIES PASS_REGULAR_EXPRESSION "${msg_re}"
                       FAIL_REGULAR_EXPRESSION "train_lm: [0-9]+ run" RESOURCE_LOCK train_lm_bad_out)
  if(NOT i EQUAL 0)
    set_tests_properties(train_lm_rejects_${i} PROPERTIES PASS_REGULAR_EXPRESSION "error: .*${msg_re}"
                         FIXTURES_REQUIRED train_lm_data)
  endif()
endforeach()

# Data parallelism: 2 MPI ranks train the same global batches as one process (each rank half of
# every batch); the exported weights must agree to 5e-6. Why not bit for bit: the gradients are
# averaged as (sum of 4 rows + sum of 4 rows) / 2 instead of one sum of 8 rows, so they differ in
# their last bits; AdamW turns that into ~lr·1e-7/eps-sized differences where a gradient is
# rounding noise (the key part of c_attn's bias, whose true gradient is 0): measured 7.1e-7
# (softmax) and 3.6e-7 (Hedgehog) after 6 steps. A real error (a missing division, a rank on other
# windows) moves the weights by more than 1e-3 (tests of dist_check).
if(HH_WITH_MPI AND MPIEXEC_EXECUTABLE)
  set(TLM_DP train --data ${TLM}/data --preset tiny --context 32 --steps 6 --batch 8 --eval-every 0 --samples 0
      --quiet --attentions softmax,hedgehog)
  add_test(NAME train_lm_dp_single COMMAND train_lm ${TLM_DP} --dist none --out ${TLM}/dp1)
  add_test(NAME train_lm_dp_mpi2 COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe
           --allow-run-as-root $<TARGET_FILE:train_lm> ${TLM_DP} --dist mpi --out ${TLM}/dp2)
  set_tests_properties(train_lm_dp_single train_lm_dp_mpi2 PROPERTIES FIXTURES_REQUIRED train_lm_data
                       ENVIRONMENT "OMP_NUM_THREADS=1" TIMEOUT 300 PASS_REGULAR_EXPRESSION "2 run\\(s\\).*hedgehog .* ok")
  set_tests_properties(train_lm_dp_single PROPERTIES FIXTURES_SETUP train_lm_dp1)
  set_tests_properties(train_lm_dp_mpi2 PROPERTIES FIXTURES_SETUP train_lm_dp2 PASS_REGULAR_EXPRESSION "2 rank\\(s\\)")
  foreach(m softmax hedgehog)
    add_test(NAME train_lm_dp_compare_${m} COMMAND dist_check --out ${TLM}/dp2/${m}/model/model.safetensors
             --compare ${TLM}/dp1/${m}/model/model.safetensors --tol 5e-6)
    set_tests_properties(train_lm_dp_compare_${m} PROPERTIES FIXTURES_REQUIRED "train_lm_dp1;train_lm_dp2"
                         PASS_REGULAR_EXPRESSION "max \\|delta\\| = ")
  endforeach()
endif()

# issue 27: a finished run's checkpoint with a flipped byte or NaN weights is refused on --resume
# (error naming the file and the tensor, non-zero exit), never resumed as "ok".
add_test(NAME train_lm_resume_corrupt COMMAND ${CMAKE_COMMAND} -DTRAIN_LM=$<TARGET_FILE:train_lm> -DDATA=${TLM}/data
         -DWORK_DIR=${TLM}/corrupt -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/train_lm_integrity_test.cmake)
set_tests_properties(train_lm_resume_corrupt PROPERTIES FIXTURES_REQUIRED train_lm_data TIMEOUT 300)
# issue 27: a failed preparation into a prepared folder leaves the previous one byte for byte.
add_test(NAME train_lm_prepare_keeps_previous COMMAND ${CMAKE_COMMAND} -DTRAIN_LM=$<TARGET_FILE:train_lm>
         -DINPUT=${LMFX}/wikitext -DTOKENIZER=${LMFX}/wikitext/gpt2-bytes -DWORK_DIR=${TLM}/prepare_keeps
         -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/train_lm_prepare_atomic_test.cmake)
# A failed run into a finished one leaves the previous result whole (issue 36, items 3 and 4): a full
# disk (HH_TEST_WRITE_FAULT) while exporting the model, while writing results.json, and at a line of
# metrics.jsonl; the first run's files are compared byte for byte (cmake/keeps_previous.cmake).
set(TLM_KEEP train --data ${TLM}/data --preset tiny --context 32 --steps 12 --eval-every 6 --samples 1 --sample-tokens 4
    --quiet --attentions softmax)
string(REPLACE ";" " " TLM_KEEP_TEXT "${TLM_KEEP}")
foreach(fault model.safetensors results.json metrics.jsonl)
  string(REPLACE "." "_" name ${fault})
  add_test(NAME train_lm_keeps_previous_${name} COMMAND ${CMAKE_COMMAND} -DAPP=$<TARGET_FILE:train_lm>
           -DOUT=${TLM}/keep_${name} "-DARGS=${TLM_KEEP_TEXT}" "-DARGS2=${TLM_KEEP_TEXT} --seed 5" -DFAULT=${fault}
           "-DFILES=results.json;results.csv;report.html;loss.svg;softmax/checkpoint.safetensors;softmax/metrics.jsonl;softmax/model/model.safetensors;softmax/model/config.json"
           -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/keeps_previous.cmake)
  set_tests_properties(train_lm_keeps_previous_${name} PROPERTIES FIXTURES_REQUIRED train_lm_data
                       PASS_REGULAR_EXPRESSION "previous results kept")
endforeach()
# --resume of a finished run on a full disk: the log it continues (rewritten to the checkpoint's
# step beside the old one, then renamed) and the report it writes anew both stay the previous ones.
add_test(NAME train_lm_resume_keeps_previous COMMAND ${CMAKE_COMMAND} -DAPP=$<TARGET_FILE:train_lm>
         -DOUT=${TLM}/keep_resume "-DARGS=${TLM_KEEP_TEXT}" "-DARGS2=${TLM_KEEP_TEXT} --resume" -DFAULT=metrics.jsonl
         "-DFILES=results.json;report.html;softmax/checkpoint.safetensors;softmax/metrics.jsonl;softmax/model/model.safetensors"
         -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/keeps_previous.cmake)
set_tests_properties(train_lm_resume_keeps_previous PROPERTIES FIXTURES_REQUIRED train_lm_data
                     PASS_REGULAR_EXPRESSION "previous results kept")
