// Checkpointer: the parallel HDF5 write and read of the planned pieces (io_plan.hpp), the
// attributes of docs/checkpoint-format.md, and the verification on load.
#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <sstream>

#include "ckpt/adamw_changes.hpp"
#include "ckpt/commit.hpp"
#include "ckpt/dir_lock.hpp"
#include "ckpt/h5.hpp"
#include "ckpt/header.hpp"
#include "ckpt/io_plan.hpp"
#include "ckpt/made_dirs.hpp"
#include "ckpt/mpi_io_path.hpp"
#include "ckpt/same_file.hpp"
#include "ckpt/slice_boxes.hpp"
#include "ckpt/tensor_directory.hpp"
#include "comm/comm_state.hpp"
#include "comm/watchdog.hpp"
#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/ckpt/checksum.hpp"
#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/comm/mpi_interop.hpp"
#include "dtrain/core/buffer.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/version.hpp"

namespace dtrain::ckpt {
namespace {

enum Kind { kParam = 0, kExpAvg = 1, kExpAvgSq = 2 };
const char* const kStateNames[] = {"", "exp_avg", "exp_avg_sq"};

std::string dataset_path(const TensorEntry& e, int kind) {
  return kind == kParam ? "/model/" + e.name : "/optimizer/" + e.name + "/" + kStateNames[kind];
}

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

struct Checkpointer::Impl {
  ProcessGrid& grid;
  ParameterStore& params;
  optim::AdamW& optimizer;
  GptConfig model;
  // Every tensor of the model, also those other pipeline stages hold: all ranks create
  // every dataset and join every collective transfer, in this order.
  std::vector<TensorEntry> directory;
  std::vector<TensorPlan> plans;  // one per directory entry
  // Collective I/O calls per tensor: max over ranks of pieces, for each of
  // param_read, param_write, state_read, state_write.
  std::vector<int> calls;
  // Test hook (docs/checkpoint-format.md): the highest world rank sends itself SIGKILL (or
  // DTRAIN_TEST_CKPT_KILL_SIGNAL: SIGSTOP stalls it) after writing this many datasets of a
  // save's temporary file; -1 = never.
  long kill_after_datasets = env::get_int("DTRAIN_TEST_CKPT_KILL_AFTER_DATASETS", -1, -1, LONG_MAX);
  int kill_signal = static_cast<int>(env::get_int("DTRAIN_TEST_CKPT_KILL_SIGNAL", SIGKILL, 1, 64));
  // Test hook: this world rank flips a bit of the first value it reads of each dataset (or
  // only of the one DTRAIN_TEST_CKPT_FLIP_READ_DATASET names), as a rank reading its node's
  // own damaged copy would; -1 = none.
  long flip_read_rank = env::get_int("DTRAIN_TEST_CKPT_FLIP_READ_RANK", -1, -1, INT_MAX);
  std::string flip_read_dataset = env::get_string("DTRAIN_TEST_CKPT_FLIP_READ_DATASET", "");
  // Where this rank's parameter values are read from and loaded into (io_plan.hpp).
  ParamSource param_source = ParamSource::arena;
  // Loads go through host copies of the parameters and both moments, which live for one
  // load (HostStaging): filled before the read (so what a load does not overwrite keeps its
  // value) and copied over the model only after every dataset has passed its checksum, so a
  // corrupt file leaves the model as it was. Saves do the same on a GPU only (HDF5 reads
  // and writes host memory). Test hook: DTRAIN_TEST_CKPT_STAGE_THROUGH_HOST=1 stages saves
  // on the CPU too. A copy is as long as what it mirrors but takes memory only where this
  // rank's ranges are (held_ranges): a ZeRO-3 rank stages its own pieces of the arena.
  bool stage_saves = false;
  bool staging = false;  // inside a HostStaging
  // World rank 0's claim on the directory it saves into (dir_lock.hpp), kept until the
  // Checkpointer goes or saves elsewhere.
  std::shared_ptr<DirectoryLock> dir_lock;
  std::string locked_dir;
  // What of locked_dir this Checkpointer created (made_dirs.hpp): a run that ends without
  // saving there removes it again rather than leave empty directories.
  MadeDirs made;
  std::array<AlignedBuffer, 3> host_copies;

