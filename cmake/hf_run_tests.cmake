# hf_run end to end on the tiny HF fixtures (tests/fixtures/hf, made by tools/make_hf_fixtures.py):
# the expected ids and logits are transformers' own (each fixture's reference.safetensors holds
# them); bad input must give "error: " and a non-zero exit before any model is run.
set(HF ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures/hf)
add_test(NAME hf_run_gpt2_greedy COMMAND hf_run --model ${HF}/gpt2-tiny --ids 5,17,99,42 --temperature 0
         --max-new-tokens 12 --out ${CMAKE_CURRENT_BINARY_DIR}/hf_run_gpt2)
set_tests_properties(hf_run_gpt2_greedy PROPERTIES PASS_REGULAR_EXPRESSION
                     "generated ids: \\[37,37,37,56,56,56,56,56,56,56,56,56\\]")
add_test(NAME hf_run_llama_greedy COMMAND hf_run --model ${HF}/llama-tiny --ids 1,15,27,88,4 --temperature 0
         --max-new-tokens 12)
set_tests_properties(hf_run_llama_greedy PROPERTIES PASS_REGULAR_EXPRESSION
                     "generated ids: \\[19,80,95,95,95,95,95,95,95,95,95,95\\]")
# No decoding flag: transformers' generate() defaults, the folder's generation_config.json (no do_sample:
# greedy), so the ids equal the greedy ones above.
add_test(NAME hf_run_llama_default_greedy COMMAND hf_run --model ${HF}/llama-tiny --ids 1,15,27,88,4 --max-new-tokens 12)
set_tests_properties(hf_run_llama_default_greedy PROPERTIES PASS_REGULAR_EXPRESSION
                     "decoding: greedy \\(generation_config.json\\).*generated ids: \\[19,80,95,95,95,95,95,95,95,95,95,95\\]")
add_test(NAME hf_run_bool_flag_value COMMAND hf_run --model ${HF}/llama-tiny --ids 1,15,27,88,4 --max-new-tokens 3
         --stop-at-eos false --hidden-states=false)
set_tests_properties(hf_run_bool_flag_value PROPERTIES PASS_REGULAR_EXPRESSION "generated ids: \\[19,80,95\\]")
add_test(NAME hf_run_llama_linear COMMAND hf_run --model ${HF}/llama-tiny-f16 --ids 1,15,27 --mixer hedgehog
         --form recurrent --max-new-tokens 5 --top-k 10 --top-p 0.9 --seed 3)
set_tests_properties(hf_run_llama_linear PROPERTIES PASS_REGULAR_EXPRESSION "generated ids: \\[[0-9]+,[0-9]+,[0-9]+,[0-9]+,[0-9]+\\]")
# Mistral (sliding window 5: 12 steps past a 5-token prompt), Qwen2 (biases, a sliding layer), Qwen3
# (q/k norms): transformers' generate() ids (reference.safetensors); Qwen3 converted to Hedgehog runs.
add_test(NAME hf_run_mistral_greedy COMMAND hf_run --model ${HF}/mistral-tiny --ids 1,15,27,88,4 --temperature 0
         --max-new-tokens 12)
set_tests_properties(hf_run_mistral_greedy PROPERTIES PASS_REGULAR_EXPRESSION
                     "generated ids: \\[87,12,5,5,5,5,5,53,29,36,35,35\\]")
add_test(NAME hf_run_qwen2_greedy COMMAND hf_run --model ${HF}/qwen2-tiny --ids 42,285,73,71,74 --temperature 0
         --max-new-tokens 12)
set_tests_properties(hf_run_qwen2_greedy PROPERTIES PASS_REGULAR_EXPRESSION
                     "generated ids: \\[591,591,591,388,388,388,388,388,388,388,133,133\\]")
add_test(NAME hf_run_qwen3_greedy COMMAND hf_run --model ${HF}/qwen3-tiny --ids 1,15,27,88,4 --temperature 0
         --max-new-tokens 12)
set_tests_properties(hf_run_qwen3_greedy PROPERTIES PASS_REGULAR_EXPRESSION
                     "generated ids: \\[58,21,89,21,89,21,21,21,89,21,89,3\\]")
add_test(NAME hf_run_qwen3_linear COMMAND hf_run --model ${HF}/qwen3-tiny --ids 1,15,27 --mixer hedgehog
         --form recurrent --max-new-tokens 5 --top-k 10 --seed 3)
set_tests_properties(hf_run_qwen3_linear PROPERTIES PASS_REGULAR_EXPRESSION "generated ids: \\[[0-9]+,[0-9]+,[0-9]+,[0-9]+,[0-9]+\\]")
# Decoding memory: 4 + 28 tokens of softmax attention leave a KV cache of 2 layers x (k, v) x
# 5 heads x 32 positions x 8 x 4 bytes = 20 KiB (0.0195 MiB); the reported peak above the weights
# holds it plus one step's temporaries (less than a second cache).
add_test(NAME hf_run_gpt2_decode_memory COMMAND hf_run --model ${HF}/gpt2-tiny --ids 5,17,99,42 --temperature 0
         --max-new-tokens 28)
