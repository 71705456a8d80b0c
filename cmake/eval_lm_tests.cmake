# eval_lm end to end on the tiny decoders of tests/fixtures/eval (tools/make_eval_fixtures.py): the
# choice task must print transformers' accuracies under lm-eval's rules (choice_expected.json) and
# write its files; passkey and needle (random models: accuracy near 0) must write the table, heat
# map and page; perplexity must be transformers' on strided windows; bad flags and bad input must give "error: " before the model is read.
set(EVAL ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/eval)
add_test(NAME eval_lm_choice
         COMMAND sh -c "d=$(mktemp -d) && \"$1\" --model '${EVAL}/gpt2-tok' --task choice --data '${EVAL}/choice.jsonl' --out \"$d/out\" && test -s \"$d/out/index.html\" && test $(wc -l < \"$d/out/choice_scores.jsonl\") -eq 7 && grep -q '\"acc_norm\": 0.14285714' \"$d/out/results.json\" && echo CHOICE_FILES_OK; rc=$?; rm -rf \"$d\"; exit $rc"
                 sh $<TARGET_FILE:eval_lm>)
# gpt2-tok in choice_expected.json: acc 4/7, acc_norm 1/7, acc_bytes 1/7.
set_tests_properties(eval_lm_choice PROPERTIES PASS_REGULAR_EXPRESSION
                     "acc +0\\.5714 \\(4\\)\nacc_norm +0\\.1429 \\(1\\)\nacc_bytes +0\\.1429 \\(1\\).*CHOICE_FILES_OK")
add_test(NAME eval_lm_choice_llama COMMAND eval_lm --model ${EVAL}/llama-tok --task choice --data ${EVAL}/choice.jsonl)
# llama-tok: acc 3/7, acc_norm 0, acc_bytes 0.
set_tests_properties(eval_lm_choice_llama PROPERTIES PASS_REGULAR_EXPRESSION
                     "acc +0\\.4286 \\(3\\)\nacc_norm +0\\.0000 \\(0\\)\nacc_bytes +0\\.0000 \\(0\\)")
add_test(NAME eval_lm_passkey
         COMMAND sh -c "d=$(mktemp -d) && \"$1\" --model '${EVAL}/llama-tok' --task passkey --lengths 128,256 --depths 0,0.5,1 --trials 2 --seed 4 --out \"$d/out\" && grep -q '^<svg' \"$d/out/heatmap.svg\" && test $(grep -c '^| ' \"$d/out/table.md\") -eq 3 && grep -q '<svg' \"$d/out/index.html\" && grep -q '\"trials_per_cell\": 2' \"$d/out/results.json\" && echo PASSKEY_FILES_OK; rc=$?; rm -rf \"$d\"; exit $rc"
                 sh $<TARGET_FILE:eval_lm>)
set_tests_properties(eval_lm_passkey PROPERTIES PASS_REGULAR_EXPRESSION
                     "passkey: 12 trials in [^\n]*\n\\| length \\\\ depth \\| 0 \\| 0\\.5 \\| 1 \\|\n\\|---\\|---\\|---\\|---\\|\n\\| 128 \\|[^\n]*\n\\| 256 \\|.*PASSKEY_FILES_OK")
# RULER's tasks write the same files; a hybrid student decodes each (scores from 0 to 1 per trial).
foreach(task niah_multikey niah_multivalue vt)
  add_test(NAME eval_lm_${task}
           COMMAND sh -c "d=$(mktemp -d) && \"$1\" --model '${EVAL}/gpt2-tok' --task $2 --lengths 320 --depths 0,1 --trials 1 --mixer hybrid-hedgehog --window 16 --out \"$d/out\" && grep -q '^<svg' \"$d/out/heatmap.svg\" && test $(grep -c '^| ' \"$d/out/table.md\") -eq 2 && grep -q '\"score\"' \"$d/out/results.json\" && echo RULER_FILES_OK; rc=$?; rm -rf \"$d\"; exit $rc"
                   sh $<TARGET_FILE:eval_lm> ${task})
  set_tests_properties(eval_lm_${task} PROPERTIES PASS_REGULAR_EXPRESSION
                       "${task}: 2 trials in [^\n]*\n\\| length \\\\ depth \\| 0 \\| 1 \\|\n.*RULER_FILES_OK")
