// CheckpointFile: a serial, model-independent view of one checkpoint (for tools).
#include "dtrain/ckpt/file.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <new>

#include "ckpt/h5.hpp"
#include "ckpt/header.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::ckpt {
namespace {

struct Listing {
  std::vector<std::string> datasets;
  std::vector<std::string> links;  // soft and external: not part of a checkpoint
};

// H5Lvisit callback: the names of every dataset under the root, and of any link that is not
// a plain (hard) one. Callbacks run inside HDF5's C code, so they never throw; the datasets
// are described afterwards.
herr_t collect_dataset(hid_t root, const char* name, const H5L_info_t* info, void* out) {
  Listing& listing = *static_cast<Listing*>(out);
  if (info->type != H5L_TYPE_HARD) {
    listing.links.push_back(std::string("/") + name);
    return 0;
  }
  const hid_t obj = H5Oopen(root, name, H5P_DEFAULT);
  if (obj < 0) return -1;
  if (H5Iget_type(obj) == H5I_DATASET) listing.datasets.push_back(std::string("/") + name);
  H5Oclose(obj);
  return 0;
}

DatasetInfo describe(hid_t file, const std::string& path) {
  DatasetInfo info;
  info.path = path;
  h5::Handle d = h5::dataset_handle(H5Dopen2(file, path.c_str(), H5P_DEFAULT), "cannot open " + path);
  h5::Handle space = h5::space_handle(H5Dget_space(d), path);
  info.shape.resize(static_cast<std::size_t>(std::max(0, H5Sget_simple_extent_ndims(space))));
  H5Sget_simple_extent_dims(space, reinterpret_cast<hsize_t*>(info.shape.data()), nullptr);
  h5::Handle type = h5::type_handle(H5Dget_type(d), path);
  info.dtype = h5::type_name(type);
  if (!h5::has_attr(d, "checksum", path)) {
    info.checksum_problem = "dataset " + path + " has no checksum attribute";
  } else {
    try {  // another type or range is the file's damage to report, not a file that cannot be read
      info.checksum = h5::read_attr_u64(d, "checksum", "dataset " + path);
      info.has_checksum = true;
    } catch (const Error& e) {
      if (e.code() != Errc::corrupt_data) throw;
      info.checksum_problem = e.what();
    }
  }
  const haddr_t offset = H5Dget_offset(d);
  if (offset != HADDR_UNDEF) info.file_offset = offset;
  H5Eclear2(H5E_DEFAULT);  // H5Dget_offset fails quietly for non-contiguous layouts
  return info;
}

std::string attr_text(hid_t attr) {
  h5::Handle type = h5::type_handle(H5Aget_type(attr), "H5Aget_type");
  h5::Handle space = h5::space_handle(H5Aget_space(attr), "H5Aget_space");
  if (H5Sget_simple_extent_npoints(space) != 1) return "(array)";
  switch (H5Tget_class(type)) {
    case H5T_STRING: {
      if (H5Tis_variable_str(type) > 0) {  // not what dtrain writes, but shown as it is
        h5::Handle text = h5::type_handle(H5Tcopy(H5T_C_S1), "H5Tcopy");
        h5::check_status(H5Tset_size(text, H5T_VARIABLE), "H5Tset_size");
        h5::check_status(H5Tset_cset(text, H5Tget_cset(type)), "H5Tset_cset");
        char* value = nullptr;
        h5::check_status(H5Aread(attr, text, &value), "H5Aread");
        const std::string copy = value ? value : "";
        H5free_memory(value);
        return copy;
      }
      std::vector<char> buf(H5Tget_size(type) + 1, '\0');
      h5::check_status(H5Aread(attr, type, buf.data()), "H5Aread");
      return buf.data();
    }
    case H5T_INTEGER: {
      if (H5Tget_sign(type) == H5T_SGN_NONE) {
        std::uint64_t v = 0;
        h5::check_status(H5Aread(attr, H5T_NATIVE_UINT64, &v), "H5Aread");
        return std::to_string(v);
      }
      std::int64_t v = 0;
      h5::check_status(H5Aread(attr, H5T_NATIVE_INT64, &v), "H5Aread");
      return std::to_string(v);
    }
    case H5T_FLOAT: {
      double v = 0;
      h5::check_status(H5Aread(attr, H5T_NATIVE_DOUBLE, &v), "H5Aread");
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", v);
      return buf;
    }
    default:
      return "(unsupported type)";
  }
}

herr_t collect_attr_name(hid_t, const char* name, const H5A_info_t*, void* names) {
  static_cast<std::vector<std::string>*>(names)->push_back(name);
  return 0;
}

}  // namespace

struct CheckpointFile::Impl {
  std::string path;
  h5::Handle file;
  std::vector<DatasetInfo> datasets;
};

CheckpointFile::CheckpointFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  h5::QuietErrors quiet;
  impl_->path = path;
  DTRAIN_CHECK(std::filesystem::is_regular_file(path), Errc::io,
               (std::filesystem::exists(path) ? "not a checkpoint file (a directory, FIFO or device): '"
                                              : "no checkpoint file '")
                   << path << "'");
  impl_->file = h5::file_handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT),
                                "cannot open '" + path + "' (not an HDF5 file, or truncated)");
  Listing listing;
  // The file opened, so a failure to walk it is damage to its metadata. Native order, sorted
  // below: increasing order makes HDF5 (1.10) build a table of a large group's links, and
  // damage met while building it frees the table's unset entries (a crash, not an error).
  if (H5Lvisit(impl_->file, H5_INDEX_NAME, H5_ITER_NATIVE, collect_dataset, &listing) < 0)
    h5::fail_damaged("cannot list the datasets of '" + path + "'");
  std::sort(listing.links.begin(), listing.links.end());
  DTRAIN_CHECK(listing.links.empty(), Errc::corrupt_data,
               "'" << path << "': " << listing.links.front()
                   << " is a soft or external link; a checkpoint holds its datasets itself");
  std::vector<std::string>& names = listing.datasets;
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) impl_->datasets.push_back(describe(impl_->file, name));
}

