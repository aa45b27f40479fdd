// Checkpointer's load: the model checked against the file's, every rank's pieces read
// collectively, and every dataset's checksum verified before the model changes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "ckpt/checkpointer_impl.hpp"
#include "ckpt/header.hpp"
#include "ckpt/mpi_io_path.hpp"
#include "ckpt/same_file.hpp"
#include "comm/comm_state.hpp"
#include "comm/watchdog.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::ckpt {
namespace {

std::string model_text(long layers, long heads, long d_model, long seq_len, long vocab, long tie) {
  if (layers == 0 && heads == 0 && d_model == 0 && seq_len == 0 && vocab == 0)
    return "a model that is not a built-in GPT (a byom or an MLP)";  // their /model attributes
  std::ostringstream os;
  os << "layers=" << layers << " heads=" << heads << " d-model=" << d_model << " seq-len=" << seq_len
     << " vocab=" << vocab << " tie-embeddings=" << (tie ? "true" : "false");
  return os.str();
}

// The dataset at `path`, which the caller found: Errc::corrupt_data when HDF5 cannot open it.
// A dataset of this file: a soft or external link on the way (to another checkpoint's
// tensor, whose checksum it carries along) is refused.
h5::Handle open_dataset(hid_t file, const std::string& path, const std::string& where) {
  for (std::size_t pos = path.find('/', 1);; pos = path.find('/', pos + 1)) {
    const std::string prefix = path.substr(0, pos);
    H5L_info_t link;
    if (H5Lget_info(file, prefix.c_str(), &link, H5P_DEFAULT) < 0)
      h5::fail_damaged(where + ": cannot look up " + prefix);
    DTRAIN_CHECK(link.type == H5L_TYPE_HARD, Errc::corrupt_data,
                 where << ": " << prefix << " is a soft or external link; a checkpoint holds its "
                       << "datasets itself");
    if (pos == std::string::npos) break;
  }
  const hid_t id = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (id < 0) h5::fail_damaged(where + ": cannot open dataset " + path);
  h5::Handle d(id, H5Dclose);
  h5::check_stored_in_file(d, where + ": dataset " + path);
  // As dtrain-ckpt verify: HDF5 would convert another type silently (a float64 copy loads).
  h5::Handle type = h5::type_handle(H5Dget_type(d), where + ": dataset " + path);
  DTRAIN_CHECK(h5::type_name(type) == "float32", Errc::corrupt_data,
               where << ": dataset " << path << " is " << h5::type_name(type) << ", not float32");
  return d;
}

}  // namespace

std::string shape_text(const std::vector<std::uint64_t>& dims) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