endforeach()
# A hybrid student (sliding window of 16 + hedgehog linear attention) decodes the needle task.
add_test(NAME eval_lm_needle_hybrid COMMAND eval_lm --model ${EVAL}/gpt2-tok --task needle --lengths 200
         --depths 0.25,0.75 --trials 1 --mixer hybrid-hedgehog --window 16)
set_tests_properties(eval_lm_needle_hybrid PROPERTIES PASS_REGULAR_EXPRESSION
                     "attention: hybrid-hedgehog.*needle: 2 trials in [^\n]*\n\\| length \\\\ depth \\| 0\\.25 \\| 0\\.75 \\|\n\\|---\\|---\\|---\\|\n\\| 200 \\|")
# Perplexity on strided windows: transformers' value (perplexity_expected.json: gpt2-tok, context 64,
# stride 32: ppl 2453.6966, loss 7.805351 over 200 tokens).
add_test(NAME eval_lm_perplexity
         COMMAND sh -c "d=$(mktemp -d) && \"$1\" --model '${EVAL}/gpt2-tok' --task perplexity --data '${EVAL}/text.txt' --context 64 --stride 32 --batch 3 --out \"$d/out\" && grep -q '\"scored_tokens\": 200' \"$d/out/results.json\" && test -s \"$d/out/index.html\" && echo PPL_FILES_OK; rc=$?; rm -rf \"$d\"; exit $rc"
                 sh $<TARGET_FILE:eval_lm>)
set_tests_properties(eval_lm_perplexity PROPERTIES PASS_REGULAR_EXPRESSION
                     "perplexity 2453\\.69[0-9]* \\(loss 7\\.80535[0-9]* nats per token\\) over 200 of 201 tokens.*PPL_FILES_OK")
# Pairs: the arguments (one string, split like a shell line) and a fragment of the expected error.
# The model folder does not exist in the flag cases: the error must come before it is read.
set(EVAL_LM_BAD
    "--model /nonexistent/hh --task nope" "--task: unknown 'nope'"
    "--model /nonexistent/hh" "--task is required"
    "--task passkey" "--model is required"
    "--model /nonexistent/hh --task passkey --lengths ," "--lengths: no context lengths given"
    "--model /nonexistent/hh --task passkey --lengths 128,x" "--lengths: 'x' is not a positive number"
    "--model /nonexistent/hh --task passkey --lengths 0" "--lengths: '0' is not a positive number"
    "--model /nonexistent/hh --task needle --depths 0,1.5" "--depths: 1.5 is outside [0, 1]"
    "--model /nonexistent/hh --task needle --depths -0.1" "--depths: -0.1 is outside [0, 1]"
    "--model /nonexistent/hh --task needle --depths nan" "is outside [0, 1]"
    "--model /nonexistent/hh --task needle --depths 0.5,0.5" "--depths: 0.5 is given twice"
    "--model /nonexistent/hh --task passkey --trials 0" "--trials"
    "--model /nonexistent/hh --task passkey --data ${EVAL}/choice.jsonl" "--data is for --task choice or perplexity"
    "--model /nonexistent/hh --task choice --data ${EVAL}/choice.jsonl --stride 4" "--stride is for --task perplexity"
    "--model /nonexistent/hh --task perplexity" "--task perplexity needs --data"
    "--model /nonexistent/hh --task perplexity --data /nonexistent/t.txt" "/nonexistent/t.txt"
    "--model /nonexistent/hh --task perplexity --data ${EVAL}/text.txt --context 8 --stride 9" "--stride 9 is more than --context 8"
    "--model ${EVAL}/gpt2-tok --task perplexity --data ${EVAL}/text.txt --context 600" "--context 600 is more than the model's 512 positions"
    "--model /nonexistent/hh --task choice" "--task choice needs --data"
    "--model /nonexistent/hh --task choice --data ${EVAL}/choice.jsonl --lengths 128" "--lengths is for --task passkey, needle, niah_multikey, niah_multivalue or vt"
    "--model /nonexistent/hh --task choice --data /nonexistent/x.jsonl" "/nonexistent/x.jsonl"
    "--model /nonexistent/hh --task choice --data ${CMAKE_CURRENT_SOURCE_DIR}/CMakeLists.txt" "CMakeLists.txt:1: not JSON"
    "--model /nonexistent/hh --task passkey --out /" "--out /"
    "--model ${EVAL}/llama-tok --task passkey --lengths 600 --depths 0.5" "600 tokens is more than the model's 512 positions"
    "--model ${EVAL}/llama-tok --task passkey --lengths 30 --depths 0.5" "length 30 is too short for the passkey prompt"
    "--model ${EVAL}/llama-tok --task vt --lengths 200 --depths 0.5" "length 200 is too short for the vt prompt: it needs 238 tokens"
    "--model /nonexistent/hh --task niah" "--task: unknown 'niah' (choice, passkey, needle, niah_multikey, niah_multivalue, vt or perplexity)")