CheckpointFile::~CheckpointFile() = default;

const std::string& CheckpointFile::path() const { return impl_->path; }

const std::vector<DatasetInfo>& CheckpointFile::datasets() const { return impl_->datasets; }

const DatasetInfo* CheckpointFile::find(const std::string& dataset) const {
  for (const DatasetInfo& d : impl_->datasets)
    if (d.path == dataset) return &d;
  return nullptr;
}

CheckpointInfo CheckpointFile::header() const {
  h5::QuietErrors quiet;
  const std::string where = "checkpoint '" + impl_->path + "'";
  const Header h = read_header(impl_->file, where);
  read_model_attributes(impl_->file, where);
  return h.info;
}

void CheckpointFile::check_format() const {
  h5::QuietErrors quiet;
  ckpt::check_format(impl_->file, "checkpoint '" + impl_->path + "'");
}

bool CheckpointFile::has_object(const std::string& object) const {
  if (object == "/") return true;
  h5::QuietErrors quiet;
  // Each level must exist for H5Lexists to answer for the next.
  for (std::size_t pos = object.find('/', 1);; pos = object.find('/', pos + 1)) {
    if (H5Lexists(impl_->file, object.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

namespace {
// Each attribute of `object` by name, sorted, with describe(attribute).
AttributeList each_attribute(hid_t file, const std::string& path, const std::string& object,
                             std::string (*describe)(hid_t)) {
  h5::QuietErrors quiet;
  const hid_t id = H5Oopen(file, object.c_str(), H5P_DEFAULT);
  h5::check(id, "'" + path + "' has no object " + object);
  h5::Handle obj(id, H5Oclose);
  std::vector<std::string> names;
  hsize_t idx = 0;
  // Native order, sorted here, for the reason the constructor's listing gives.
  h5::check_status(H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, collect_attr_name, &names),
                   "cannot list the attributes of " + object);
  std::sort(names.begin(), names.end());
  AttributeList out;
  for (const std::string& name : names) {
    h5::Handle attr = h5::attr_handle(H5Aopen(obj, name.c_str(), H5P_DEFAULT), object + ": " + name);
    out.emplace_back(name, describe(attr));
  }
  return out;
}

std::string attr_type(hid_t attr) {
  h5::Handle type = h5::type_handle(H5Aget_type(attr), "H5Aget_type");
  h5::Handle space = h5::space_handle(H5Aget_space(attr), "H5Aget_space");
  const std::string name = (H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0 ? "vlen " : "") +
                           h5::type_name(type);
  return H5Sget_simple_extent_npoints(space) != 1 ? "(array) " + name : name;
}
}  // namespace

AttributeList CheckpointFile::attributes(const std::string& object) const {
  return each_attribute(impl_->file, impl_->path, object, attr_text);
}

AttributeList CheckpointFile::attribute_types(const std::string& object) const {
  return each_attribute(impl_->file, impl_->path, object, attr_type);
}

std::vector<float> CheckpointFile::read(const std::string& dataset) const {
  h5::QuietErrors quiet;
  const DatasetInfo* info = find(dataset);
  DTRAIN_CHECK(info, Errc::invalid_argument, "'" << impl_->path << "' has no dataset " << dataset);
  DTRAIN_CHECK(info->dtype == "float32", Errc::invalid_argument,
               "dataset " << dataset << " is " << info->dtype << ", not float32");
  h5::Handle d = h5::dataset_handle(H5Dopen2(impl_->file, dataset.c_str(), H5P_DEFAULT),
                                    "cannot open dataset " + dataset);
  h5::check_stored_in_file(d, "'" + impl_->path + "': dataset " + dataset);
  // A made-up shape must neither wrap to a small buffer H5Dread overruns nor ask for more
  // memory than the file holds data. Only contiguous data (what dtrain writes) has a known
  // size: a file repacked with compression (h5repack) stores chunks of any size.
  std::size_t n = 1;
  bool wraps = false;
  for (std::uint64_t dim : info->shape) wraps = wraps || __builtin_mul_overflow(n, dim, &n);
  h5::Handle dcpl = h5::plist_handle(H5Dget_create_plist(d), "H5Dget_create_plist");
  const bool contiguous = H5Pget_layout(dcpl) == H5D_CONTIGUOUS;
  DTRAIN_CHECK(!wraps && (!contiguous || n <= H5Dget_storage_size(d) / sizeof(float)), Errc::corrupt_data,
               "'" << impl_->path << "': dataset " << dataset << " holds fewer values than its shape");
  std::vector<float> out;
  try {
    out.resize(n);
  } catch (const std::bad_alloc&) {
    DTRAIN_FAIL(Errc::out_of_memory, "'" << impl_->path << "': dataset " << dataset << " has " << n
                                         << " values, more than this process can hold in memory");
  }
  h5::check_status(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
                   "'" + impl_->path + "': cannot read dataset " + dataset);
  return out;
}

void stop_hdf5_error_printing() noexcept { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

}  // namespace dtrain::ckpt
