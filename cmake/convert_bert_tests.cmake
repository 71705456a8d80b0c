# convert_bert end to end on the tiny fixtures: bert-tiny-tok (tests/fixtures/hf) and the tiny GLUE
# files of tests/fixtures/glue (tools/make_glue_fixtures.py wrote them; CoLA-bad by hand). A run
# writes the table, results.json and report.html; bad input gives "error: " and exit 1 before the
# teacher is evaluated.
set(HF ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/hf)
set(GLUE ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/glue)
set(CB_OUT ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_cola)
# --lr and --schedule given win over the preset's defaults; soft-ce is xent under another name.
add_test(NAME convert_bert_cola_tiny COMMAND convert_bert --model ${HF}/bert-tiny-tok --task cola --data ${GLUE}/CoLA
         --preset tiny --feature-map elu,hedgehog --max-length 32 --lr 0.002 --loss soft-ce --schedule linear
         --warmup 0.1 --threads 2 --quiet --out ${CB_OUT})
set_tests_properties(convert_bert_cola_tiny PROPERTIES FIXTURES_SETUP convert_bert_cola
                     PASS_REGULAR_EXPRESSION "softmax \\(teacher\\).*1\\+ELU.*Hedgehog .*report: ")
add_test(NAME convert_bert_cola_results COMMAND ${CMAKE_COMMAND} -E cat ${CB_OUT}/results.json)
set_tests_properties(convert_bert_cola_results PROPERTIES FIXTURES_REQUIRED convert_bert_cola
                     PASS_REGULAR_EXPRESSION "\"mcc\".*\"Hedgehog\"")
# config.json records the shared settings: the preset's (tiny: 1 epoch each) and the flags given.
add_test(NAME convert_bert_cola_config COMMAND ${CMAKE_COMMAND} -E cat ${CB_OUT}/config.json)
set_tests_properties(convert_bert_cola_config PROPERTIES FIXTURES_REQUIRED convert_bert_cola PASS_REGULAR_EXPRESSION
                     "\"distill_epochs\": 1,.*\"finetune_epochs\": 1,.*\"loss\": \"xent\",.*\"lr\": 0\\.002,.*\"preset\": \"tiny\",.*\"schedule\": \"linear\",.*\"warmup\": 0\\.1,")
# The same run again with --resume (--loss xent: the same setting as soft-ce): every row restores
# its finished checkpoint.
add_test(NAME convert_bert_cola_resume COMMAND convert_bert --model ${HF}/bert-tiny-tok --task cola --data ${GLUE}/CoLA
         --preset tiny --feature-map elu,hedgehog --max-length 32 --lr 0.002 --loss xent --schedule linear
         --warmup 0.1 --threads 2 --quiet --resume --out ${CB_OUT})
set_tests_properties(convert_bert_cola_resume PROPERTIES FIXTURES_REQUIRED convert_bert_cola
                     DEPENDS convert_bert_cola_results PASS_REGULAR_EXPRESSION "Hedgehog .*report: ")
# --resume with other settings, or with nothing to resume, is refused before any work.
add_test(NAME convert_bert_resume_other_flags COMMAND convert_bert --model ${HF}/bert-tiny-tok --task cola
         --data ${GLUE}/CoLA --preset tiny --feature-map elu,hedgehog --max-length 32 --lr 0.5 --resume --out ${CB_OUT})
set_tests_properties(convert_bert_resume_other_flags PROPERTIES FIXTURES_REQUIRED convert_bert_cola
                     PASS_REGULAR_EXPRESSION "error: --resume: .*checkpoint.safetensors was written with other settings"
                     FAIL_REGULAR_EXPRESSION "teacher \\(softmax\\)")
add_test(NAME convert_bert_resume_nothing COMMAND convert_bert --model ${HF}/bert-tiny-tok --task cola
         --data ${GLUE}/CoLA --resume --out ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_resume_none)
