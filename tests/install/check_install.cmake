# cmake -DBUILD_DIR=... -DWORK=... -DSOURCE=... -DAPPS=... -DMPIEXEC=... -DNPFLAG=...
#       -DMPICC=... -DC_COMPILER=... -DCXX_COMPILER=... -DFortran_COMPILER=...
#       -DMPI_C=... -DMPI_CXX=... -DMPI_FORTRAN=... -DCOMPARE=...
#       -DH5LS=... -DAPP_CHECKS=.../app_checks.cmake [-DSANITIZE=address,...] -P check_install.cmake
# Installs the build into WORK/prefix, then, against that prefix only: builds
# tests/install/consumer, apps/cpp, apps/c and apps/fortran with find_package(dtrain CONFIG),
# apps/c once more with a plain `mpicc ... $(pkg-config --cflags --libs dtrain)` and the
# Fortran MLP with `mpif90 ... $(pkg-config --cflags --libs dtrain-fortran)`; runs
# every example through dtrain_check_app (loss falls, 2 ranks equal 1 rank, checkpoints
# resume exactly), and checks the pkg-config file and the SONAME link.
include(${APP_CHECKS})
set(prefix ${WORK}/prefix)
# A checking build's library needs its sanitizers' runtimes linked into the programs too.
set(sanitize_link "")
if(SANITIZE)
  set(sanitize_link -fsanitize=${SANITIZE})
endif()
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
# A separate CMake project against the install tree, with the compilers and the MPI dtrain
# was built with (Fortran module files are specific to both; MPI_C, MPI_CXX, MPI_FORTRAN:
# its MPI wrappers, where several MPI libraries are installed side by side).
set(mpi_args "")
foreach(lang C CXX Fortran)
  string(TOUPPER ${lang} var)
  if(MPI_${var})
    list(APPEND mpi_args -DMPI_${lang}_COMPILER=${MPI_${var}})
  endif()
endforeach()
function(build_project name source)
  run(${CMAKE_COMMAND} -S ${source} -B ${WORK}/${name} -DCMAKE_PREFIX_PATH=${prefix}
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=${C_COMPILER}
      -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_Fortran_COMPILER=${Fortran_COMPILER}
      ${mpi_args} "-DCMAKE_EXE_LINKER_FLAGS=${sanitize_link}")
  run(${CMAKE_COMMAND} --build ${WORK}/${name})
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
build_project(consumer ${SOURCE}/consumer)
run(${WORK}/consumer/consumer)
message(STATUS "${last_output}")
build_project(cpp ${APPS}/cpp)
build_project(c ${APPS}/c)
build_project(fortran ${APPS}/fortran)

file(GLOB pcdir ${prefix}/lib*/pkgconfig)
set(ENV{PKG_CONFIG_PATH} ${pcdir})
execute_process(COMMAND pkg-config --cflags --libs dtrain RESULT_VARIABLE rc
                OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config cannot find the installed dtrain.pc")
endif()
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
file(GLOB libdir ${prefix}/lib*/libdtrain.so)
get_filename_component(libdir ${libdir} DIRECTORY)
file(GLOB c_sources ${APPS}/c/*.c)
list(FILTER c_sources EXCLUDE REGEX "/gpt\\.c$")  # a program of its own, built below
run(${MPICC} ${sanitize_link} ${c_sources} ${pc_flags} -Wl,-rpath,${libdir} -lm
    -o ${WORK}/c-example-mpicc)
run(${MPICC} ${sanitize_link} ${APPS}/c/gpt.c ${pc_flags} -Wl,-rpath,${libdir} -o ${WORK}/c-gpt-mpicc)
run(${MPIEXEC} ${NPFLAG} 1 ${WORK}/c-gpt-mpicc --steps 3 --generate 8 --device cpu)
# The Fortran MLP with a plain mpif90 and dtrain-fortran.pc (the module folder, both libraries).
execute_process(COMMAND pkg-config --cflags --libs dtrain-fortran RESULT_VARIABLE rc
                OUTPUT_VARIABLE pc_fortran_flags OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config cannot find the installed dtrain-fortran.pc")
endif()
separate_arguments(pc_fortran_flags UNIX_COMMAND "${pc_fortran_flags}")
file(MAKE_DIRECTORY ${WORK}/fortran-mpif90)
set(f_sources options.f90 synthetic.f90 results.f90 app_exit.f90 mlp.f90)
list(TRANSFORM f_sources PREPEND ${APPS}/fortran/)
run(${MPI_FORTRAN} ${sanitize_link} -J ${WORK}/fortran-mpif90 ${f_sources} ${pc_fortran_flags}
    -Wl,-rpath,${libdir} -o ${WORK}/fortran-mlp-mpif90)
run(${MPIEXEC} ${NPFLAG} 1 ${WORK}/fortran-mlp-mpif90)

set(checks MPIEXEC ${MPIEXEC} NPFLAG ${NPFLAG} COMPARE ${COMPARE} TOLERANCE 1e-4)
dtrain_check_app(COMMAND ${WORK}/cpp/dtrain-cpp-example WORK ${WORK}/run-cpp STEPS 120 ${checks})
dtrain_check_app(COMMAND ${WORK}/c-example-mpicc WORK ${WORK}/run-c-mpicc STEPS 300 ${checks})
dtrain_check_app(COMMAND ${WORK}/c/dtrain-c-example WORK ${WORK}/run-c STEPS 300 SAVE_EVERY 100
                 H5LS "${H5LS}" H5LS_REGEX "/model/hidden.weight +Dataset {32, 4}" ${checks})
foreach(example byom mlp)
  dtrain_check_app(COMMAND ${WORK}/fortran/dtrain-fortran-${example} WORK ${WORK}/run-fortran-${example}
                   STEPS 300 SAVE_EVERY 100 ${checks})
endforeach()

file(GLOB pc ${prefix}/lib*/pkgconfig/dtrain.pc)
if(NOT pc)
  message(FATAL_ERROR "dtrain.pc was not installed")
endif()
file(READ ${pc} pc_text)
if(NOT pc_text MATCHES "Libs: -L[^\n]+ -ldtrain")
  message(FATAL_ERROR "dtrain.pc lacks the link line:\n${pc_text}")
endif()
file(GLOB so ${prefix}/lib*/libdtrain.so.[0-9])
if(NOT so)
  message(FATAL_ERROR "libdtrain.so.<major> (the SONAME link) is missing")
endif()
# The installed programs start as they are, without a library path (their run path names
# the installed library). (None are installed by a build with DTRAIN_BUILD_APPS off.)
set(programs dtrain-gpt dtrain-ckpt)
if(NOT APPS_BUILT)
  set(programs "")
endif()
foreach(program IN LISTS programs)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${prefix}/bin/${program} --help
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the installed ${program} does not start without LD_LIBRARY_PATH (${rc}):\n${out}\n${err}")
  endif()
endforeach()