list(LENGTH EVAL_LM_BAD n)
math(EXPR last "${n} / 2 - 1")
foreach(i RANGE ${last})
  math(EXPR a "2 * ${i}")
  math(EXPR b "2 * ${i} + 1")
  list(GET EVAL_LM_BAD ${a} args)
  list(GET EVAL_LM_BAD ${b} msg)
  separate_arguments(args UNIX_COMMAND "${args}")
  add_test(NAME eval_lm_rejects_${i} COMMAND eval_lm ${args})
  string(REGEX REPLACE "([][().*+?^$|\\\\])" "\\\\\\1" msg_re "${msg}")
  set_tests_properties(eval_lm_rejects_${i} PROPERTIES PASS_REGULAR_EXPRESSION "error: .*${msg_re}"
                       FAIL_REGULAR_EXPRESSION "trials in|acc " TIMEOUT 120)
endforeach()
# A bad line in the middle of a file: FILE:LINE, before the model is read.
add_test(NAME eval_lm_rejects_bad_gold
         COMMAND sh -c "d=$(mktemp -d) && head -2 '${EVAL}/choice.jsonl' > \"$d/c.jsonl\" && echo '{\"context\": \"a\", \"choices\": [\" b\"], \"gold\": 3}' >> \"$d/c.jsonl\" && \"$1\" --model /nonexistent/hh --task choice --data \"$d/c.jsonl\"; rc=$?; rm -rf \"$d\"; exit $rc"
                 sh $<TARGET_FILE:eval_lm>)
set_tests_properties(eval_lm_rejects_bad_gold PROPERTIES PASS_REGULAR_EXPRESSION
                     "error: [^\n]*/c\\.jsonl:3: \"gold\" 3 is out of range \\(1 choices: 0\\.\\.0\\)" TIMEOUT 60)
# A line without "gold" (the issue's example of a bad JSONL line), before the model is read.
add_test(NAME eval_lm_rejects_missing_gold
         COMMAND sh -c "d=$(mktemp -d) && echo '{\"context\": \"a\", \"choices\": [\" b\", \" c\"]}' > \"$d/c.jsonl\" && \"$1\" --model /nonexistent/hh --task choice --data \"$d/c.jsonl\"; rc=$?; rm -rf \"$d\"; exit $rc"
                 sh $<TARGET_FILE:eval_lm>)
set_tests_properties(eval_lm_rejects_missing_gold PROPERTIES PASS_REGULAR_EXPRESSION
                     "error: [^\n]*/c\\.jsonl:1: \"gold\" \\(an integer index into \"choices\"\\) is missing" TIMEOUT 60)
