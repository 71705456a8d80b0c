# convert_demo end to end on a tiny budget (both parts, two students), and its bad flags.
set(DEMO_TEXT ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/wikitext/wiki.train.raw)
# Smoke runs: their one-epoch teachers stay near chance, so the teacher check is off.
add_test(NAME convert_demo_tiny COMMAND convert_demo --ar-train 200 --text ${DEMO_TEXT} --teacher-epochs 1
         --distill-epochs 1 --finetune-epochs 1 --feature-map elu,hedgehog --quiet --no-check-teacher
         --out ${CMAKE_CURRENT_BINARY_DIR}/convert_demo_tiny)
set_tests_properties(convert_demo_tiny PROPERTIES PASS_REGULAR_EXPRESSION
                     "associative recall.*\n.*\n-+\nsoftmax \\(teacher\\).*\n1\\+ELU .* ok\nHedgehog .* ok.*word order.*Hedgehog .* ok")
# (a) with a gated student (Liger's gate on Hedgehog), named Hedgehog+liger; the teacher stays softmax.
add_test(NAME convert_demo_gated COMMAND convert_demo --part ar --ar-train 200 --teacher-epochs 1 --distill-epochs 1
         --finetune-epochs 1 --feature-map hedgehog --gate liger --quiet --no-check-teacher --out ${CMAKE_CURRENT_BINARY_DIR}/convert_demo_gated)
set_tests_properties(convert_demo_gated PROPERTIES PASS_REGULAR_EXPRESSION
                     "associative recall.*\n.*\n-+\nsoftmax \\(teacher\\).*\nHedgehog\\+liger .* ok")
# A teacher at chance stops the part before any student, with a clear message and a non-zero exit
# (issue 35): no table claims a student "recovers" a guess.
add_test(NAME convert_demo_teacher_guard COMMAND convert_demo --part ar --ar-train 200 --teacher-epochs 1
         --distill-epochs 1 --finetune-epochs 1 --feature-map hedgehog --quiet
         --out ${CMAKE_CURRENT_BINARY_DIR}/convert_demo_guard)
set_tests_properties(convert_demo_teacher_guard PROPERTIES
                     PASS_REGULAR_EXPRESSION "error: .*the softmax teacher did not learn: its test accuracy is [0-9.]+% where a guess scores"
                     FAIL_REGULAR_EXPRESSION "Hedgehog .* ok")
# Part (b)'s teacher learns on the real corpus at a seed where it used to stay at chance for all 10
# epochs (seed 1: 50.00% at the old learning rate, stopped by the guard); about 25 s on one thread.
if(EXISTS /usr/share/common-licenses)
  add_test(NAME convert_demo_text_teacher_learns COMMAND convert_demo --part text --seed 1 --feature-map elu
           --distill-epochs 0 --finetune-epochs 0 --quiet --out ${CMAKE_CURRENT_BINARY_DIR}/convert_demo_teacher_seed1)
  set_tests_properties(convert_demo_text_teacher_learns PROPERTIES
                       PASS_REGULAR_EXPRESSION "word order.*\n.*\n-+\nsoftmax \\(teacher\\) +(6|7|8|9)[0-9]\\.[0-9]+ .*\n1\\+ELU .* ok"
                       FAIL_REGULAR_EXPRESSION "error:")
else()
  add_test(NAME convert_demo_text_teacher_learns COMMAND ${CMAKE_COMMAND} -E echo
           "skipped: /usr/share/common-licenses (part (b)'s corpus) is absent")
endif()
set(DEMO_BAD "--part=nope" "--text=/nonexistent/hh_text" "--feature-map=hedgehog,nope" "--ar-train=5" "--jobs=3"
    "--gate=liger" "--gate=forget")
set(DEMO_BAD_MESSAGES "--part: expected" "/nonexistent/hh_text" "unknown feature map 'nope'" "--ar-train" "--jobs"
    "--gate: part text converts a bidirectional encoder" "--gate: unknown gate 'forget'")
list(LENGTH DEMO_BAD n)
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  list(GET DEMO_BAD ${i} bad)
  list(GET DEMO_BAD_MESSAGES ${i} msg)
  add_test(NAME convert_demo_rejects_${i} COMMAND convert_demo ${bad} --out ${CMAKE_CURRENT_BINARY_DIR}/convert_demo_bad)
  set_tests_properties(convert_demo_rejects_${i} PROPERTIES PASS_REGULAR_EXPRESSION "error: .*${msg}")
endforeach()