set_tests_properties(hf_run_gpt2_decode_memory PROPERTIES PASS_REGULAR_EXPRESSION
                     "28 tokens in [0-9.]+ s \\([0-9.]+ tokens/s; prompt of 4 tokens in [0-9.]+ s; decoding memory 0\\.0[23][0-9] MiB above the weights\\)")
# LoLCATs' hybrid (sliding window of 4 + hedgehog linear attention) on GPT-2: forward and greedy decoding.
add_test(NAME hf_run_gpt2_hybrid COMMAND hf_run --model ${HF}/gpt2-tiny --ids 5,17,99,42,8,3 --mixer hybrid-hedgehog
         --window 4 --temperature 0 --max-new-tokens 6)
set_tests_properties(hf_run_gpt2_hybrid PROPERTIES PASS_REGULAR_EXPRESSION
                     "generated ids: \\[[0-9]+,[0-9]+,[0-9]+,[0-9]+,[0-9]+,[0-9]+\\]")
add_test(NAME hf_run_vit_image COMMAND hf_run --model ${HF}/vit-tiny --image ${HF}/vit-tiny/image.png
         --out ${CMAKE_CURRENT_BINARY_DIR}/hf_run_vit)
set_tests_properties(hf_run_vit_image PROPERTIES PASS_REGULAR_EXPRESSION "LABEL_4 +\\+0\\.5074")
add_test(NAME hf_run_bert_ids COMMAND hf_run --model ${HF}/bert-tiny --ids 2,17,33,4,56,71,3
         --token-types 0,0,0,0,1,1,1)
set_tests_properties(hf_run_bert_ids PROPERTIES PASS_REGULAR_EXPRESSION "LABEL_2 +\\+0\\.31919")
# Text in, text out through the folder's tokenizer (llama-tiny-tok: SentencePiece BPE; bert-tiny-tok:
# WordPiece with a text pair); the ids, text and logits are transformers' (expected.json, reference).
add_test(NAME hf_run_llama_text COMMAND hf_run --model ${HF}/llama-tiny-tok --prompt "The hedgehog is" --temperature 0
         --max-new-tokens 8)
set_tests_properties(hf_run_llama_text PROPERTIES PASS_REGULAR_EXPRESSION
                     "prompt ids: +\\[1,705,330,500,329,327,1005,329,399,513\\]\ngenerated ids: \\[705,705,705,705,705,705,705,705\\]\ntext: The hedgehog is The  The  The  The  The  The  The  The \n")
add_test(NAME hf_run_bert_text COMMAND hf_run --model ${HF}/bert-tiny-tok --text "A gripping, well-made film."
         --text-pair "Les hérissons dorment l'hiver.")
set_tests_properties(hf_run_bert_text PROPERTIES PASS_REGULAR_EXPRESSION "POSITIVE +\\+1\\.55881.*NEGATIVE +\\+0\\.15283")
# Sentence embeddings (st-tiny-*: tools/make_st_fixtures.py): a pair and its cosine, which
# SentenceTransformer.encode's vectors give as 0.99494; a file of texts into embeddings.npy.
add_test(NAME hf_run_embed_pair COMMAND hf_run --model ${HF}/st-tiny-mean --text "A gripping, well-made film."
         --text-pair "A well-made and gripping film.")
set_tests_properties(hf_run_embed_pair PROPERTIES PASS_REGULAR_EXPRESSION
                     "pooling mean, normalized.*cosine similarity: 0\\.99494")
# --normalize false overrides the folder's Normalize module; a value that is not folder/true/false
# is refused naming the flag (it once hit an internal error: the flag is not a plain boolean).
add_test(NAME hf_run_embed_unnormalized COMMAND hf_run --model ${HF}/st-tiny-mean --text "A gripping, well-made film."
         --text-pair "A well-made and gripping film." --normalize false)
set_tests_properties(hf_run_embed_unnormalized PROPERTIES PASS_REGULAR_EXPRESSION "pooling mean;.*cosine similarity: 0\\.99494"
                     FAIL_REGULAR_EXPRESSION "normalized")
add_test(NAME hf_run_embed_normalize_rejects
         COMMAND sh -c "\"$0\" --model '${HF}/st-tiny-mean' --text x --normalize maybe; test $? -ne 0 && echo REFUSED"
                 $<TARGET_FILE:hf_run>)
set_tests_properties(hf_run_embed_normalize_rejects PROPERTIES PASS_REGULAR_EXPRESSION
                     "error: --normalize: expected folder, true or false, got 'maybe'\nREFUSED")
