# Data-parallel training end to end (apps/dist_check.cpp; included when MPI was found and the apps
# and tests are built). One process trains the reference; `mpirun -np 2` trains the same global
# batches split across 2 CPU ranks, without and with gradient accumulation (2 micro-batches per
# rank, no_sync on the first), with AdamW and with SGD (Adam's update barely moves when all
# gradients are scaled, so only SGD catches a reduction that forgot to divide by world); the final
# weights must equal the reference's to DIST_TOL.
#
# Tolerance 2e-6: the ranks compute the exact halves of the single-process gradient, but their f32
# sums run in another order (each rank sums its 4 rows, then the two halves are added and halved,
# instead of one sum over 8 rows), so gradients differ in their last bits and the weights after 5
# steps by a few ulps: measured max |delta| 1.5e-7 (AdamW), 2.2e-7 (AdamW, accumulation 2) on the
# development machine, with weights of size ~0.02-1 (ulp of 1: 1.2e-7). 2e-6 leaves ~10x for other
# compilers and CPUs. Real errors are far above it: a run with another seed gives 0.36; a missing
# division by world (SGD at twice the lr) gives 0.23. dist_check's model has no linear biases: a
# key bias has a true gradient of zero, so its gradient is pure rounding noise, which Adam turns
# into updates of ~lr * noise / eps that differ between any two summation orders (4e-6 measured).
set(DIST_DIR ${CMAKE_CURRENT_BINARY_DIR}/dist_check_runs)  # (dist_check is the program)
set(DIST_TOL 2e-6)
set(DIST_MPIRUN ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe --allow-run-as-root)
set(DIST_ENV "OMP_NUM_THREADS=1;HH_DEVICE=cpu")

add_test(NAME dist_single COMMAND dist_check --backend none --out ${DIST_DIR}/single.safetensors)
set_tests_properties(dist_single PROPERTIES FIXTURES_SETUP dist_single ENVIRONMENT "${DIST_ENV}"
                     PASS_REGULAR_EXPRESSION "wrote .*single.safetensors")

add_test(NAME dist_mpi2 COMMAND ${DIST_MPIRUN} $<TARGET_FILE:dist_check> --backend mpi --out ${DIST_DIR}/mpi2.safetensors)
add_test(NAME dist_mpi2_accum2 COMMAND ${DIST_MPIRUN} $<TARGET_FILE:dist_check> --backend mpi --accum 2
         --out ${DIST_DIR}/mpi2_accum2.safetensors)
# A run with another seed (other initial weights and batches): must NOT pass the comparison.
add_test(NAME dist_single_other_data COMMAND dist_check --backend none --seed 2 --out ${DIST_DIR}/other.safetensors)
# SGD (momentum 0.9): the same check where the size of the averaged gradient matters.
set(DIST_SGD --optimizer sgd --lr 0.1)
add_test(NAME dist_single_sgd COMMAND dist_check --backend none ${DIST_SGD} --out ${DIST_DIR}/single_sgd.safetensors)
add_test(NAME dist_mpi2_sgd COMMAND ${DIST_MPIRUN} $<TARGET_FILE:dist_check> --backend mpi --accum 2 ${DIST_SGD}
         --out ${DIST_DIR}/mpi2_sgd.safetensors)
foreach(t mpi2 mpi2_accum2 single_other_data single_sgd mpi2_sgd)
  set_tests_properties(dist_${t} PROPERTIES FIXTURES_SETUP dist_${t} ENVIRONMENT "${DIST_ENV}" TIMEOUT 300)
endforeach()
set_tests_properties(dist_mpi2 dist_mpi2_accum2 dist_mpi2_sgd PROPERTIES PASS_REGULAR_EXPRESSION
                     "backend mpi, 2 rank\\(s\\).*wrote .*safetensors")

foreach(t mpi2 mpi2_accum2)
  add_test(NAME dist_compare_${t} COMMAND dist_check --out ${DIST_DIR}/${t}.safetensors
           --compare ${DIST_DIR}/single.safetensors --tol ${DIST_TOL})
  set_tests_properties(dist_compare_${t} PROPERTIES FIXTURES_REQUIRED "dist_single;dist_${t}"
                       PASS_REGULAR_EXPRESSION "max \\|delta\\| = ")
endforeach()
add_test(NAME dist_compare_sgd COMMAND dist_check --out ${DIST_DIR}/mpi2_sgd.safetensors
         --compare ${DIST_DIR}/single_sgd.safetensors --tol ${DIST_TOL})
set_tests_properties(dist_compare_sgd PROPERTIES FIXTURES_REQUIRED "dist_single_sgd;dist_mpi2_sgd"
                     PASS_REGULAR_EXPRESSION "max \\|delta\\| = ")
add_test(NAME dist_compare_detects_difference COMMAND dist_check --out ${DIST_DIR}/other.safetensors
         --compare ${DIST_DIR}/single.safetensors --tol ${DIST_TOL})
set_tests_properties(dist_compare_detects_difference PROPERTIES FIXTURES_REQUIRED "dist_single;dist_single_other_data"
                     PASS_REGULAR_EXPRESSION "error: --compare: max \\|delta\\| .* is above the tolerance")

# Bad input: clear errors, non-zero exit, no hang (an uneven split fails on every rank before any
# collective; MPI_Abort ends the job).
set(DIST_BAD
    "--backend nope" "unknown communicator backend 'nope'"
    "--backend mpi" "communicator 'mpi' needs processes started by mpirun"
    "--backend none --accum 3" "--accum 3 does not divide the 8 rows"
    "--backend none --optimizer adam" "--optimizer: unknown 'adam'"
    "--compare ${DIST_DIR}/single.safetensors" "bad.safetensors")  # --out below does not exist
if(NOT HH_WITH_NCCL)
  list(APPEND DIST_BAD "--backend nccl" "communicator 'nccl' is not available: this program was built without NCCL")
endif()
list(LENGTH DIST_BAD n)
math(EXPR last "${n} / 2 - 1")
foreach(i RANGE ${last})
  math(EXPR a "2 * ${i}")
  math(EXPR b "2 * ${i} + 1")
  list(GET DIST_BAD ${a} args)
  list(GET DIST_BAD ${b} msg)
  separate_arguments(args UNIX_COMMAND "${args}")
  add_test(NAME dist_check_rejects_${i} COMMAND dist_check ${args} --out ${DIST_DIR}/bad.safetensors)
  string(REGEX REPLACE "([][().*+?^$|\\\\])" "\\\\\\1" msg_re "${msg}")
  set_tests_properties(dist_check_rejects_${i} PROPERTIES PASS_REGULAR_EXPRESSION "error: .*${msg_re}"
                       FAIL_REGULAR_EXPRESSION "wrote ")
endforeach()
add_test(NAME dist_mpi2_rejects_uneven_batch COMMAND ${DIST_MPIRUN} $<TARGET_FILE:dist_check> --backend mpi
         --global-batch 3 --out ${DIST_DIR}/bad.safetensors)
set_tests_properties(dist_mpi2_rejects_uneven_batch PROPERTIES ENVIRONMENT "${DIST_ENV}" TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "error: --global-batch 3 does not split evenly across 2 ranks"
                     FAIL_REGULAR_EXPRESSION "wrote ")
