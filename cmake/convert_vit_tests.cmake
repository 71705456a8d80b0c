# convert_vit end to end on the committed fixtures (tests/fixtures/vit, made by
# tools/make_vit_fixtures.py): a tiny CIFAR-10-layout run and a class-folder run must finish with
# the table and the report; bad input must give "error: " and exit 1 before any conversion starts.
set(VIT ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/vit)
set(VIT_TINY --distill-epochs 1 --finetune-epochs 1 --batch 8 --threads 2 --quiet)
add_test(NAME convert_vit_cifar COMMAND convert_vit --model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny
         --feature-map hedgehog,elu ${VIT_TINY} --out ${CMAKE_CURRENT_BINARY_DIR}/convert_vit_cifar)
set_tests_properties(convert_vit_cifar PROPERTIES PASS_REGULAR_EXPRESSION
                     "softmax \\(teacher\\).*Hedgehog .* ok.*1\\+ELU .* ok.*report: ")
# LoRA finetuning, then --save writes the merged model as an HF folder under the row's folder.
add_test(NAME convert_vit_folders COMMAND convert_vit --model ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/hf/vit-tiny
         --data ${VIT}/folders-tiny --feature-map hedgehog ${VIT_TINY} --finetune lora --save
         --out ${CMAKE_CURRENT_BINARY_DIR}/convert_vit_folders)
set_tests_properties(convert_vit_folders PROPERTIES PASS_REGULAR_EXPRESSION
                     "folders: 18 train, 2 val, 10 test.*saved: .*hedgehog/model.*Hedgehog .* ok")
# Pairs: the arguments (one string, split like a shell line) and a fragment of the expected error.
set(CONVERT_VIT_BAD
    "--data ${VIT}/cifar-tiny" "--model: no model folder"
    "--model ${VIT}/vit-cifar-tiny" "--data: no data folder"
    "--model /nonexistent/hh --data ${VIT}/cifar-tiny" "/nonexistent/hh"
    "--model ${VIT}/vit-cifar-tiny --data /nonexistent/hh_images" "/nonexistent/hh_images"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/vit-cifar-tiny" "no class sub-folders"
    "--model ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/hf/vit-tiny --data ${VIT}/cifar-tiny" "10 classes but the model has num_labels = 5"
    "--model ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/hf/gpt2-tiny --data ${VIT}/cifar-tiny" "not ViTForImageClassification"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --batch 0" "flag --batch: 0 is out of range"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --feature-map nope" "unknown feature map 'nope'"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --loss mse" "--loss: expected xent (or soft-ce) or kl"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --schedule step" "--schedule: expected cosine, linear or constant"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --finetune-lr 1e-3" "unknown flag --finetune-lr"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --resume" "--resume: no checkpoint found"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --max-train 0" "--max-train: 0 rows"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --preset huge" "--preset: expected paper"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --finetune some" "--finetune: expected full or lora"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --nonsense 1" "unknown flag --nonsense"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --gate gla" "--gate: convert_vit converts a bidirectional encoder"
    "--model ${VIT}/vit-cifar-tiny --data ${VIT}/cifar-tiny --out ${CMAKE_CURRENT_SOURCE_DIR}/CMakeLists.txt" "not a folder")
list(LENGTH CONVERT_VIT_BAD n)
math(EXPR last "${n} / 2 - 1")
foreach(i RANGE ${last})
  math(EXPR a "2 * ${i}")
  math(EXPR b "2 * ${i} + 1")
  list(GET CONVERT_VIT_BAD ${a} args)
  list(GET CONVERT_VIT_BAD ${b} msg)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(NOT args MATCHES "--out")
    list(APPEND args --out ${CMAKE_CURRENT_BINARY_DIR}/convert_vit_bad)
  endif()
  add_test(NAME convert_vit_rejects_${i} COMMAND convert_vit ${args})
  string(REGEX REPLACE "([][().*+?^$|\\\\])" "\\\\\\1" msg_re "${msg}")
  # The cases share an output folder, whose lock (one writer) must not make one fail for another.
  set_tests_properties(convert_vit_rejects_${i} PROPERTIES RESOURCE_LOCK convert_vit_out PASS_REGULAR_EXPRESSION "error: .*${msg_re}"
                       FAIL_REGULAR_EXPRESSION "convert_vit: ")
endforeach()
