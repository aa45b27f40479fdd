#pragma once
// Thin helpers over the HDF5 C API: owning handles, errors turned into dtrain::Error with
// HDF5's own description, and typed scalar attributes. Only lib/ckpt includes hdf5.h.
#include <hdf5.h>

#include <cstdint>
#include <string>

namespace dtrain::ckpt::h5 {

// An HDF5 identifier closed with the matching H5?close when it goes out of scope.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const noexcept { return id_; }
  operator hid_t() const noexcept { return id_; }
  // Closes now and reports failure (a file's close is where buffered data is written).
  herr_t close() noexcept;
  void reset() noexcept { close(); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// Silences HDF5's automatic error printing while alive (errors are reported by Error).
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Throws Error(Errc::io) "<what>: <HDF5's innermost message>" when id/status is negative.
hid_t check(hid_t id, const std::string& what);
void check_status(herr_t status, const std::string& what);

Handle file_handle(hid_t id, const std::string& what);
Handle dataset_handle(hid_t id, const std::string& what);
Handle group_handle(hid_t id, const std::string& what);
Handle space_handle(hid_t id, const std::string& what);
Handle plist_handle(hid_t id, const std::string& what);
Handle attr_handle(hid_t id, const std::string& what);
Handle type_handle(hid_t id, const std::string& what);

void write_attr(hid_t obj, const char* name, const std::string& value);
void write_attr(hid_t obj, const char* name, std::int64_t value);
void write_attr(hid_t obj, const char* name, std::uint64_t value);
void write_attr(hid_t obj, const char* name, double value);
// Errc::corrupt_data: `what` (a damaged file?) and HDF5's innermost message, for a call that
// failed on metadata HDF5 could not read.
[[noreturn]] void fail_damaged(const std::string& what);
// Errc::corrupt_data naming `what` unless the dataset's values are stored in this file: not
// in external raw files, nor a virtual dataset's view of other files (a checkpoint holds its
// data itself, as it holds its datasets: no soft or external links either), and all of them
// written (a dataset created without its data, or a chunk of it never written, reads as
// fill values, and the collective read of one hung some layouts).
void check_stored_in_file(hid_t dataset, const std::string& what);
// A dataset's or attribute's type as h5py names it: "float32", "int64", "uint8", "string".
std::string type_name(hid_t type);
// Whether obj has the attribute; Errc::corrupt_data (after `where`) when HDF5 cannot tell.
bool has_attr(hid_t obj, const char* name, const std::string& where);
// Read with conversion to the requested type; a missing attribute throws Errc::corrupt_data.
std::string read_attr_string(hid_t obj, const char* name, const std::string& where);
std::int64_t read_attr_i64(hid_t obj, const char* name, const std::string& where);
std::uint64_t read_attr_u64(hid_t obj, const char* name, const std::string& where);
double read_attr_f64(hid_t obj, const char* name, const std::string& where);

}  // namespace dtrain::ckpt::h5
