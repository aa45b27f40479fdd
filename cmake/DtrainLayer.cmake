# dtrain_add_layer(NAME SOURCES ... [DEPS layer...] [PRIVATE_LIBS lib...])
#
# Each layer of DESIGN.md is an OBJECT library. Third-party dependencies are PRIVATE so
# that, e.g., mpi.h is reachable only from lib/comm; tests/unit/check_layering.cmake
# enforces the include rules between layers.
set(DTRAIN_LAYERS "" CACHE INTERNAL "")
function(dtrain_add_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS;PRIVATE_LIBS" ${ARGN})
  set(target dtrain_${name})
  add_library(${target} OBJECT ${L_SOURCES})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
    PRIVATE ${PROJECT_SOURCE_DIR}/lib)
  target_compile_definitions(${target} PRIVATE DTRAIN_BUILDING_LIBRARY)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  foreach(dep IN LISTS L_DEPS)
    target_link_libraries(${target} PUBLIC dtrain_${dep})
  endforeach()
  if(L_PRIVATE_LIBS)
    target_link_libraries(${target} PRIVATE ${L_PRIVATE_LIBS})
  endif()
  set(DTRAIN_LAYERS ${DTRAIN_LAYERS} ${target} CACHE INTERNAL "")
endfunction()