set_tests_properties(convert_bert_resume_nothing PROPERTIES PASS_REGULAR_EXPRESSION
                     "error: --resume: no checkpoint found" FAIL_REGULAR_EXPRESSION "teacher \\(softmax\\)")
# STS-B (a one-output regression head) with LoRA finetuning.
add_test(NAME convert_bert_stsb_lora COMMAND convert_bert --model ${GLUE}/bert-tiny-stsb --task STS-B
         --data ${GLUE}/STS-B --preset tiny --feature-map hedgehog --finetune lora --lora-rank 2 --threads 2 --quiet
         --out ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_stsb)
set_tests_properties(convert_bert_stsb_lora PROPERTIES PASS_REGULAR_EXPRESSION "pearson.*Hedgehog .*report: ")
# Pairs: the arguments (one string, split like a shell line) and a fragment of the expected error.
set(CB_OK "--task cola --data ${GLUE}/CoLA --out ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_bad")
set(CONVERT_BERT_BAD
    "--task cola --data ${GLUE}/CoLA" "--model: no model folder"
    "--model /nonexistent/hh ${CB_OK}" "/nonexistent/hh"
    "--model ${HF}/bert-tiny-tok --task cola --data /nonexistent/glue" "--data: /nonexistent/glue"
    "--model ${HF}/bert-tiny-tok --task cola --data ${GLUE}/CoLA-bad" "CoLA-bad/train.tsv:3"
    "--model ${HF}/bert-tiny-tok --task cola --data ${GLUE}/MRPC" "MRPC/train.tsv"
    "--model ${HF}/bert-tiny-tok --task wnli --data ${GLUE}/CoLA" "unknown task 'wnli'"
    "--model ${HF}/bert-tiny-tok --task stsb --data ${GLUE}/STS-B" "num_labels = 2 but GLUE STS-B needs 1"
    "--model ${HF}/gpt2-tiny ${CB_OK}" "convert_bert needs a BERT model"
    "--model ${HF}/bert-tiny-tok ${CB_OK} --max-length 100" "max length 100 exceeds the model's 64 positions"
    "--model ${HF}/bert-tiny-tok ${CB_OK} --loss nope" "--loss: expected xent (or soft-ce) or kl"
    "--model ${HF}/bert-tiny-tok ${CB_OK} --schedule step" "--schedule: expected cosine, linear or constant"
    "--model ${HF}/bert-tiny-tok ${CB_OK} --warmup 2" "flag --warmup: 2 is out of range"
    "--model ${HF}/bert-tiny-tok ${CB_OK} --distill-wd -1" "flag --distill-wd: -1 is out of range"
    "--model ${HF}/bert-tiny-tok ${CB_OK} --batch 0" "flag --batch: 0 is out of range"
    "--model ${HF}/bert-tiny-tok ${CB_OK} --feature-map nope" "unknown feature map 'nope'"
    "--model ${HF}/bert-tiny-tok ${CB_OK} --finetune half" "--finetune: expected full or lora"
    "--model ${HF}/bert-tiny-tok ${CB_OK} --preset huge" "--preset: expected paper or tiny"
    "--model ${HF}/bert-tiny-tok ${CB_OK} --nonsense 1" "unknown flag --nonsense"
    "--model ${HF}/bert-tiny-tok ${CB_OK} --gate liger" "--gate: convert_bert converts a bidirectional encoder")
list(LENGTH CONVERT_BERT_BAD n)
math(EXPR last "${n} / 2 - 1")
foreach(i RANGE ${last})
  math(EXPR a "2 * ${i}")
  math(EXPR b "2 * ${i} + 1")
  list(GET CONVERT_BERT_BAD ${a} args)
  list(GET CONVERT_BERT_BAD ${b} msg)
  separate_arguments(args UNIX_COMMAND "${args}")
  add_test(NAME convert_bert_rejects_${i} COMMAND convert_bert ${args})
  string(REGEX REPLACE "([][().*+?^$|\\\\])" "\\\\\\1" msg_re "${msg}")
  # The cases share an output folder, whose lock (one writer) must not make one fail for another.
  set_tests_properties(convert_bert_rejects_${i} PROPERTIES RESOURCE_LOCK convert_bert_out PASS_REGULAR_EXPRESSION "error: .*${msg_re}"
                       FAIL_REGULAR_EXPRESSION "teacher \\(softmax\\)")
