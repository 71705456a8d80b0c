# bench_attention end to end (included from CMakeLists.txt inside HH_BUILD_APPS and HH_BUILD_TESTS):
# the gated rows (issue 25) at a tiny size, every gate and form (exit 0: every row ran or was
# skipped by a rule), bad --gate lists refused with "error: " before anything is measured, and the
# PyTorch twin's gated forms checked against its recurrent loops (skipped without torch).
set(BENCH_ATTN_TINY --threads 1 --lengths 8,19 --heads 2 --head-dim 4 --chunk 8 --reps 1)
add_test(NAME bench_attention_gated_tiny COMMAND bench_attention ${BENCH_ATTN_TINY} --maps softmax,hedgehog,hybrid-elu
         --gate none,decay,gla,delta --json ${CMAKE_CURRENT_BINARY_DIR}/bench_attention_gated.json)
set_tests_properties(bench_attention_gated_tiny PROPERTIES FAIL_REGULAR_EXPRESSION "error"
                     PASS_REGULAR_EXPRESSION "hedgehog\\+gla +chunked +19 .*hedgehog\\+delta +recurrent +19 +8 +[0-9]")
foreach(bad "xyz" "gla,gla" "liger" "none,nope")
  string(REPLACE "," "_" tname "${bad}")
  add_test(NAME bench_attention_rejects_gate_${tname} COMMAND bench_attention ${BENCH_ATTN_TINY} --maps hedgehog
           --gate ${bad})
  set_tests_properties(bench_attention_rejects_gate_${tname} PROPERTIES PASS_REGULAR_EXPRESSION "error: --gate: "
                       FAIL_REGULAR_EXPRESSION "attention benchmark:")
endforeach()
add_test(NAME bench_attention_torch_gated_tiny COMMAND sh -c
         "python3 -c 'import torch' 2>/dev/null || { echo 'skipped: python3 cannot import torch'; exit 77; }; python3 \"$0\" \"$@\""
         ${CMAKE_CURRENT_SOURCE_DIR}/tools/bench_attention_torch.py ${BENCH_ATTN_TINY} --maps softmax,hedgehog
         --gate none,decay,gla,delta)
set_tests_properties(bench_attention_torch_gated_tiny PROPERTIES SKIP_RETURN_CODE 77
                     PASS_REGULAR_EXPRESSION "gla: chunked and quadratic twins = recurrent loop.*hedgehog\\+delta +chunked")
