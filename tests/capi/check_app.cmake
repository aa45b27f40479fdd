# cmake -DAPP=exe -DWORK=dir -DMPIEXEC=mpiexec -DNPFLAG=-n -DCOMPARE=compare_results
#       -DSTEPS=n -DTOLERANCE=tol [-DSAVE_EVERY=k -DH5LS=h5ls -DH5LS_REGEX=re] -P check_app.cmake
# One example app through dtrain_check_app (app_checks.cmake).
include(${CMAKE_CURRENT_LIST_DIR}/app_checks.cmake)
dtrain_check_app(COMMAND ${APP} WORK ${WORK} MPIEXEC ${MPIEXEC} NPFLAG ${NPFLAG} COMPARE ${COMPARE}
                 STEPS ${STEPS} TOLERANCE ${TOLERANCE} SAVE_EVERY "${SAVE_EVERY}" H5LS "${H5LS}"
                 H5LS_REGEX "${H5LS_REGEX}" TP "${TP}")