endforeach()
# --save writes the converted model as an HF folder that loads back (hf_run classifies with it).
set(CB_SAVE ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_save)
add_test(NAME convert_bert_save COMMAND convert_bert --model ${HF}/bert-tiny-tok --task MRPC --data ${GLUE}/MRPC
         --preset tiny --feature-map hedgehog --threads 1 --quiet --save --out ${CB_SAVE})
set_tests_properties(convert_bert_save PROPERTIES FIXTURES_SETUP convert_bert_saved
                     PASS_REGULAR_EXPRESSION "saved: .*hedgehog/model")
add_test(NAME convert_bert_saved_loads COMMAND hf_run --model ${CB_SAVE}/hedgehog/model --text "A quiet child ."
         --text-pair "A silent child .")
set_tests_properties(convert_bert_saved_loads PROPERTIES FIXTURES_REQUIRED convert_bert_saved
                     PASS_REGULAR_EXPRESSION "POSITIVE|NEGATIVE")
# A converted folder is not a teacher.
add_test(NAME convert_bert_rejects_converted COMMAND convert_bert --model ${CB_SAVE}/hedgehog/model --task MRPC
         --data ${GLUE}/MRPC --out ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_bad)
set_tests_properties(convert_bert_rejects_converted PROPERTIES FIXTURES_REQUIRED convert_bert_saved
                     PASS_REGULAR_EXPRESSION "error: .*holds a converted model .*'hedgehog'"
                     FAIL_REGULAR_EXPRESSION "teacher \\(softmax\\)")
# --distill-epochs 0: a trainable map's row is announced without distillation (issue 23: it said
# "(hedgehog, distilled)").
add_test(NAME convert_bert_no_distill_label COMMAND convert_bert --model ${HF}/bert-tiny-tok --task cola --data ${GLUE}/CoLA
         --preset tiny --feature-map hedgehog --max-length 32 --distill-epochs 0 --threads 2 --quiet
         --out ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_no_distill)
set_tests_properties(convert_bert_no_distill_label PROPERTIES PASS_REGULAR_EXPRESSION
                     "== Hedgehog \\(hedgehog, no distillation\\)" FAIL_REGULAR_EXPRESSION ", distilled\\)")
# --task embed: the tiny sentence-transformers fixture converted on raw text (the tokenizer corpus),
# no labels; the table's metric is the mean cosine to the teacher, results.json has all three.
set(CBE_OUT ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_embed)
add_test(NAME convert_bert_embed_tiny COMMAND convert_bert --model ${HF}/st-tiny-mean --task embed
         --data ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/tokenizers/corpus.txt --max-train 300 --preset tiny
         --feature-map hedgehog,elu --threads 2 --quiet --out ${CBE_OUT})
set_tests_properties(convert_bert_embed_tiny PROPERTIES FIXTURES_SETUP convert_bert_embed
                     PASS_REGULAR_EXPRESSION "cosine .*softmax \\(teacher\\) +100\\.00.*Hedgehog .*1\\+ELU .*spearman +nn_agreement\nsoftmax \\(teacher\\) +1\\.0000 +1\\.0000\nHedgehog +[0-9.]+ +[0-9.]+\n.*report: ")
add_test(NAME convert_bert_embed_results COMMAND ${CMAKE_COMMAND} -E cat ${CBE_OUT}/results.json)
set_tests_properties(convert_bert_embed_results PROPERTIES FIXTURES_REQUIRED convert_bert_embed
                     PASS_REGULAR_EXPRESSION "\"cosine\": 0\\.9[0-9]*,[^}]*\"nn_agreement\": [0-9.]+,[^}]*\"spearman\": ")