  ~Impl() { release_directory(); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Drops the claim on locked_dir. Where this Checkpointer made it and it holds nothing but
  // the lock file (and no other claim in this process shares the lock), the file goes while
  // still locked, then the directories made.
  void release_directory() noexcept {
    if (dir_lock && made.levels > 0 && dir_lock.use_count() == 1) {
      namespace fs = std::filesystem;
      std::error_code ec;
      fs::directory_iterator it(made.path, ec), end;
      bool only_the_lock = !ec && it != end && it->path().filename() == kLockFileName;
      if (only_the_lock) {
        it.increment(ec);  // the overload that throws nothing: this runs in a destructor
        only_the_lock = !ec && it == end;
      }
      if (only_the_lock && fs::remove(fs::path(made.path) / kLockFileName, ec)) {
        dir_lock.reset();
        remove_made(made);
      }
    }
    dir_lock.reset();
    locked_dir.clear();
    made = {};
  }

  Impl(ProcessGrid& g, ParameterStore& p, optim::AdamW& o, int zero_stage, const GptConfig& m)
      : grid(g), params(p), optimizer(o), model(m) {
    DTRAIN_CHECK(zero_stage >= 0 && zero_stage <= 3, Errc::invalid_argument,
                 "Checkpointer: ZeRO stage " << zero_stage << " is not 0-3");
    stage_saves = p.device().kind() != DeviceKind::cpu ||
                  env::get_bool("DTRAIN_TEST_CKPT_STAGE_THROUGH_HOST", false);
    param_source = o.has_master_weights() ? ParamSource::masters
                   : zero_stage == 3      ? ParamSource::arena_pieces
                                          : ParamSource::arena;
    PlanLayout layout;
    layout.dp_rank = g.dp_rank();
    layout.dp_size = g.dp_size();
    layout.tp_rank = g.tp_rank();
    layout.pp_rank = g.pp_rank();
    layout.optimizer_sharded = zero_stage >= 1;
    layout.param_source = param_source;
    directory = gather_directory(g.pp(), p);
    plans = plan_io(directory, p, o, layout);
    for (const TensorPlan& t : plans) {
      for (const auto* v : {&t.param_read, &t.param_write, &t.state_read, &t.state_write})
        calls.push_back(static_cast<int>(v->size()));
    }
    g.world().all_reduce(calls.data(), calls.data(), calls.size(), DType::i32, ReduceOp::max);
  }

  // The plan follows where the parameters are; mixed precision must not start or stop after it.
  void check_param_source() const {
    DTRAIN_CHECK(optimizer.has_master_weights() == (param_source == ParamSource::masters),
                 Errc::internal, "Checkpointer: the optimiser's master weights came or went after it was made");
  }

  // Where the transfers of `kind` read and write: the host copy while staging, else the
  // arena, the masters or a moment itself.
  float* memory(int kind) {
    if (staging) return host_copies[kind].as<float>();
    return device_memory(kind);
  }
  float* device_memory(int kind) {
    if (kind == kParam) {
      return param_source == ParamSource::masters ? optimizer.master_weights() : params.params();
    }
    return kind == kExpAvg ? optimizer.exp_avg() : optimizer.exp_avg_sq();
  }
  std::size_t numel(int kind) const {
    return kind == kParam && param_source != ParamSource::masters ? params.numel()
                                                                  : optimizer.state_numel();
  }
  // The element ranges of `kind`'s memory this rank holds: all of it, but the arena of a
  // ZeRO-3 rank, which holds the optimiser's segments only.
  std::vector<std::pair<std::size_t, std::size_t>> held_ranges(int kind) const {
    if (kind != kParam || param_source != ParamSource::arena_pieces) return {{0, numel(kind)}};
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    for (const optim::Segment& s : optimizer.segments()) ranges.emplace_back(s.offset, s.offset + s.numel);
    return ranges;
  }
  void copy_back_to_device() {
    if (!staging) return;
    for (int kind : {kParam, kExpAvg, kExpAvgSq}) {
      for (const auto& [first, last] : held_ranges(kind)) {
        params.device().copy(device_memory(kind) + first, host_copies[kind].as<float>() + first,
                             sizeof(float) * (last - first), CopyKind::host_to_device);
      }
    }
  }

  // The host copies for one save or load (when active), filled from the model; freed
  // afterwards.
  class HostStaging {
   public:
    HostStaging(Impl& impl, bool active) : impl_(impl) {
      if (!active) return;
      try {
        for (int kind : {kParam, kExpAvg, kExpAvgSq}) {
          AlignedBuffer& h = impl_.host_copies[kind];
          h = AlignedBuffer(sizeof(float) * impl_.numel(kind), AlignedBuffer::kAlignment, Faulting::on_use);
          for (const auto& [first, last] : impl_.held_ranges(kind)) {
            impl_.params.device().copy(h.as<float>() + first, impl_.device_memory(kind) + first,
                                       sizeof(float) * (last - first), CopyKind::device_to_host);
          }
        }
      } catch (...) {  // leave no half-filled copies behind
        release_copies();
        throw;
      }
      impl_.staging = true;
    }
    ~HostStaging() {
      impl_.staging = false;
      release_copies();
    }
    HostStaging(const HostStaging&) = delete;
    HostStaging& operator=(const HostStaging&) = delete;

   private:
    void release_copies() {
      for (AlignedBuffer& h : impl_.host_copies) h = AlignedBuffer();
    }
    Impl& impl_;
  };

  // Runs `step`, which may fail on some ranks only (a file a node cannot see, memory), and
  // agrees on the outcome before HDF5's next collective call: a rank that threw alone would
  // leave the others waiting inside it. Every rank throws the same AgreedError.
  template <class Step>
  void agreed(Step&& step) {
    LocalFailure f;
    try {
      step();
    } catch (const std::exception& e) {
      f.record(e);
    }
    f.agree(grid.world(), "checkpoint");
  }

  h5::Handle file_access() {
    h5::Handle fapl = h5::plist_handle(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
    h5::check_status(H5Pset_fapl_mpio(fapl, to_mpi_comm(grid.world()), MPI_INFO_NULL),
                     "H5Pset_fapl_mpio");
    // Metadata read once and broadcast, written collectively: scales past a few ranks.
    h5::check_status(H5Pset_all_coll_metadata_ops(fapl, true), "H5Pset_all_coll_metadata_ops");
    h5::check_status(H5Pset_coll_metadata_write(fapl, true), "H5Pset_coll_metadata_write");
    // The 1.10 file format checksums all metadata (superblock, object headers with their
    // attributes, B-trees), so a damaged header is refused instead of misread; readable by
    // HDF5 1.10 and later.
    h5::check_status(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST),
                     "H5Pset_libver_bounds");
    return fapl;
  }

  // Every rank makes calls[] transfer calls for this dataset (collective I/O needs them all);
  // a rank with fewer pieces selects nothing. p may be null (a tensor of another pipeline
  // stage) only when there are no pieces.
  void transfer(bool write, hid_t dset, hid_t dxpl, const ParamInfo* p, float* base,
                const std::vector<Piece>& pieces, int n_calls, const std::string& path) {
    h5::Handle fspace = h5::space_handle(H5Dget_space(dset), path + ": H5Dget_space");
    for (int k = 0; k < n_calls; ++k) {
      const bool mine = k < static_cast<int>(pieces.size()) && pieces[k].count > 0;
      hsize_t n = mine ? pieces[k].count : 1;
      h5::Handle mspace = h5::space_handle(H5Screate_simple(1, &n, nullptr), "H5Screate_simple");
      float dummy = 0;
      float* data = &dummy;
      if (mine) {
        data = base + pieces[k].mem;
        bool firstbox = true;
        for (const Box& b : slice_boxes(*p, pieces[k].first, pieces[k].count)) {
          h5::check_status(H5Sselect_hyperslab(fspace, firstbox ? H5S_SELECT_SET : H5S_SELECT_OR,
                                               reinterpret_cast<const hsize_t*>(b.start.data()),
                                               nullptr,
                                               reinterpret_cast<const hsize_t*>(b.count.data()),
                                               nullptr),
                           path + ": H5Sselect_hyperslab");
          firstbox = false;
        }
      } else {
        h5::check_status(H5Sselect_none(fspace), "H5Sselect_none");
        h5::check_status(H5Sselect_none(mspace), "H5Sselect_none");
      }
      const herr_t rc = write ? H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, data)
                              : H5Dread(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, data);
      h5::check_status(rc, path + (write ? ": write failed" : ": read failed"));
    }
  }

