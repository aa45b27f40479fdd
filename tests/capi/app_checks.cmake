# dtrain_check_app(COMMAND exe [args...] WORK dir MPIEXEC mpiexec NPFLAG -n COMPARE compare
#                  STEPS n TOLERANCE tol [SAVE_EVERY k] [H5LS h5ls H5LS_REGEX re])
# What every example app must show (called from a `cmake -P` script):
#  * trained from scratch at 1 and at 2 ranks it exits 0 (the app asserts its loss fell);
#  * the 2-rank results (final evaluation loss and every parameter) equal the 1-rank ones
#    within TOLERANCE (relative; absolute at TOLERANCE / 100 under 0.01, compare_results.c):
#    data parallelism changes only the rounding;
# and with SAVE_EVERY, of its checkpoints:
#  * the files are there; h5ls, a reader independent of dtrain, sees the expected dataset;
#  * resumed at 2 ranks from the first checkpoint, it ends exactly where it ended uninterrupted;
#  * resumed at 1 rank from that 2-rank (ZeRO-1 sharded) checkpoint, it ends where the 1-rank
#    run ended, within TOLERANCE;
#  * `--resume auto` finds the newest checkpoint (the last step: nothing left to train);
#  * each resumed run says which checkpoint and step it resumed from;
# and with TP (an app whose model splits over a tensor-parallel group, `--tp N`):
#  * at 2 ranks with `--tp 2` it ends where the 1-rank run did, within TOLERANCE;
#  * resumed with `--tp 2` from the first (data-parallel) checkpoint, where the 2-rank run did.
function(dtrain_check_app)
  cmake_parse_arguments(A "" "WORK;MPIEXEC;NPFLAG;COMPARE;STEPS;TOLERANCE;SAVE_EVERY;H5LS;H5LS_REGEX;TP"
                        "COMMAND" ${ARGN})
  file(REMOVE_RECURSE ${A_WORK})
  file(MAKE_DIRECTORY ${A_WORK})
  set(ckpt ${A_WORK}/ckpt)

  macro(run_app np)
    execute_process(COMMAND ${A_MPIEXEC} ${A_NPFLAG} ${np} ${A_COMMAND} --steps ${A_STEPS} ${ARGN}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    string(REPLACE ";" " " args "${ARGN}")
    message(STATUS "${np} rank(s): ${A_COMMAND} ${args}\n${out}")
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "the app failed at ${np} rank(s) (${rc}): ${args}\n${out}\n${err}")
    endif()
  endmacro()
  macro(compare a b tolerance)
    execute_process(COMMAND ${A_COMPARE} ${A_WORK}/${a} ${A_WORK}/${b} ${tolerance}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    message(STATUS "${a} vs ${b}: ${out}")
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${a} and ${b} differ:\n${out}${err}")
    endif()
  endmacro()

  run_app(1 --out ${A_WORK}/np1.txt)
  if(NOT A_SAVE_EVERY)
    run_app(2 --out ${A_WORK}/np2.txt)
    compare(np1.txt np2.txt ${A_TOLERANCE})
    return()
  endif()
  run_app(2 --out ${A_WORK}/np2.txt --save-dir ${ckpt} --save-every ${A_SAVE_EVERY})
  compare(np1.txt np2.txt ${A_TOLERANCE})

  # step_<8 digits>.h5 of a step
  function(checkpoint_name step out)
    string(LENGTH "${step}" digits)
    math(EXPR zeros "8 - ${digits}")
    string(REPEAT "0" ${zeros} pad)
    set(${out} step_${pad}${step}.h5 PARENT_SCOPE)
  endfunction()
  # The last run_app said it resumed from `file` at `step` (a run that found nothing, or
  # another checkpoint, can end exactly where an uninterrupted run does).
  macro(expect_resumed file step)
    if(NOT out MATCHES "resumed from [^\n]*${file} at step ${step}\n")
      message(FATAL_ERROR "the app did not say it resumed from ${file} at step ${step}:\n${out}")
    endif()
  endmacro()
  checkpoint_name(${A_SAVE_EVERY} first_name)
  checkpoint_name(${A_STEPS} last_name)
  set(first ${ckpt}/${first_name})
  foreach(f ${first} ${ckpt}/latest)
    if(NOT EXISTS ${f})
      message(FATAL_ERROR "the app did not write ${f}")
    endif()
  endforeach()
  if(A_H5LS)
    execute_process(COMMAND ${A_H5LS} -r ${first} OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0 OR NOT listing MATCHES "${A_H5LS_REGEX}")
      message(FATAL_ERROR "h5ls -r ${first} lacks ${A_H5LS_REGEX}:\n${listing}")
    endif()
  endif()
  run_app(2 --out ${A_WORK}/resumed.txt --resume ${first})
  expect_resumed(${first_name} ${A_SAVE_EVERY})
  compare(np2.txt resumed.txt 0)
  run_app(1 --out ${A_WORK}/resumed1.txt --resume ${first})
  expect_resumed(${first_name} ${A_SAVE_EVERY})
  compare(np1.txt resumed1.txt ${A_TOLERANCE})
  run_app(2 --out ${A_WORK}/auto.txt --save-dir ${ckpt} --resume auto)
  expect_resumed(${last_name} ${A_STEPS})
  compare(np2.txt auto.txt 0)
  if(A_TP)
    run_app(2 --tp 2 --out ${A_WORK}/tp2.txt)
    compare(np1.txt tp2.txt ${A_TOLERANCE})
    run_app(2 --tp 2 --out ${A_WORK}/tp2_resumed.txt --resume ${first})
    expect_resumed(${first_name} ${A_SAVE_EVERY})
    compare(np2.txt tp2_resumed.txt ${A_TOLERANCE})
  endif()
endfunction()
