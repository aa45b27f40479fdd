#pragma once
// Read-only, single-process access to one checkpoint file, without a model or a process
// grid: what tools (dtrain-ckpt) need to list, verify, compare and convert checkpoints.
// Uses HDF5's serial file driver, so it needs no MPI job (and does not touch MPI).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/ckpt/format.hpp"
#include "dtrain/export.hpp"

namespace dtrain::ckpt {

struct DTRAIN_API DatasetInfo {
  std::string path;                   // e.g. "/model/wte", "/optimizer/wte/exp_avg"
  std::vector<std::uint64_t> shape;   // logical shape
  std::string dtype;                  // "float32", "float64", "int32", ... ("other" if unknown)
  bool has_checksum = false;         // a `checksum` attribute that reads as a uint64
  std::uint64_t checksum = 0;         // its value
  // Where has_checksum is false, why, naming the dataset ("dataset /model/wte has no checksum
  // attribute", or what is wrong with the one it has).
  std::string checksum_problem;
  // Byte offset of the (contiguous) data in the file; kNoOffset when it has none yet.
  static constexpr std::uint64_t kNoOffset = ~std::uint64_t{0};
  std::uint64_t file_offset = kNoOffset;
};

// (attribute name, value as text); strings verbatim, numbers in decimal.
using AttributeList = std::vector<std::pair<std::string, std::string>>;

class DTRAIN_API CheckpointFile {
 public:
  // Opens path read-only; Errc::io when it is missing or not an HDF5 file.
  explicit CheckpointFile(const std::string& path);
  ~CheckpointFile();
  CheckpointFile(const CheckpointFile&) = delete;
  CheckpointFile& operator=(const CheckpointFile&) = delete;

  const std::string& path() const;
  // Every dataset in the file, sorted by path.
  const std::vector<DatasetInfo>& datasets() const;
  // nullptr when the file has no dataset at that path.
  const DatasetInfo* find(const std::string& dataset) const;
  // The attributes of a group or dataset ("/", "/model", "/optimizer", a dataset path).
  AttributeList attributes(const std::string& object) const;
  // Their HDF5 types, as h5py names them ("int64", "float64", "string", "vlen string"; an
  // array's "(array) <type>"), in the same order: what a resume reads depends on them.
  AttributeList attribute_types(const std::string& object) const;
  // The root's and /optimizer's attributes read and checked as a resume reads them (format,
  // version, checksum algorithm, step counters, loss scale), and /model's six integers;
  // Errc::corrupt_data naming the first one missing, of another HDF5 type or out of range.
  CheckpointInfo header() const;
  // header()'s first checks alone: the format, its version and the checksum algorithm.
  void check_format() const;
  // Whether the file has a group or dataset at that path (an absolute one, "/" included).
  bool has_object(const std::string& object) const;
  // A float32 dataset, whole and row-major; Errc::invalid_argument for another dtype.
  std::vector<float> read(const std::string& dataset) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// For programs that use HDF5 only through dtrain, whose calls report every HDF5 failure in
// their errors: turns HDF5's own printing of its error stack off for the process. That also
// silences the "HDF5: infinite loop closing library" report at exit that HDF5 1.10 prints
// after a failed read of a damaged file's metadata (state it does not free). Programs that
// call HDF5 themselves keep its default.
DTRAIN_API void stop_hdf5_error_printing() noexcept;

}  // namespace dtrain::ckpt