  // The checksum of pieces of a tensor as they are in memory (a read is verified from what
  // landed there), keyed by their places in the tensor, so that pieces held by several ranks
  // add up to the whole tensor's.
  static std::uint64_t checksum_of(const ParamInfo* p, const float* base, const std::vector<Piece>& pieces) {
    std::uint64_t sum = 0;
    for (const Piece& piece : pieces) {
      sum += checksum_boxes(slice_boxes(*p, piece.first, piece.count), p->shape, base + piece.mem);
    }
    return sum;
  }

  void write_file(const std::string& path, const CheckpointInfo& info);
  void check_free_space(const std::string& dir, LocalFailure& f) const;
  // World rank 0: creates dir and claims it (dir_lock.hpp); failures go to f.
  void make_and_lock(const std::string& dir, LocalFailure& f);
  CheckpointInfo read_file(const std::string& path);
  void check_model(hid_t file, const std::string& path);
};

static_assert(sizeof(hsize_t) == sizeof(std::uint64_t), "hyperslab coordinates are 64-bit");

void Checkpointer::Impl::write_file(const std::string& path, const CheckpointInfo& info) {
  // HDF5's MPI-IO calls communicate where dtrain's watchdog cannot see: a rank that stalls
  // in the middle of a save (a hung node or file system) must still end the job, not leave
  // the others waiting forever. Each dataset written is progress (the agreement after it
  // re-arms the watch). The final flush is not watched: it may write back the whole file,
  // which on a slow file system can take longer than the timeout.
  comm::WatchScope watch("checkpoint write", grid.world().state()->label);
  std::optional<HostStaging> stage;
  agreed([&] {
    check_mpi_io_path(path, grid.world().size());
    check_param_source();
    stage.emplace(*this, stage_saves);
  });
  h5::Handle fapl = file_access();
  h5::Handle file = h5::file_handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl),
                                    "cannot create checkpoint '" + path + "'");
  h5::write_attr(file, "format", std::string(kFormatName));
  h5::write_attr(file, "format_version", static_cast<std::int64_t>(kFormatVersion));
  h5::write_attr(file, "library_version", std::string(DTRAIN_VERSION_STRING));
  h5::write_attr(file, "checksum_algorithm", std::string(kChecksumAlgorithm));
  h5::write_attr(file, "step", static_cast<std::int64_t>(info.step));
  h5::write_attr(file, "consumed_samples", static_cast<std::uint64_t>(info.consumed_samples));
  h5::write_attr(file, "data_position", static_cast<std::uint64_t>(info.data_position));
  h5::write_attr(file, "run_config", info.run_config);
  if (info.data_fingerprint != 0) h5::write_attr(file, "data_fingerprint", info.data_fingerprint);
  if (std::isfinite(info.val_loss)) h5::write_attr(file, "val_loss", info.val_loss);
  if (info.loss_scale > 0) {
    h5::write_attr(file, "loss_scale", info.loss_scale);
    h5::write_attr(file, "loss_scale_clean_steps", static_cast<std::int64_t>(info.loss_scale_clean_steps));
    h5::write_attr(file, "loss_scale_skipped_steps", static_cast<std::int64_t>(info.loss_scale_skipped_steps));
  }

