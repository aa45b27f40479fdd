#include "ckpt/h5.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain::ckpt::h5 {
namespace {

// The innermost (most specific) description on HDF5's error stack: an upward walk starts
// there ("incorrect metadata checksum after all read attempts", "truncated file: eof = ...",
// the system's "Is a directory"), a downward one at the API's "unable to open file".
herr_t keep_innermost(unsigned n, const H5E_error2_t* err, void* out) {
  if (n == 0 && err->desc) *static_cast<std::string*>(out) = err->desc;
  return 0;
}

std::string hdf5_message() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg.empty() ? "HDF5 error" : msg;
}

Handle make(hid_t id, Handle::Closer closer, const std::string& what) {
  return Handle(check(id, what), closer);
}

Handle scalar_space() { return space_handle(H5Screate(H5S_SCALAR), "H5Screate"); }

template <class T>
void write_scalar(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const T& v) {
  Handle space = scalar_space();
  Handle attr = attr_handle(H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT),
                            std::string("cannot create attribute ") + name);
  check_status(H5Awrite(attr, mem_type, &v), std::string("cannot write attribute ") + name);
}

// The attribute `name`, which must hold one value: H5Aread writes every element of an array
// into the one value's memory (a file edited by another tool may hold one).
Handle open_single(hid_t obj, const char* name, const std::string& where) {
  DTRAIN_CHECK(has_attr(obj, name, where), Errc::corrupt_data, where << " has no attribute '" << name << "'");
  Handle attr = attr_handle(H5Aopen(obj, name, H5P_DEFAULT), std::string("cannot open attribute ") + name);
  Handle space = space_handle(H5Aget_space(attr), "H5Aget_space");
  DTRAIN_CHECK(H5Sget_simple_extent_npoints(space) == 1, Errc::corrupt_data,
               where << ": attribute '" << name << "' holds " << H5Sget_simple_extent_npoints(space)
                     << " values, not one");
  return attr;
}

// An attribute of class `kind` (an integer is not read from a float, which HDF5 would
// truncate).
template <class T>
T read_scalar(hid_t obj, const char* name, hid_t mem_type, H5T_class_t kind, const std::string& where) {
  Handle attr = open_single(obj, name, where);
  Handle type = type_handle(H5Aget_type(attr), "H5Aget_type");
  DTRAIN_CHECK(H5Tget_class(type) == kind, Errc::corrupt_data,
               where << ": attribute '" << name << "' is not " << (kind == H5T_INTEGER ? "an integer" : "a number"));
  if constexpr (std::is_integral<T>::value) {
    // HDF5 clamps an integer out of T's range without an error (-7 read as unsigned is 0):
    // read in the stored sign's 64-bit type, then the value must fit T (a uint64 3 is a
    // fine step, a -7 no sample count).
    const bool stored_signed = H5Tget_sign(type) == H5T_SGN_2;
    DTRAIN_CHECK(H5Tget_size(type) <= 8, Errc::corrupt_data,
                 where << ": attribute '" << name << "' is a " << 8 * H5Tget_size(type) << "-bit integer");
    std::int64_t as_signed = 0;
    std::uint64_t as_unsigned = 0;
    check_status(stored_signed ? H5Aread(attr, H5T_NATIVE_INT64, &as_signed) : H5Aread(attr, H5T_NATIVE_UINT64, &as_unsigned),
                 where + ": cannot read attribute " + name);
    const bool fits = std::is_signed<T>::value ? stored_signed || as_unsigned <= static_cast<std::uint64_t>(INT64_MAX)
                                               : !stored_signed || as_signed >= 0;
    DTRAIN_CHECK(fits, Errc::corrupt_data,
                 where << ": attribute '" << name << "' is "
                       << (stored_signed ? std::to_string(as_signed) : std::to_string(as_unsigned)) << ", outside "
                       << (std::is_signed<T>::value ? "int64" : "uint64"));
    return stored_signed ? static_cast<T>(as_signed) : static_cast<T>(as_unsigned);
  } else {
    T v{};
    check_status(H5Aread(attr, mem_type, &v), where + ": cannot read attribute " + name);
    return v;
  }
}

}  // namespace

herr_t Handle::close() noexcept {
  herr_t rc = 0;
  if (id_ >= 0 && close_) rc = close_(id_);
  id_ = H5I_INVALID_HID;
  return rc;
}

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}
QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

hid_t check(hid_t id, const std::string& what) {
  if (id < 0) DTRAIN_FAIL(Errc::io, what << ": " << hdf5_message());
  return id;
}
void check_status(herr_t status, const std::string& what) {
  if (status < 0) DTRAIN_FAIL(Errc::io, what << ": " << hdf5_message());
}

Handle file_handle(hid_t id, const std::string& what) { return make(id, H5Fclose, what); }
Handle dataset_handle(hid_t id, const std::string& what) { return make(id, H5Dclose, what); }
Handle group_handle(hid_t id, const std::string& what) { return make(id, H5Gclose, what); }
Handle space_handle(hid_t id, const std::string& what) { return make(id, H5Sclose, what); }
Handle plist_handle(hid_t id, const std::string& what) { return make(id, H5Pclose, what); }
Handle attr_handle(hid_t id, const std::string& what) { return make(id, H5Aclose, what); }
Handle type_handle(hid_t id, const std::string& what) { return make(id, H5Tclose, what); }

