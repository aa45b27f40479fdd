# cmake -DROOT=<source dir> -P check_layering.cmake
# Fails when a layer includes a layer above it, or a third-party header outside its owner.
set(layers core comm device nn optim parallel ckpt train)
set(owner_mpi.h comm)
set(owner_nccl.h comm)
set(owner_cblas.h device)
set(owner_cublas_v2.h device)
set(owner_cuda_runtime.h device)
set(owner_hdf5.h ckpt)
set(third_party mpi.h nccl.h cblas.h cublas_v2.h cuda_runtime.h hdf5.h)

set(errors "")
list(LENGTH layers nlayers)
math(EXPR last "${nlayers} - 1")
foreach(i RANGE ${last})
  list(GET layers ${i} layer)
  file(GLOB_RECURSE files
       ${ROOT}/lib/${layer}/*.cpp ${ROOT}/lib/${layer}/*.hpp ${ROOT}/lib/${layer}/*.h
       ${ROOT}/lib/${layer}/*.cu ${ROOT}/include/dtrain/${layer}/*.hpp)
  foreach(f IN LISTS files)
    file(STRINGS ${f} includes REGEX "^[ \t]*#[ \t]*include")
    foreach(line IN LISTS includes)
      # Public headers (dtrain/comm/...) and internal ones, which lib/ code includes from the
      # lib root ("comm/mpi_util.hpp"); other folders (boost/...) are not layers.
      if(line MATCHES "[<\"](dtrain/)?([a-z_]+)/")
        set(target ${CMAKE_MATCH_2})
        list(FIND layers ${target} j)
        if(j GREATER i)
          string(APPEND errors "${f}: layer '${layer}' includes higher layer '${target}'\n")
        endif()
      endif()
      foreach(h IN LISTS third_party)
        if(line MATCHES "[<\"/]${h}[>\"]" AND NOT layer STREQUAL owner_${h})
          string(APPEND errors "${f}: '${h}' may only be included by layer '${owner_${h}}'\n")
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()

if(errors)
  message(FATAL_ERROR "layering violations:\n${errors}")
endif()
message(STATUS "layering: ok")