  h5::Handle mg = h5::group_handle(H5Gcreate2(file, "/model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "/model");
  h5::write_attr(mg, "layers", static_cast<std::int64_t>(model.layers));
  h5::write_attr(mg, "heads", static_cast<std::int64_t>(model.heads));
  h5::write_attr(mg, "d_model", static_cast<std::int64_t>(model.d_model));
  h5::write_attr(mg, "seq_len", static_cast<std::int64_t>(model.seq_len));
  h5::write_attr(mg, "vocab", static_cast<std::int64_t>(model.vocab));
  h5::write_attr(mg, "tie_embeddings", static_cast<std::int64_t>(model.tie_embeddings ? 1 : 0));
  h5::Handle og = h5::group_handle(H5Gcreate2(file, "/optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "/optimizer");
  const optim::AdamWConfig& a = optimizer.config();
  h5::write_attr(og, "type", std::string("adamw"));
  h5::write_attr(og, "step", static_cast<std::int64_t>(optimizer.steps_taken()));
  h5::write_attr(og, "beta1", static_cast<double>(a.beta1));
  h5::write_attr(og, "beta2", static_cast<double>(a.beta2));
  h5::write_attr(og, "eps", static_cast<double>(a.eps));
  h5::write_attr(og, "weight_decay", static_cast<double>(a.weight_decay));

  h5::Handle lcpl = h5::plist_handle(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate");
  h5::check_status(H5Pset_create_intermediate_group(lcpl, 1), "H5Pset_create_intermediate_group");
  h5::Handle dcpl = h5::plist_handle(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate");
  h5::check_status(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time");  // all written
  h5::Handle dxpl = h5::plist_handle(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate");
  h5::check_status(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio");

  std::vector<h5::Handle> dsets;
  std::vector<std::uint64_t> sums;
  for (std::size_t t = 0; t < plans.size(); ++t) {
    const TensorPlan& plan = plans[t];
    const TensorEntry& e = *plan.entry;
    std::vector<hsize_t> dims(e.shape.begin(), e.shape.end());
    h5::Handle space = h5::space_handle(
        H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple");
    for (int kind : {kParam, kExpAvg, kExpAvgSq}) {
      const std::string name = dataset_path(e, kind);
      // A full disk or a quota fails the write on some ranks only (those that hold the data
      // MPI-IO writes): agreed per dataset, so every rank stops here and closes the datasets
      // and the file in the same order, instead of one entering the next collective write
      // while another closes the file.
      // (d outlives the agreement, so every rank still holds it when the unwinding closes it.)
      h5::Handle d;
      agreed([&] {
        d = h5::dataset_handle(
            H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT),
            "cannot create dataset " + name);
        const auto& pieces = kind == kParam ? plan.param_write : plan.state_write;
        const int n_calls = calls[4 * t + (kind == kParam ? 1 : 3)];
        transfer(true, d, dxpl, plan.param, memory(kind), pieces, n_calls, name);
        sums.push_back(checksum_of(plan.param, memory(kind), pieces));
      });
      dsets.push_back(std::move(d));
      if (static_cast<long>(dsets.size()) == kill_after_datasets &&
          grid.world().rank() == grid.world().size() - 1) {
        std::raise(kill_signal);
      }
    }
  }
  grid.world().all_reduce(sums.data(), sums.data(), sums.size(), DType::i64, ReduceOp::sum);
  for (std::size_t i = 0; i < dsets.size(); ++i) h5::write_attr(dsets[i], "checksum", sums[i]);
  dsets.clear();
  mg.reset();
  og.reset();
  watch.end();
  agreed([&] { h5::check_status(H5Fflush(file, H5F_SCOPE_GLOBAL), "cannot flush '" + path + "'"); });
  agreed([&] { h5::check_status(file.close(), "cannot close '" + path + "'"); });
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
        transfer(false, d, dxpl, plan.param, memory(kind), read, calls[4 * t + (is_param ? 0 : 2)], name);
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

Checkpointer::Checkpointer(ProcessGrid& grid, ParameterStore& params, optim::AdamW& optimizer,
                           int zero_stage, const GptConfig& model)
    : impl_(std::make_unique<Impl>(grid, params, optimizer, zero_stage, model)) {}

Checkpointer::~Checkpointer() = default;

std::string Checkpointer::adamw_changes(const CheckpointInfo& loaded) const {
  return ckpt::adamw_changes(loaded, impl_->optimizer.config());
}

std::string checkpoint_name(long step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08ld.h5", step);
  return buf;
}

// A file system that fills up in the middle of a collective HDF5 write fails it on some ranks
// only, and HDF5's own close then waits in mismatched collectives (until the watchdog ends
// the job): so the space the file needs is asked for first. Its size: three fp32 datasets (parameter
// and both moments) per tensor, plus room for the metadata. (Another writer can still take
// the space between the check and the write.)
void Checkpointer::Impl::check_free_space(const std::string& dir, LocalFailure& f) const {
  std::uint64_t values = 0;
  for (const TensorEntry& e : directory) {
    std::uint64_t n = 1;
    for (std::int64_t d : e.shape) n *= static_cast<std::uint64_t>(d);
    values += n;
  }
  const std::uint64_t needed = values * 3 * sizeof(float) * 21 / 20 + (1u << 20);
  std::error_code ec;
  const std::filesystem::space_info space = std::filesystem::space(dir, ec);
  if (ec || space.available >= needed) return;  // a file system that cannot tell: try
  const auto mib = [](std::uint64_t b) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(b) / (1u << 20));
    return std::string(text);
  };
  f.record(Errc::io, "not enough space for a checkpoint in '" + dir + "': it needs about " +
                         mib(needed) + ", " + mib(space.available) + " are free");
}

void Checkpointer::check_directory_path(const std::string& dir, int ranks) {
  // The longest a save's temporary file will be (steps of up to 8 digits): refused now, not
  // at a save hours later.
  check_mpi_io_path((std::filesystem::path(dir) / (checkpoint_name(0) + ".tmp")).string(), ranks);
}

void Checkpointer::Impl::make_and_lock(const std::string& dir, LocalFailure& f) {
  try {
    check_directory_path(dir, grid.world().size());
  } catch (const std::exception& e) {
    f.record(e);
    return;
  }
  std::error_code ec;
  const MadeDirs missing = missing_dirs(dir);
  // The path measured (a ".." past a directory not made yet is folded there, not made).
  std::filesystem::create_directories(missing.path.empty() ? dir : missing.path, ec);
  if (ec) {
    f.record(Errc::io, "cannot create checkpoint directory '" + dir + "': " + ec.message());
    return;
  }
  try {
    sync_made_dirs(missing.path.empty() ? dir : missing.path, missing.levels);
  } catch (const std::exception& e) {
    remove_made(missing);
    f.record(e);
    return;
  }
  if (dir_lock && dir == locked_dir) return;
  try {
    // The new claim first: a refused one keeps the old, and the same directory spelt
    // differently is the same lock (never released in between).
    std::shared_ptr<DirectoryLock> next = lock_directory(dir);
    if (next != dir_lock) {
      release_directory();  // a directory saved into before is free for others again
      dir_lock = std::move(next);
      made = missing;
    }
    locked_dir = dir;
  } catch (const std::exception& e) {
    remove_made(missing);
    f.record(e);
  }
}

void Checkpointer::claim(const std::string& dir) {
  LocalFailure f;
  if (impl_->grid.world().rank() == 0) impl_->make_and_lock(dir, f);
  f.agree(impl_->grid.world(), "checkpoint");
}

std::string Checkpointer::save(const std::string& dir, const CheckpointInfo& info, int keep) {
  h5::QuietErrors quiet;
  Communicator& world = impl_->grid.world();
  const std::string name = checkpoint_name(info.step);
  const std::string final_path = (std::filesystem::path(dir) / name).string();
  const std::string tmp = final_path + ".tmp";
  LocalFailure f;
  if (world.rank() == 0) {
    impl_->make_and_lock(dir, f);
    if (!f.failed()) impl_->check_free_space(dir, f);
  }
  f.agree(world, "checkpoint");
  try {
    impl_->write_file(tmp, info);
  } catch (const AgreedError&) {
    throw;  // every rank's already
  } catch (const std::exception& e) {
    f.record(e);
  }
  f.agree(world, "checkpoint");
  // Every rank has closed the file: publish it, then move `latest`, then prune.
  if (world.rank() == 0) {
    try {
      publish(tmp, final_path);
      write_latest(dir, name);
      prune(dir, keep, name);
    } catch (const std::exception& e) {
      f.record(e);
    }
  }
  f.agree(world, "checkpoint");
  return final_path;
}

void Checkpointer::republish_latest(const std::string& dir) {
  Communicator& world = impl_->grid.world();
  if (world.rank() == 0) {
    try {
      const std::string name = read_latest(dir);
      if (!name.empty()) write_latest(dir, name);
    } catch (const std::exception& e) {  // the checkpoint is intact: the stop stays a stop
      DTRAIN_LOG(warn, "could not write '" << dir << "/latest' anew (" << e.what()
                       << "): a job script that tells a stop's checkpoint by it may not requeue this job");
    }
  }
  world.barrier();  // no rank exits before it is written
}

CheckpointInfo Checkpointer::load(const std::string& path) {
  h5::QuietErrors quiet;
  CheckpointInfo info;
  LocalFailure f;
  try {
    info = impl_->read_file(path);
  } catch (const AgreedError&) {
    throw;  // every rank's already
  } catch (const std::exception& e) {
    f.record(e);
  }
  f.agree(impl_->grid.world(), "checkpoint");
  return info;
}

}  // namespace dtrain::ckpt
