#include "comm/mpi_util.hpp"

#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>

#include "dtrain/core/error.hpp"

namespace dtrain::comm {

MPI_Comm communicator_of_fortran_handle(int fortran_handle) {
  const MPI_Comm c = MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_handle));
  DTRAIN_CHECK(c != MPI_COMM_NULL, Errc::invalid_argument, "user communicator is MPI_COMM_NULL");
  // MPI 3 raises an invalid handle on MPI_COMM_WORLD, MPI 4 on MPI_COMM_SELF: both return
  // errors for this one question, then get their handlers back. (A library whose initial
  // error handler aborts regardless cannot be asked politely.)
  MPI_Comm raised_on[2] = {MPI_COMM_WORLD, MPI_COMM_SELF};
  MPI_Errhandler saved[2] = {MPI_ERRHANDLER_NULL, MPI_ERRHANDLER_NULL};
  for (int i = 0; i < 2; ++i) {
    MPI_Comm_get_errhandler(raised_on[i], &saved[i]);
    MPI_Comm_set_errhandler(raised_on[i], MPI_ERRORS_RETURN);
  }
  int size = 0;
  const int rc = MPI_Comm_size(c, &size);
  for (int i = 0; i < 2; ++i) {
    MPI_Comm_set_errhandler(raised_on[i], saved[i]);
    MPI_Errhandler_free(&saved[i]);
  }
  DTRAIN_CHECK(rc == MPI_SUCCESS && size > 0, Errc::invalid_argument,
               "Fortran handle " << fortran_handle << " names no MPI communicator");
  // The set-up's in-place collectives are erroneous on an intercommunicator, and its
  // handler is still the program's (MPI's default aborts the job).
  int inter = 0;
  mpi_check(MPI_Comm_test_inter(c, &inter), "MPI_Comm_test_inter");
  DTRAIN_CHECK(!inter, Errc::invalid_argument,
               "user communicator is an intercommunicator; dtrain needs an intracommunicator "
               "(MPI_Intercomm_merge makes one)");
  return c;
}

void throw_mpi_error(int code, const char* what) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  int error_class = MPI_ERR_OTHER;
  if (MPI_Error_class(code, &error_class) != MPI_SUCCESS) error_class = MPI_ERR_OTHER;
  // Open MPI reports an allocation that failed inside a collective as an internal error
  // (seen with one rank's address space capped): say so, as the class alone does not.
  const char* hint = error_class == MPI_ERR_INTERN ? "; the MPI library reports a failed "
                                                     "allocation this way too: is this rank "
                                                     "out of memory?"
                                                   : "";
  std::ostringstream message;
  message << what << " failed: " << std::string(text, static_cast<std::size_t>(len))
          << " (MPI error " << code << hint << ")";
  if (error_class == MPI_ERR_NO_MEM) DTRAIN_FAIL(Errc::out_of_memory, message.str());
  DTRAIN_FAIL(Errc::comm, message.str());
}

MPI_Datatype mpi_datatype(DType type) {
  switch (type) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
  }
  DTRAIN_FAIL(Errc::invalid_argument, "unsupported dtype " << static_cast<int>(type));
}

namespace {
std::atomic<std::size_t> g_max_elements{static_cast<std::size_t>(INT_MAX)};
}  // namespace

std::size_t max_elements_per_call() noexcept {
  return g_max_elements.load(std::memory_order_relaxed);
}

void set_max_elements_per_call(std::size_t n) noexcept {
  if (n == 0 || n > static_cast<std::size_t>(INT_MAX)) n = static_cast<std::size_t>(INT_MAX);
  g_max_elements.store(n, std::memory_order_relaxed);
}

ContiguousType::ContiguousType(std::size_t count, MPI_Datatype base) {
  const std::size_t block = max_elements_per_call();
  const std::size_t blocks = count / block;
  const std::size_t rest = count % block;
  DTRAIN_CHECK(blocks <= static_cast<std::size_t>(INT_MAX), Errc::invalid_argument,
               "count " << count << " is too large for one MPI message");
  MPI_Datatype block_type = MPI_DATATYPE_NULL;
  mpi_check(MPI_Type_contiguous(static_cast<int>(block), base, &block_type), "MPI_Type_contiguous");
  if (rest == 0) {
    mpi_check(MPI_Type_contiguous(static_cast<int>(blocks), block_type, &type_),
              "MPI_Type_contiguous");
  } else {
    MPI_Aint lb = 0, extent = 0;
    mpi_check(MPI_Type_get_extent(base, &lb, &extent), "MPI_Type_get_extent");
    int lengths[2] = {static_cast<int>(blocks), static_cast<int>(rest)};
    MPI_Aint displs[2] = {0, static_cast<MPI_Aint>(blocks * block) * extent};
    MPI_Datatype types[2] = {block_type, base};
    mpi_check(MPI_Type_create_struct(2, lengths, displs, types, &type_), "MPI_Type_create_struct");
  }
  MPI_Type_free(&block_type);
  mpi_check(MPI_Type_commit(&type_), "MPI_Type_commit");
}

ContiguousType::~ContiguousType() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (type_ != MPI_DATATYPE_NULL && !finalized) MPI_Type_free(&type_);
}

ContiguousType::ContiguousType(ContiguousType&& other) noexcept : type_(other.type_) {
  other.type_ = MPI_DATATYPE_NULL;
}

namespace {
template <class T>
void divide_values(void* buf, std::size_t count, int divisor) {
  T* p = static_cast<T*>(buf);
  // By the int itself: a u8 of the divisor would wrap (256 ranks made it 0).
  for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / divisor);
}

template <float (*Load)(std::uint16_t), std::uint16_t (*Store)(float)>
void divide_half(void* buf, std::size_t count, int divisor) {
  auto* p = static_cast<std::uint16_t*>(buf);
  const float d = static_cast<float>(divisor);
  for (std::size_t i = 0; i < count; ++i) p[i] = Store(Load(p[i]) / d);
}
}  // namespace

void divide_in_place(void* buf, std::size_t count, DType type, int divisor) {
  if (divisor == 1 || count == 0) return;
  switch (type) {
    case DType::f32: return divide_values<float>(buf, count, divisor);
    case DType::f64: return divide_values<double>(buf, count, divisor);
    case DType::i32: return divide_values<std::int32_t>(buf, count, divisor);
    case DType::i64: return divide_values<std::int64_t>(buf, count, divisor);
    case DType::u8: return divide_values<std::uint8_t>(buf, count, divisor);
    case DType::bf16: return divide_half<bf16_bits_to_f32, f32_to_bf16_bits>(buf, count, divisor);
    case DType::f16: return divide_half<f16_bits_to_f32, f32_to_f16_bits>(buf, count, divisor);
  }
}

}  // namespace dtrain::comm
