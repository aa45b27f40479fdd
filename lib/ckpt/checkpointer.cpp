// Checkpointer: its set-up (the I/O plan), the transfers and file access its write and read
// share, the directory a run saves into (created, claimed, checked for space) and the save's
// commit; the file's write and read are checkpoint_write.cpp and checkpoint_read.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>

#include "ckpt/adamw_changes.hpp"
#include "ckpt/checkpointer_impl.hpp"
#include "ckpt/commit.hpp"
#include "ckpt/header.hpp"
#include "ckpt/mpi_io_path.hpp"
#include "ckpt/slice_boxes.hpp"
#include "dtrain/ckpt/checksum.hpp"
#include "dtrain/comm/mpi_interop.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain::ckpt {

namespace {
// A GptConfig for a model that is not the GPT it describes (GptConfig{}'s 4 layers for one's
// own model) wrote files that claim tensors they lack: the GPT's embedding, its last block
// and no block past it, and its head exactly when untied, are looked for over the stages.
void check_model_describes(const std::vector<TensorEntry>& directory, const GptConfig& m) {
  const long sizes[] = {m.layers, m.heads, m.d_model, m.seq_len, m.vocab};
  const bool gpt = std::any_of(std::begin(sizes), std::end(sizes), [](long v) { return v != 0; });
  if (!gpt && !m.tie_embeddings) return;
  const auto has = [&](const std::string& name) {
    return std::any_of(directory.begin(), directory.end(), [&](const TensorEntry& e) { return e.name == name; });
  };
  const std::string last = "h." + std::to_string(m.layers - 1) + ".ln_1.weight";
  const bool matches = std::all_of(std::begin(sizes), std::end(sizes), [](long v) { return v > 0; }) &&
                       has("wte") && has(last) && !has("h." + std::to_string(m.layers) + ".ln_1.weight") &&
                       has("lm_head.weight") != m.tie_embeddings;
  DTRAIN_CHECK(matches, Errc::invalid_argument,
               "Checkpointer: the model configuration describes a GPT of " << m.layers << " layers, d_model "
                   << m.d_model << ", vocab " << m.vocab << (m.tie_embeddings ? ", tied" : ", untied")
                   << " head, which the parameters are not; for another model pass ckpt::not_a_gpt()");
}
}  // namespace

GptConfig not_a_gpt() {
  GptConfig c;
  c.layers = c.heads = c.d_model = c.seq_len = c.vocab = 0;
  c.tie_embeddings = false;
  return c;
}

Checkpointer::Impl::Impl(ProcessGrid& g, ParameterStore& p, optim::AdamW& o, int zero_stage,
                         const GptConfig& m)
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
  check_model_describes(directory, m);
  plans = plan_io(directory, p, o, layout);
  for (const TensorPlan& t : plans) {
    for (const auto* v : {&t.param_read, &t.param_write, &t.state_read, &t.state_write})
      calls.push_back(static_cast<int>(v->size()));
  }
  g.world().all_reduce(calls.data(), calls.data(), calls.size(), DType::i32, ReduceOp::max);
}

void Checkpointer::Impl::release_directory() noexcept {
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

h5::Handle Checkpointer::Impl::file_access() {
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

void Checkpointer::Impl::transfer(bool write, hid_t dset, hid_t dxpl, const ParamInfo* p, float* base,
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

std::uint64_t Checkpointer::Impl::checksum_of(const ParamInfo* p, const float* base, const std::vector<Piece>& pieces) {
  std::uint64_t sum = 0;
  for (const Piece& piece : pieces) {
    sum += checksum_boxes(slice_boxes(*p, piece.first, piece.count), p->shape, base + piece.mem);
  }
  return sum;
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

namespace {
// What a load would refuse as damage is refused before anything is written: a file named
// step_-0000005.h5 that `latest` pointed at left no checkpoint a resume could take.
void check_savable(const CheckpointInfo& info, long optimizer_step, int keep, LocalFailure& f) {
  const auto bad = [&](const std::string& why) {
    if (!f.failed()) f.record(Errc::invalid_argument, "cannot save a checkpoint: " + why);
  };
  if (info.step < 0 || info.step > kMaxStep)
    bad("its step is " + std::to_string(info.step) + ", outside [0, 2^62]");
  if (optimizer_step < 0 || optimizer_step > kMaxStep)
    bad("the optimiser's step count is " + std::to_string(optimizer_step) + ", outside [0, 2^62]");
  if (info.loss_scale != 0 && !(std::isfinite(info.loss_scale) && info.loss_scale > 0))
    bad("its loss scale is " + std::to_string(info.loss_scale) + " (0 for none, else positive and finite)");
  if (info.loss_scale_clean_steps < 0 || info.loss_scale_skipped_steps < 0)
    bad("its counts of clean and skipped steps must not be negative");
  if (keep < 1) bad("keep is " + std::to_string(keep) + "; at least 1 (INT_MAX keeps every checkpoint)");
}
}  // namespace

std::string Checkpointer::save(const std::string& dir, const CheckpointInfo& info, int keep) {
  h5::QuietErrors quiet;
  Communicator& world = impl_->grid.world();
  const std::string name = checkpoint_name(info.step);
  const std::string final_path = (std::filesystem::path(dir) / name).string();
  const std::string tmp = final_path + ".tmp";
  LocalFailure f;
  check_savable(info, impl_->optimizer.steps_taken(), keep, f);
  if (world.rank() == 0 && !f.failed()) {
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
