# dtrain_add_app_test(NAME TARGET tgt STEPS n TOLERANCE tol [SAVE_EVERY k] [H5LS_REGEX re] [TP 2]
#                     [LABELS ...])
# A CTest test running check_app.cmake on an example app of the build tree. Included by
# tests/capi, tests/fortran and tests/install; also defines the comparison tool once.
include_guard(GLOBAL)

add_executable(dtrain_compare_results ${CMAKE_CURRENT_LIST_DIR}/compare_results.c)
target_link_libraries(dtrain_compare_results PRIVATE m)
find_program(DTRAIN_H5LS h5ls)

function(dtrain_add_app_test name)
  cmake_parse_arguments(T "" "TARGET;STEPS;TOLERANCE;SAVE_EVERY;H5LS_REGEX;TP" "LABELS" ${ARGN})
  set(h5ls "")
  if(T_H5LS_REGEX AND DTRAIN_H5LS)
    set(h5ls ${DTRAIN_H5LS})
  elseif(T_H5LS_REGEX)
    message(WARNING "h5ls not found (Debian: hdf5-tools): ${name} does not check its checkpoint's datasets")
  endif()
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} -DAPP=$<TARGET_FILE:${T_TARGET}>
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/${name} -DMPIEXEC=${MPIEXEC_EXECUTABLE}
                   -DNPFLAG=${MPIEXEC_NUMPROC_FLAG} -DCOMPARE=$<TARGET_FILE:dtrain_compare_results>
                   -DSTEPS=${T_STEPS} -DTOLERANCE=${T_TOLERANCE} -DSAVE_EVERY=${T_SAVE_EVERY}
                   -DH5LS=${h5ls} "-DH5LS_REGEX=${T_H5LS_REGEX}" -DTP=${T_TP}
                   -P ${PROJECT_SOURCE_DIR}/tests/capi/check_app.cmake)
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 PROCESSORS 2 LABELS "mpi;apps;${T_LABELS}"
                       ENVIRONMENT "${DTRAIN_TEST_ENV}")
endfunction()