# --weights bf16: the loaded line names the format (an ignored flag would say f32), greedy decoding runs.
add_test(NAME hf_run_weights_bf16 COMMAND hf_run --model ${HF}/gpt2-tiny --ids 5,17,99,42 --temperature 0
         --max-new-tokens 5 --weights bf16)
set_tests_properties(hf_run_weights_bf16 PROPERTIES PASS_REGULAR_EXPRESSION
                     "attention: softmax, weights: bf16\\) in [0-9.]+ s\n.*generated ids: \\[[0-9]+,[0-9]+,[0-9]+,[0-9]+,[0-9]+\\]")
add_test(NAME hf_run_weights_rejects
         COMMAND sh -c "\"$0\" --model '${HF}/gpt2-tiny' --ids 1,2 --weights int4; test $? -ne 0 && echo REFUSED"
                 $<TARGET_FILE:hf_run>)
set_tests_properties(hf_run_weights_rejects PROPERTIES PASS_REGULAR_EXPRESSION
                     "error: --weights: unknown weight format 'int4' \\(expected f32, int8 or bf16\\)\nREFUSED")
add_test(NAME hf_run_embed_file
         COMMAND sh -c "d=$(mktemp -d) && printf 'one text\\ntwo texts here\\nthree\\n' > \"$d/in.txt\" && \"$1\" --model '${HF}/st-tiny-cls' --input \"$d/in.txt\" --batch 2 --out \"$d/out\" && test -s \"$d/out/embeddings.npy\" && grep -q '\"count\": 3' \"$d/out/results.json\" && echo EMBED_FILE_OK; rc=$?; rm -rf \"$d\"; exit $rc"
         sh $<TARGET_FILE:hf_run>)
set_tests_properties(hf_run_embed_file PROPERTIES PASS_REGULAR_EXPRESSION
                     "3 embeddings of 16 values \\(pooling cls;.*EMBED_FILE_OK")
add_test(NAME hf_run_hidden_states COMMAND hf_run --model ${HF}/gpt2-tiny --ids 5,17,99 --max-new-tokens 1
         --hidden-states)
set_tests_properties(hf_run_hidden_states PROPERTIES PASS_REGULAR_EXPRESSION "last hidden state \\(1, 3, 40\\)")
add_test(NAME hf_run_hidden_states_bert COMMAND hf_run --model ${HF}/bert-tiny-tok --text "A gripping, well-made film."
         --hidden-states)
set_tests_properties(hf_run_hidden_states_bert PROPERTIES PASS_REGULAR_EXPRESSION
                     "POSITIVE.*last hidden state \\(1, [0-9]+, 16\\)")
add_test(NAME hf_run_hidden_states_vit COMMAND hf_run --model ${HF}/vit-tiny --image ${HF}/vit-tiny/image.png
         --hidden-states)
set_tests_properties(hf_run_hidden_states_vit PROPERTIES PASS_REGULAR_EXPRESSION "last hidden state \\(1, 26, [0-9]+\\)")
# Pairs: the arguments (one string, split like a shell line) and a fragment of the expected error.
set(HF_RUN_BAD
    "--ids 1" "no model folder"
    "--model /nonexistent/hh --ids 1" "/nonexistent/hh"
    "--model ${HF}/gpt2-tiny --ids 1 --mixer nope" "--mixer: unknown attention 'nope'"
    "--model ${HF}/gpt2-tiny --ids 1 --mixer hybrid-hedgehog --window 0" "--window"
    "--model ${HF}/bert-tiny --ids 2,17,3 --mixer hybrid-elu" "mixer 'hybrid-elu' is causal only"
    "--model ${HF}/gpt2-tiny --ids 1,x" "'x' is not a token id"
    "--model ${HF}/gpt2-tiny --ids 1 --max-new-tokens 40" "exceeds the model's 32 positions"
    "--model ${HF}/gpt2-tiny --ids 500" "outside the model's vocabulary of 101"
    "--model ${HF}/gpt2-tiny --image ${HF}/vit-tiny/image.png" "generates text"
    "--model ${HF}/vit-tiny --image ${CMAKE_CURRENT_SOURCE_DIR}/CMakeLists.txt" "CMakeLists.txt"
    "--model ${HF}/vit-tiny --image /dev/zero" "/dev/zero: not a regular file (a character device)"
    "--model ${HF}/gpt2-tiny --ids 1 --out ${CMAKE_CURRENT_SOURCE_DIR}/CMakeLists.txt" "not a folder"
    "--model ${HF}/gpt2-tiny --prompt hi --ids 1" "exactly one input"
    "--model ${HF}/gpt2-tiny --ids 1 --task nope" "--task: unknown 'nope'"
    "--model ${HF}/gpt2-tiny --ids 1 --task embed" "is not an encoder"
    "--model ${HF}/st-tiny-mean --text hi --task generate" "is not a decoder"
    "--model ${HF}/st-tiny-mean --text hi --task classify" "has no classification head"
    "--model ${HF}/st-tiny-mean --text hi --pooling weighted" "--pooling: unknown pooling"
    "--model ${HF}/st-tiny-mean --input /nonexistent/texts.txt" "/nonexistent/texts.txt"
    "--model ${HF}/bert-tiny --input ${CMAKE_CURRENT_SOURCE_DIR}/CMakeLists.txt --task classify" "--input FILE is for --task embed")