void write_attr(hid_t obj, const char* name, const std::string& value) {
  // Fixed-length, NUL-terminated ASCII: h5py reads it as bytes, h5dump as a string.
  Handle type = type_handle(H5Tcopy(H5T_C_S1), "H5Tcopy");
  check_status(H5Tset_size(type, value.size() + 1), "H5Tset_size");
  check_status(H5Tset_strpad(type, H5T_STR_NULLTERM), "H5Tset_strpad");
  Handle space = scalar_space();
  Handle attr = attr_handle(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT),
                            std::string("cannot create attribute ") + name);
  check_status(H5Awrite(attr, type, value.c_str()), std::string("cannot write attribute ") + name);
}
void write_attr(hid_t obj, const char* name, std::int64_t value) {
  write_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, value);
}
void write_attr(hid_t obj, const char* name, std::uint64_t value) {
  write_scalar(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, value);
}
void write_attr(hid_t obj, const char* name, double value) {
  write_scalar(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, value);
}

bool has_attr(hid_t obj, const char* name, const std::string& where) {
  const htri_t found = H5Aexists(obj, name);
  // Not "absent": the object's header could not be read (a damaged file).
  if (found < 0) fail_damaged(where + ": cannot look for attribute '" + name + "'");
  return found > 0;
}

void fail_damaged(const std::string& what) {
  DTRAIN_FAIL(Errc::corrupt_data, what << " (a damaged file?): " << hdf5_message());
}

void check_stored_in_file(hid_t dataset, const std::string& what) {
  Handle dcpl = plist_handle(H5Dget_create_plist(dataset), what + ": H5Dget_create_plist");
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  DTRAIN_CHECK(layout != H5D_VIRTUAL, Errc::corrupt_data,
               what << " is a virtual dataset (its values are in other files); a checkpoint holds its data itself");
  const int external = H5Pget_external_count(dcpl);
  DTRAIN_CHECK(external == 0, Errc::corrupt_data,
               what << " keeps its values in " << external << " external file(s); a checkpoint holds its data itself");
  // Every value written: contiguous storage allocated, or every chunk of the chunk grid (the
  // space status of a compressed dataset reads "partly allocated" when its chunks are all there).
  if (layout == H5D_CONTIGUOUS) {
    H5D_space_status_t status;
    if (H5Dget_space_status(dataset, &status) < 0) fail_damaged(what + ": cannot tell whether its values were written");
    DTRAIN_CHECK(status == H5D_SPACE_STATUS_ALLOCATED, Errc::corrupt_data,
                 what << " holds fewer values than its shape (its values were never written)");
  } else if (layout == H5D_CHUNKED) {
    Handle space = space_handle(H5Dget_space(dataset), what + ": H5Dget_space");
    const int rank = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0))), chunk(dims.size());
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    hsize_t grid = 1, allocated = 0;
    if (H5Pget_chunk(dcpl, rank, chunk.data()) != rank || H5Dget_num_chunks(dataset, space, &allocated) < 0)
      fail_damaged(what + ": cannot read its chunks");
    for (std::size_t i = 0; i < dims.size(); ++i) grid *= chunk[i] > 0 ? (dims[i] + chunk[i] - 1) / chunk[i] : 0;
    DTRAIN_CHECK(allocated == grid, Errc::corrupt_data,
                 what << " holds fewer values than its shape (" << grid - allocated << " of its " << grid
                      << " chunks were never written)");
  }
}

std::string type_name(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t bits = 8 * H5Tget_size(type);
  if (cls == H5T_FLOAT) return "float" + std::to_string(bits);
  if (cls == H5T_INTEGER) return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
  if (cls == H5T_STRING) return "string";
  return "other";
}

std::string read_attr_string(hid_t obj, const char* name, const std::string& where) {
  Handle attr = open_single(obj, name, where);
  Handle type = type_handle(H5Aget_type(attr), "H5Aget_type");
  DTRAIN_CHECK(H5Tget_class(type) == H5T_STRING && !H5Tis_variable_str(type), Errc::corrupt_data,
               where << ": attribute '" << name << "' is not a fixed-length string");
  std::vector<char> buf(H5Tget_size(type) + 1, '\0');
  check_status(H5Aread(attr, type, buf.data()), where + ": cannot read attribute " + name);
  return std::string(buf.data());
}
std::int64_t read_attr_i64(hid_t obj, const char* name, const std::string& where) {
  return read_scalar<std::int64_t>(obj, name, H5T_NATIVE_INT64, H5T_INTEGER, where);
}
std::uint64_t read_attr_u64(hid_t obj, const char* name, const std::string& where) {
  return read_scalar<std::uint64_t>(obj, name, H5T_NATIVE_UINT64, H5T_INTEGER, where);
}
double read_attr_f64(hid_t obj, const char* name, const std::string& where) {
  return read_scalar<double>(obj, name, H5T_NATIVE_DOUBLE, H5T_FLOAT, where);
}

}  // namespace dtrain::ckpt::h5
