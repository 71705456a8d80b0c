# Data-parallel training end to end (apps/dist_check.cpp; included when MPI was found and the apps
# and tests are built). One process trains the reference; `mpirun -np 2` trains the same global
# batches split across 2 CPU ranks, without and with gradient accumulation (2 micro-batches per
# rank, no_sync on the first); the final weights must equal the reference's to DIST_TOL.
#
# Tolerance: the ranks' gradients are the exact halves of the single-process computation, but the
# f32 sums behind them are taken in another order (each rank sums its 4 rows, then the two halves
# are added and halved, instead of one sum over 8 rows), so gradients differ in their last bits
# (relative ~1e-7). Five AdamW steps at lr 3e-3 turn that into weight differences of at most a few
# 1e-7 (measured 2.4e-7 on the development machine); DIST_TOL = 1e-5 leaves room for other compilers
# and CPUs while any real error (a missing or doubled gradient, a rank on other rows, an
# unaveraged sum) moves weights by ~1e-3 per step: dist_compare_detects_difference checks that a
# run on other data is rejected.
set(DIST_DIR ${CMAKE_CURRENT_BINARY_DIR}/dist_check)
set(DIST_TOL 1e-5)
set(DIST_MPIRUN ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe --allow-run-as-root)
set(DIST_ENV "OMP_NUM_THREADS=1;HH_DEVICE=cpu")

add_test(NAME dist_single COMMAND dist_check --backend none --out ${DIST_DIR}/single.safetensors)
set_tests_properties(dist_single PROPERTIES FIXTURES_SETUP dist_single ENVIRONMENT "${DIST_ENV}"
                     PASS_REGULAR_EXPRESSION "wrote .*single.safetensors")

add_test(NAME dist_mpi2 COMMAND ${DIST_MPIRUN} $<TARGET_FILE:dist_check> --backend mpi --out ${DIST_DIR}/mpi2.safetensors)
add_test(NAME dist_mpi2_accum2 COMMAND ${DIST_MPIRUN} $<TARGET_FILE:dist_check> --backend mpi --accum 2
         --out ${DIST_DIR}/mpi2_accum2.safetensors)
# A run on other batches (seed 2 for the data, same weights): must NOT pass the comparison.
add_test(NAME dist_single_other_data COMMAND dist_check --backend none --seed 2 --out ${DIST_DIR}/other.safetensors)
foreach(t mpi2 mpi2_accum2 single_other_data)
  set_tests_properties(dist_${t} PROPERTIES FIXTURES_SETUP dist_${t} ENVIRONMENT "${DIST_ENV}" TIMEOUT 300)
endforeach()
set_tests_properties(dist_mpi2 dist_mpi2_accum2 PROPERTIES PASS_REGULAR_EXPRESSION
                     "backend mpi, 2 rank\\(s\\).*wrote .*safetensors")

foreach(t mpi2 mpi2_accum2)
  add_test(NAME dist_compare_${t} COMMAND dist_check --out ${DIST_DIR}/${t}.safetensors
           --compare ${DIST_DIR}/single.safetensors --tol ${DIST_TOL})
  set_tests_properties(dist_compare_${t} PROPERTIES FIXTURES_REQUIRED "dist_single;dist_${t}"
                       PASS_REGULAR_EXPRESSION "max \\|delta\\| = ")
endforeach()
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
    "--compare ${DIST_DIR}/single.safetensors" "bad.safetensors")  # --out below does not exist
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
