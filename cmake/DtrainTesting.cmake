# Helpers that every test folder uses. The test environment (never the library) sets what
# Open MPI needs to run as root and with more ranks than cores.
set(DTRAIN_TEST_ENV
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_rmaps_base_oversubscribe=1
  OMPI_MCA_btl_vader_single_copy_mechanism=none
  OPENBLAS_NUM_THREADS=1)

# Whether the tests' mpiexec is Open MPI's: some checks concern Open MPI alone.
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE dtrain_mpiexec_version
                ERROR_QUIET TIMEOUT 20)
if(dtrain_mpiexec_version MATCHES "Open MPI|OpenRTE")
  set(DTRAIN_TEST_OPEN_MPI TRUE)
else()
  set(DTRAIN_TEST_OPEN_MPI FALSE)
endif()

# dtrain_add_unit_test(NAME SOURCES ...): a GoogleTest binary run without MPI.
function(dtrain_add_unit_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE dtrain_internal GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/lib)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${DTRAIN_TEST_ENV}"
                       LABELS "unit;${T_LABELS}")
endfunction()

# dtrain_expect_lines(NAME REGEX... -- COMMAND...): COMMAND must exit 0 and print a line
# matching each extended regular expression (tests/apps/expect_lines.sh). A CTest
# PASS_REGULAR_EXPRESSION alone ignores the exit status: a line printed before a later
# failure would pass. LABELS and the like are set by the caller.
function(dtrain_expect_lines name)
  add_test(NAME ${name} COMMAND bash ${PROJECT_SOURCE_DIR}/tests/apps/expect_lines.sh ${ARGN})
  set_tests_properties(${name} PROPERTIES PASS_REGULAR_EXPRESSION "ok: all [0-9]+ lines printed"
                       ENVIRONMENT "${DTRAIN_TEST_ENV}")
endfunction()

# dtrain_add_mpi_test(NAME TARGET tgt RANKS 1 2 3 4 [ARGS ...] [TIMEOUT s] [WILL_FAIL]
#                     [PASS_REGEX re | OUTPUT_REGEX re] [LABELS ...])
# Runs tgt under ${MPIEXEC_EXECUTABLE} -n N once per rank count, as NAME.npN. PASS_REGEX: the
# job must also exit 0 (dtrain_expect_lines); OUTPUT_REGEX: a line of the output, whatever
# the exit status (a job that is meant to be aborted).
function(dtrain_add_mpi_test name)
  cmake_parse_arguments(T "WILL_FAIL" "TARGET;TIMEOUT;PASS_REGEX;OUTPUT_REGEX" "RANKS;ARGS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 180)
  endif()
  foreach(n IN LISTS T_RANKS)
    set(test_name ${name}.np${n})
    set(job ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
            $<TARGET_FILE:${T_TARGET}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
    if(T_PASS_REGEX)
      dtrain_expect_lines(${test_name} "${T_PASS_REGEX}" -- ${job})
    else()
      add_test(NAME ${test_name} COMMAND ${job})
    endif()
    set(procs ${n})
    if(procs GREATER 2)
      set(procs 2)
    endif()
    set_tests_properties(${test_name} PROPERTIES TIMEOUT ${T_TIMEOUT} PROCESSORS ${procs}
                         ENVIRONMENT "${DTRAIN_TEST_ENV}" LABELS "mpi;${T_LABELS}")
    if(T_WILL_FAIL)
      set_tests_properties(${test_name} PROPERTIES WILL_FAIL TRUE)
    endif()
    if(T_OUTPUT_REGEX)
      set_tests_properties(${test_name} PROPERTIES PASS_REGULAR_EXPRESSION "${T_OUTPUT_REGEX}")
    endif()
  endforeach()
endfunction()

# dtrain_one_rank_env_failure(NAME VAR=VALUE CODE REGEX PROGRAM ARGS...): two ranks of
# PROGRAM ARGS, the second with VAR=VALUE in its environment only (MPMD), must exit with
# status CODE (not a crash, nor `timeout`'s 30 s) and print a line matching REGEX. LABELS and
# the like are set by the caller.
function(dtrain_one_rank_env_failure name setting code regex program)
  string(REPLACE ";" " " args "${ARGN}")
  add_test(NAME ${name}
           COMMAND bash -c "timeout -k 5 30 \"$0\" \"$1\" 1 \"$2\" $4 : \"$1\" 1 env \"$3\" \"$2\" $4; s=$?; echo \"exit status $s\"; [ $s -eq $5 ] || echo \"wrong exit status: wanted $5\""
                   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${program} ${setting} "${args}" ${code})
  set_tests_properties(${name} PROPERTIES PROCESSORS 2 TIMEOUT 60 ENVIRONMENT "${DTRAIN_TEST_ENV}"
                       PASS_REGULAR_EXPRESSION "${regex}" FAIL_REGULAR_EXPRESSION "wrong exit status")
endfunction()

# dtrain_expect_failure(NAME NP CODE REGEX PROGRAM ARGS...): NP ranks of PROGRAM ARGS end
# within 20 s with exit status CODE, printing REGEX exactly once (one message, not one per
# rank): tests/apps/expect_failure.cmake. LABELS and the like are set by the caller.
function(dtrain_expect_failure name np code regex program)
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DNPFLAG=${MPIEXEC_NUMPROC_FLAG}
                   -DNP=${np} -DPROGRAM=${program} "-DARGS=${ARGN}" "-DREGEX=${regex}" -DCODE=${code}
                   -P ${PROJECT_SOURCE_DIR}/tests/apps/expect_failure.cmake)
  set_tests_properties(${name} PROPERTIES TIMEOUT 60 PROCESSORS ${np} ENVIRONMENT "${DTRAIN_TEST_ENV}")
endfunction()

# dtrain_expect_options_differ(NAME PROGRAM REGEX): two ranks of PROGRAM given different
# options (--steps 10 and --steps 20, MPMD) stop together with exit status 2 and REGEX,
# instead of one waiting for the other in a collective.
function(dtrain_expect_options_differ name program regex)
  add_test(NAME ${name}
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/apps/expect_status.sh 2 "${regex}"
                   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 ${program} --steps 10 :
                   ${MPIEXEC_NUMPROC_FLAG} 1 ${program} --steps 20)
  set_tests_properties(${name} PROPERTIES TIMEOUT 60 PROCESSORS 2 ENVIRONMENT "${DTRAIN_TEST_ENV}")
endfunction()
