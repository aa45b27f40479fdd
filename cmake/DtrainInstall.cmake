include(CMakePackageConfigHelpers)

install(TARGETS dtrain EXPORT dtrainTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/dtrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/dtrain/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtrain)

set(DTRAIN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)
install(EXPORT dtrainTargets NAMESPACE dtrain:: DESTINATION ${DTRAIN_CMAKE_DIR})
configure_package_config_file(cmake/dtrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dtrainConfig.cmake INSTALL_DESTINATION ${DTRAIN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtrainConfig.cmake
              ${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
        DESTINATION ${DTRAIN_CMAKE_DIR})

# Relocatable: the prefix is found from the .pc file's own place, so `cmake --install
# --prefix DIR` works whatever CMAKE_INSTALL_PREFIX was at configure time.
file(RELATIVE_PATH DTRAIN_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/dtrain.pc.in ${PROJECT_BINARY_DIR}/dtrain.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dtrain.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
