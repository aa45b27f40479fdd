# cmake -DMPIEXEC=... -DNPFLAG=-n -DPROGRAM=... -DREGEX=... -P expect_abort.cmake
# Passes when a 2-rank run of PROGRAM exits non-zero, prints REGEX, and ends within 20 s.
string(TIMESTAMP start "%s")
execute_process(COMMAND ${MPIEXEC} ${NPFLAG} 2 ${PROGRAM}
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 25)
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
message(STATUS "exit status: ${status} after ${seconds} s")
if(status EQUAL 0 OR status STREQUAL "")
  message(FATAL_ERROR "expected a non-zero exit status, got '${status}'\n${out}\n${err}")
endif()
if(NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "the watchdog message is missing:\n${out}\n${err}")
endif()
if(seconds GREATER 20)
  message(FATAL_ERROR "the job took ${seconds} s to end")
endif()
