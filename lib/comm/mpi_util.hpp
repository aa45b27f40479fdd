#pragma once
// MPI plumbing shared by the MPI backend: error checks, type and op mapping, and the
// element limit of one MPI call (MPI counts are int).
#include <mpi.h>

#include <climits>
#include <cstddef>

#include "dtrain/comm/types.hpp"
#include "dtrain/core/dtype.hpp"

namespace dtrain::comm {

// Throws Error(Errc::comm) naming the MPI function and MPI's error text.
void throw_mpi_error(int code, const char* what);
inline void mpi_check(int code, const char* what) {
  if (code != MPI_SUCCESS) throw_mpi_error(code, what);
}

// The communicator a Fortran handle names: Errc::invalid_argument for MPI_COMM_NULL or a
// handle that names none (MPI would raise that on MPI_COMM_WORLD, whose handler aborts by
// default: it is asked with errors returned instead, then the handler is restored).
MPI_Comm communicator_of_fortran_handle(int fortran_handle);

// The datatype that moves `type` (bf16/f16 travel as 16-bit words).
MPI_Datatype mpi_datatype(DType type);
// The reduction MPI applies (avg reduces with sum; 16-bit floats use dtrain's own ops).
MPI_Op mpi_op(ReduceOp op, DType type);

// Creates / frees the user-defined ops for bf16 and f16 (after MPI_Init, before Finalize).
void create_half_ops();
void free_half_ops();

// Most elements passed to one MPI call. INT_MAX in production; tests lower it to exercise
// the paths that split huge counts.
std::size_t max_elements_per_call() noexcept;
void set_max_elements_per_call(std::size_t n) noexcept;  // 0 restores the default

inline bool fits_one_call(std::size_t count) noexcept { return count <= max_elements_per_call(); }

// A committed derived datatype holding `count` consecutive elements of `base`, so that a
// count beyond the per-call limit travels as one element. Frees itself.
class ContiguousType {
 public:
  ContiguousType(std::size_t count, MPI_Datatype base);
  ~ContiguousType();
  ContiguousType(ContiguousType&& other) noexcept;
  ContiguousType& operator=(ContiguousType&&) = delete;
  ContiguousType(const ContiguousType&) = delete;
  ContiguousType& operator=(const ContiguousType&) = delete;
  MPI_Datatype get() const noexcept { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

// buf[i] /= divisor for the avg reduction (integer division for integer types).
void divide_in_place(void* buf, std::size_t count, DType type, int divisor);

}  // namespace dtrain::comm
