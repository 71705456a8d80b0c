# apps/lra end to end: a tiny generated run that must learn, --resume, and bad input refused with
# "error: " before anything trains (the "examples from" line is printed after the data is read).
set(LRA_OUT ${CMAKE_CURRENT_BINARY_DIR}/lra_tests)
set(LRA_TINY --preset tiny --generate --quiet)
# ListOps at depth 1-2 on short sequences (chance 10%): both attentions must reach 40%.
add_test(NAME lra_tiny_learns COMMAND lra ${LRA_TINY} --tasks listops --attentions softmax,hedgehog
         --steps 400 --min-accuracy 0.4 --out ${LRA_OUT}/tiny)
set_tests_properties(lra_tiny_learns PROPERTIES PASS_REGULAR_EXPRESSION "attention +ListOps.*\nsoftmax .*\nhedgehog ")
# A gated map (GLA's gate, the gated delta rule, on hedgehog) runs causally through the same
# encoder; its row is named.
add_test(NAME lra_tiny_gated COMMAND lra ${LRA_TINY} --tasks listops --attentions hedgehog --gate gla,delta --steps 20
         --out ${LRA_OUT}/gated)
set_tests_properties(lra_tiny_gated PROPERTIES PASS_REGULAR_EXPRESSION "\nhedgehog\\+gla .*\nhedgehog\\+delta ")
add_test(NAME lra_resume_stop COMMAND lra ${LRA_TINY} --tasks pathfinder --attentions elu --steps 40
         --stop-after-steps 25 --out ${LRA_OUT}/resume)
set_tests_properties(lra_resume_stop PROPERTIES FIXTURES_SETUP lra_resume PASS_REGULAR_EXPRESSION "continue with --resume")
add_test(NAME lra_resume_continue COMMAND lra ${LRA_TINY} --tasks pathfinder --attentions elu --steps 40 --resume
         --out ${LRA_OUT}/resume)
set_tests_properties(lra_resume_continue PROPERTIES FIXTURES_REQUIRED lra_resume PASS_REGULAR_EXPRESSION "pathfinder +elu .* ok")
add_test(NAME lra_resume_other_flags COMMAND lra ${LRA_TINY} --tasks pathfinder --attentions elu --steps 41 --resume
         --out ${LRA_OUT}/resume)
# Not at the same time as lra_resume_continue: that run holds the folder's lock (one writer).
set_tests_properties(lra_resume_other_flags PROPERTIES FIXTURES_REQUIRED lra_resume DEPENDS lra_resume_continue
                     PASS_REGULAR_EXPRESSION "error: --resume: .*other settings")

# A malformed release file: the reader's error names it.
file(WRITE ${LRA_OUT}/bad_data/listops/basic_train.tsv "Source\tTarget\n[MAX 1 2 ]\tnot-a-label\n")
file(WRITE ${LRA_OUT}/bad_data/listops/basic_val.tsv "Source\tTarget\n[MAX 1 2 ]\t2\n")
file(WRITE ${LRA_OUT}/bad_data/listops/basic_test.tsv "Source\tTarget\n[MAX 1 2 ]\t2\n")
set(LRA_BAD "--tasks=nope" "--attentions=softmax,nope" "--preset=huge" "--generate|--steps=abc" "--data=/nonexistent/hh_lra"
            "--data=${LRA_OUT}/bad_data|--tasks=listops" "--generate|--tasks=text" "--nonsense=1" "--attentions=elu,elu"
            "--generate|--data=${LRA_OUT}/bad_data" "--generate|--listops-len=9:3" "--generate|--device=tpu"
            "--generate|--min-accuracy=2" "--generate|--gate=delta,delta" "--generate|--gate=nope")
set(LRA_BAD_MESSAGES "nope" "unknown attention 'nope'" "--preset" "--steps" "/nonexistent/hh_lra"
                     "basic_train.tsv" "only listops and pathfinder" "unknown flag" "listed twice" "exactly one of"
                     "--listops-len" "tpu" "--min-accuracy" "'delta' is listed twice" "unknown gate 'nope'")
list(LENGTH LRA_BAD n)
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  list(GET LRA_BAD ${i} bad)
  list(GET LRA_BAD_MESSAGES ${i} msg)
  string(REPLACE "|" ";" bad "${bad}")
  add_test(NAME lra_rejects_${i} COMMAND lra ${bad} --quiet --out ${LRA_OUT}/bad)
  set_tests_properties(lra_rejects_${i} PROPERTIES PASS_REGULAR_EXPRESSION "error: .*${msg}"
                       FAIL_REGULAR_EXPRESSION "examples from")
endforeach()
add_test(NAME lra_rejects_empty_out COMMAND lra --generate --quiet --out=)
set_tests_properties(lra_rejects_empty_out PROPERTIES PASS_REGULAR_EXPRESSION "error: --out: empty path"
                     FAIL_REGULAR_EXPRESSION "examples from")