void Checkpointer::Impl::check_model(hid_t file, const std::string& path) {
  const ModelAttributes m = read_model_attributes(file, "checkpoint '" + path + "'");
  const std::string theirs = model_text(m.layers, m.heads, m.d_model, m.seq_len, m.vocab, m.tie_embeddings);
  const std::string ours = model_text(model.layers, model.heads, model.d_model, model.seq_len,
                                      model.vocab, model.tie_embeddings ? 1 : 0);
  if (theirs == ours) return;
  // Name the first dataset whose shape differs, if one does.
  for (const TensorEntry& e : directory) {
    const std::string name = dataset_path(e, kParam);
    std::vector<std::uint64_t> want(e.shape.begin(), e.shape.end());
    if (!link_exists(file, name, "checkpoint '" + path + "'")) {
      DTRAIN_FAIL(Errc::invalid_config, "checkpoint '" << path << "' has no dataset " << name
                  << ": it was written for " << theirs << ", this run has " << ours);
    }
    h5::Handle d = open_dataset(file, name, "checkpoint '" + path + "'");
    h5::Handle s = h5::space_handle(H5Dget_space(d), name);
    std::vector<std::uint64_t> dims(static_cast<std::size_t>(std::max(0, H5Sget_simple_extent_ndims(s))));
    H5Sget_simple_extent_dims(s, reinterpret_cast<hsize_t*>(dims.data()), nullptr);
    if (dims != want) {
      DTRAIN_FAIL(Errc::invalid_config, "checkpoint '" << path << "': dataset " << name << " has shape "
                  << shape_text(dims) << " but this model expects " << shape_text(want)
                  << " (written for " << theirs << ", this run has " << ours << ")");
    }
  }
  DTRAIN_FAIL(Errc::invalid_config, "checkpoint '" << path << "' was written for " << theirs
              << ", this run has " << ours);
}
CheckpointInfo Checkpointer::Impl::read_file(const std::string& path) {
  comm::WatchScope watch("checkpoint read", grid.world().state()->label);  // as write_file's
  std::optional<HostStaging> stage;  // a corrupt file changes nothing
  FileFingerprint seen;
  agreed([&] {
    check_param_source();
    DTRAIN_CHECK(std::filesystem::is_regular_file(path), Errc::io, "no checkpoint file '" << path << "'");
    check_mpi_io_path(path, grid.world().size());
    seen = file_fingerprint(path);
    stage.emplace(*this, /*active=*/true);
  });
  require_same_file(grid.world(), path, seen);
  h5::Handle fapl = file_access();
  h5::Handle file = h5::file_handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl),
                                    "cannot open checkpoint '" + path + "' (not an HDF5 file, or truncated)");
  const std::string where = "checkpoint '" + path + "'";
  const Header header = read_header(file, where);
  check_model(file, path);

  h5::Handle dxpl = h5::plist_handle(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate");
  h5::check_status(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio");
  std::vector<std::uint64_t> sums, stored;
  std::vector<std::string> names;
  // Per dataset, the elements this rank read and their sum: over the world, the ranks read
  // whole copies (replicas over dp, a tied copy on the last stage), each in pieces or not.
  std::vector<std::uint64_t> numels, read_counts, read_sums;
  for (std::size_t t = 0; t < plans.size(); ++t) {
    const TensorPlan& plan = plans[t];
    const TensorEntry& e = *plan.entry;
    const std::vector<std::uint64_t> want(e.shape.begin(), e.shape.end());
    std::size_t numel = 1;
    for (auto n : e.shape) numel *= static_cast<std::size_t>(n);
    for (int kind : {kParam, kExpAvg, kExpAvgSq}) {
      const std::string name = dataset_path(e, kind);
      // Agreed per dataset, as the writes: a read that fails on one rank stops every rank
      // here, instead of leaving the others in the next collective read.
      h5::Handle d;  // (outlives the agreement, as in write_file)
      agreed([&] {
        DTRAIN_CHECK(link_exists(file, name, where), Errc::corrupt_data, where << " has no dataset " << name);
        d = open_dataset(file, name, where);
        h5::Handle s = h5::space_handle(H5Dget_space(d), name);
        std::vector<std::uint64_t> dims(static_cast<std::size_t>(std::max(0, H5Sget_simple_extent_ndims(s))));
        H5Sget_simple_extent_dims(s, reinterpret_cast<hsize_t*>(dims.data()), nullptr);
        DTRAIN_CHECK(dims == want, Errc::corrupt_data, where << ": dataset " << name << " has shape "
                     << shape_text(dims) << ", expected " << shape_text(want));
        const std::uint64_t checksum = h5::read_attr_u64(d, "checksum", where + " dataset " + name);
        const bool is_param = kind == kParam;
        const std::vector<Piece>& read = is_param ? plan.param_read : plan.state_read;
        transfer(false, d, dxpl, plan.param, memory(kind), read, calls[4 * t + (is_param ? 0 : 2)],
                 where + ": dataset " + name);
        if (grid.world().rank() == flip_read_rank && !read.empty() && read.front().count > 0 &&
            (flip_read_dataset.empty() || flip_read_dataset == name)) {
          std::uint32_t bits;
          float* value = memory(kind) + read.front().mem;
          std::memcpy(&bits, value, sizeof bits);
          bits ^= 1u << 20;
          std::memcpy(value, &bits, sizeof bits);
        }
        const std::uint64_t share = checksum_of(plan.param, memory(kind), is_param ? plan.param_write : plan.state_write);
        // The shares add up to one check of every element over the ranks; a rank that read
        // a whole copy (a replica over dp or tp, a tied copy) checks that copy itself too.
        std::size_t read_count = 0;
        for (const Piece& piece : read) read_count += piece.count;
        const std::uint64_t mine = read_count > 0 ? checksum_of(plan.param, memory(kind), read) : 0;
        if (read_count == numel) {
          DTRAIN_CHECK(mine == checksum, Errc::corrupt_data,
                       where << ": dataset " << name << " fails its checksum as world rank " << grid.world().rank()
                             << " read it (stored " << checksum << ", computed " << mine
                             << "): the file is corrupt, or this rank reads another copy of it");
        }
        // No NaN: training never makes one it keeps (it stops first), so one here was edited
        // in, or damage that the checksum (over the bits) was made to match. (An infinity can
        // be a byom's own value, a mask, say.)
        // AdamW's second moments are means of squares: a negative one (-inf included) made
        // the next update NaN, reported as the training's divergence.
        for (const Piece& piece : read) {
          const float* v = memory(kind) + piece.mem;
          DTRAIN_CHECK(std::none_of(v, v + piece.count, [](float x) { return std::isnan(x); }), Errc::corrupt_data,
                       where << ": dataset " << name << " holds nan: a checkpoint to resume holds none (the file "
                             << "was edited or is damaged, or its model held a NaN when it was saved)");
          DTRAIN_CHECK(kind != kExpAvgSq || std::none_of(v, v + piece.count, [](float x) { return x < 0; }),
                       Errc::corrupt_data,
                       where << ": dataset " << name << " holds a negative second moment, which AdamW never makes "
                             << "(the file was edited or is damaged)");
        }
        stored.push_back(checksum);
        sums.push_back(share);
        names.push_back(name);
        numels.push_back(numel);
        read_counts.push_back(read_count);
        read_sums.push_back(mine);
      });
      watch.progress();
    }
  }
  // One all-reduce: the write shares, which add up to one check of every element, and every
  // rank's reads, which add up to k whole copies: k times the checksum (mod 2^64) when each
  // rank read the file's bytes (a rank with its own damaged copy of the file fails it).
  const std::size_t n = sums.size();
  sums.insert(sums.end(), read_counts.begin(), read_counts.end());
  sums.insert(sums.end(), read_sums.begin(), read_sums.end());
  grid.world().all_reduce(sums.data(), sums.data(), sums.size(), DType::i64, ReduceOp::sum);
  for (std::size_t i = 0; i < n; ++i) {
    DTRAIN_CHECK(sums[i] == stored[i], Errc::corrupt_data,
                 where << ": dataset " << names[i] << " fails its checksum (stored " << stored[i]
                       << ", computed " << sums[i] << "): the file is corrupt");
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t copies = sums[n + i] / numels[i];
    DTRAIN_CHECK(sums[n + i] % numels[i] != 0 || sums[2 * n + i] == copies * stored[i], Errc::corrupt_data,
                 where << ": dataset " << names[i] << " fails its checksum over the " << copies
                       << " copies the ranks read: the file is corrupt, or a rank reads another copy of it");
  }
  copy_back_to_device();
  // The loaded masters, rounded, become the parameters this rank updates (the arena's
  // segments or the 16-bit words); other ranks' pieces are theirs to share.
  optimizer.round_params(params.params());
  optimizer.set_steps_taken(header.optimizer_step);
  return header.info;
}
}  // namespace dtrain::ckpt