set(CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/tokenizers/corpus.txt)
set(CBE_BAD
    "--model ${HF}/gpt2-tiny --data ${CORPUS}" "converts BERT-family encoders"
    "--model ${HF}/st-tiny-mean --data /nonexistent/texts.txt" "/nonexistent/texts.txt"
    "--model ${HF}/st-tiny-mean --data ${CORPUS} --embed-loss l1" "--embed-loss: unknown loss"
    "--model ${HF}/st-tiny-mean --data ${CORPUS} --val-fraction 0" "--val-fraction")
list(LENGTH CBE_BAD n)
math(EXPR last "${n} / 2 - 1")
foreach(i RANGE ${last})
  math(EXPR a "2 * ${i}")
  math(EXPR b "2 * ${i} + 1")
  list(GET CBE_BAD ${a} args)
  list(GET CBE_BAD ${b} msg)
  separate_arguments(args UNIX_COMMAND "${args}")
  add_test(NAME convert_bert_embed_rejects_${i} COMMAND convert_bert --task embed ${args}
           --out ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_embed_bad)
  string(REGEX REPLACE "([][().*+?^$|\\\\])" "\\\\\\1" msg_re "${msg}")
  # The cases share an output folder, whose lock (one writer) must not make one fail for another.
  set_tests_properties(convert_bert_embed_rejects_${i} PROPERTIES RESOURCE_LOCK convert_bert_out PASS_REGULAR_EXPRESSION "error: .*${msg_re}"
                       FAIL_REGULAR_EXPRESSION "teacher \\(softmax\\)")
endforeach()
# --task custom (tests/fixtures/user_task: TSV classes, JSONL regression pairs) on a base checkpoint
# (st-tiny-mean is a BertModel): stage 0 gives it a fresh head and finetunes the teacher first.
add_test(NAME convert_bert_custom_stage0 COMMAND convert_bert --model ${HF}/st-tiny-mean --task custom
         --data ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/user_task/tsv --preset tiny --teacher-epochs 2
         --teacher-lr 0.005 --feature-map hedgehog --val-fraction 0.2 --threads 2 --quiet --save
         --out ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_custom)
set_tests_properties(convert_bert_custom_stage0 PROPERTIES PASS_REGULAR_EXPRESSION
                     "stage 0: .* a fresh 3-output head.*teacher \\(softmax\\): accuracy .*Hedgehog .*report: ")
add_test(NAME convert_bert_custom_saved COMMAND hf_run --model ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_custom/hedgehog/model
         --text "a gripping film")
set_tests_properties(convert_bert_custom_saved PROPERTIES DEPENDS convert_bert_custom_stage0
                     PASS_REGULAR_EXPRESSION "BertForSequenceClassification.*attention: hedgehog.*LABEL_[0-2] ")
add_test(NAME convert_bert_custom_regression COMMAND convert_bert --model ${HF}/st-tiny-mean --task custom
         --data ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/user_task/jsonl --preset tiny --teacher-epochs 1
         --feature-map elu --threads 2 --quiet --out ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_custom_reg)
set_tests_properties(convert_bert_custom_regression PROPERTIES PASS_REGULAR_EXPRESSION
                     "a fresh 1-output head.*teacher \\(softmax\\): pearson .*1\\+ELU .*report: ")
add_test(NAME convert_bert_custom_rejects_bad_file COMMAND convert_bert --model ${HF}/st-tiny-mean --task custom
         --data ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/glue/CoLA --out ${CMAKE_CURRENT_BINARY_DIR}/convert_bert_custom_bad)
set_tests_properties(convert_bert_custom_rejects_bad_file PROPERTIES PASS_REGULAR_EXPRESSION
                     "error: .*CoLA/train.tsv:1: the header must name the columns" FAIL_REGULAR_EXPRESSION "stage 0")