list(LENGTH HF_RUN_BAD n)
math(EXPR last "${n} / 2 - 1")
foreach(i RANGE ${last})
  math(EXPR a "2 * ${i}")
  math(EXPR b "2 * ${i} + 1")
  list(GET HF_RUN_BAD ${a} args)
  list(GET HF_RUN_BAD ${b} msg)
  separate_arguments(args UNIX_COMMAND "${args}")
  add_test(NAME hf_run_rejects_${i} COMMAND hf_run ${args})
  string(REGEX REPLACE "([][().*+?^$|\\\\])" "\\\\\\1" msg_re "${msg}")
  set_tests_properties(hf_run_rejects_${i} PROPERTIES PASS_REGULAR_EXPRESSION "error: .*${msg_re}"
                       FAIL_REGULAR_EXPRESSION "generated ids|LABEL_" TIMEOUT 120)
endforeach()
# A FIFO where config.json is expected: refused at once with an error naming it (it used to block
# forever in open()).
add_test(NAME hf_run_rejects_fifo_config
         COMMAND sh -c "d=$(mktemp -d) && cp '${HF}/gpt2-tiny/model.safetensors' \"$d/\" && mkfifo \"$d/config.json\" && \"$1\" --model \"$d\" --ids 1; rc=$?; rm -rf \"$d\"; exit $rc"
                 sh $<TARGET_FILE:hf_run>)
set_tests_properties(hf_run_rejects_fifo_config PROPERTIES
                     PASS_REGULAR_EXPRESSION "error: config: [^\n]*/config\\.json: not a regular file \\(a FIFO\\)" TIMEOUT 60)
# A config asking for 1,000,000,000 layers: refused before any layer is built, naming the key (it
# used to grow past 6 GB).
add_test(NAME hf_run_rejects_billion_layers
         COMMAND sh -c "d=$(mktemp -d) && cp '${HF}'/llama-tiny/* \"$d/\" && sed -i 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 1000000000/' \"$d/config.json\" && \"$1\" --model \"$d\" --ids 1; rc=$?; rm -rf \"$d\"; exit $rc"
                 sh $<TARGET_FILE:hf_run>)
set_tests_properties(hf_run_rejects_billion_layers PROPERTIES
                     PASS_REGULAR_EXPRESSION "error: llama: [^\n]*config\\.json: .*\"num_hidden_layers\" = 1000000000" TIMEOUT 60)
# Converted folders load in transformers: hh_tests writes the tiny converted decoder folders (every
# exported feature map and the hybrids) and BERT / ViT folders (every map; a padded batch for BERT),
# tools/check_hf_export.py loads each with its Auto class (trust_remote_code=True) and compares its
# logits with hf_run's (decoders <= 1e-4; encoders' logits and hidden states <= 1e-5).
# Skipped (77) where python3 cannot import torch and transformers; the doctest "hf export: the
# engine's logits ... (fixture)" checks the same agreement against committed transformers logits.
set(HF_EXPORT_DIR ${CMAKE_CURRENT_BINARY_DIR}/hf_export)
add_test(NAME hf_export_transformers COMMAND sh -c
         "python3 -c 'import numpy, torch, transformers' 2>/dev/null || { echo 'skipped: python3 with numpy, torch and transformers is not importable'; exit 77; }; rm -rf \"$0\" && HH_HF_EXPORT_DIR=\"$0\" \"$1\" -tc='hf export: write*' --no-skip && python3 \"$2\" --all \"$0\" --hf-run \"$3\""
         ${HF_EXPORT_DIR} $<TARGET_FILE:hh_tests> ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_hf_export.py $<TARGET_FILE:hf_run>)
set_tests_properties(hf_export_transformers PROPERTIES SKIP_RETURN_CODE 77)
# --save-quantized: the int8 folder round trip, bit for bit, and its refusals (cmake/int8_folder_test.cmake).
find_program(HH_PYTHON3 python3)
add_test(NAME hf_run_int8_folder
         COMMAND ${CMAKE_COMMAND} -DHF_RUN=$<TARGET_FILE:hf_run> -DHF=${HF} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/hf_run_int8_folder
                 -DPYTHON=${HH_PYTHON3} -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/int8_folder_test.cmake)
