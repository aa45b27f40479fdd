# cmake -DMPIEXEC=... -DNPFLAG=-n -DNP=2 -DPROGRAM=... "-DARGS=a;b" -DREGEX=... -DCODE=2
#       -P expect_failure.cmake
# Passes when an NP-rank run of PROGRAM ARGS exits with status CODE (any non-zero when CODE
# is empty), prints REGEX exactly once (one message, not one per rank), no crash or runtime
# trace, and ends in 20 s.
string(TIMESTAMP start "%s")
execute_process(COMMAND ${MPIEXEC} ${NPFLAG} ${NP} ${PROGRAM} ${ARGS}
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 25)
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
set(all "${out}${err}")
if(status EQUAL 0 OR status STREQUAL "" OR status MATCHES "timeout")
  message(FATAL_ERROR "expected a non-zero exit status, got '${status}'\n${all}")
endif()
if(CODE AND NOT status EQUAL CODE)
  message(FATAL_ERROR "expected exit status ${CODE}, got ${status}\n${all}")
endif()
string(REGEX MATCHALL "${REGEX}" matches "${all}")
list(LENGTH matches n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected the message '${REGEX}' exactly once, saw it ${n} times:\n${all}")
endif()
# Whatever the message, never a crash's or a runtime's traces, nor an MPI_Abort (the ranks agree
# on a failure and exit; an abort is for a rank that fails alone).
if(all MATCHES "Backtrace|ERROR STOP|Segmentation fault|terminate called|core dumped|MPI_ABORT was invoked")
  message(FATAL_ERROR "a crash or runtime trace in the output:\n${all}")
endif()
if(seconds GREATER 20)
  message(FATAL_ERROR "the job took ${seconds} s to end")
endif()
# The run's output too, for a test's own FAIL_REGULAR_EXPRESSION (what must not have happened).
message(STATUS "output:\n${all}")
message(STATUS "ok: exit ${status}, one message, ${seconds} s")
