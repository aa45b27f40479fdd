#pragma once
// Checkpointer's state and the steps its write (checkpoint_write.cpp), its read
// (checkpoint_read.cpp) and its directory handling (checkpointer.cpp) share.
#include <array>
#include <climits>
#include <csignal>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/dir_lock.hpp"
#include "ckpt/h5.hpp"
#include "ckpt/io_plan.hpp"
#include "ckpt/made_dirs.hpp"
#include "ckpt/tensor_directory.hpp"
#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/core/buffer.hpp"
#include "dtrain/core/env.hpp"

namespace dtrain::ckpt {

static_assert(sizeof(hsize_t) == sizeof(std::uint64_t), "hyperslab coordinates are 64-bit");

// The three datasets of a tensor: its values and the two AdamW moments.
enum Kind { kParam = 0, kExpAvg = 1, kExpAvgSq = 2 };
inline const char* const kStateNames[] = {"", "exp_avg", "exp_avg_sq"};

inline std::string dataset_path(const TensorEntry& e, int kind) {
  return kind == kParam ? "/model/" + e.name : "/optimizer/" + e.name + "/" + kStateNames[kind];
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
  void release_directory() noexcept;

  Impl(ProcessGrid& g, ParameterStore& p, optim::AdamW& o, int zero_stage, const GptConfig& m);

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

  h5::Handle file_access();

  // Every rank makes calls[] transfer calls for this dataset (collective I/O needs them all);
  // a rank with fewer pieces selects nothing. p may be null (a tensor of another pipeline
  // stage) only when there are no pieces.
  void transfer(bool write, hid_t dset, hid_t dxpl, const ParamInfo* p, float* base,
                const std::vector<Piece>& pieces, int n_calls, const std::string& path);

  // The checksum of pieces of a tensor as they are in memory (a read is verified from what
  // landed there), keyed by their places in the tensor, so that pieces held by several ranks
  // add up to the whole tensor's.
  static std::uint64_t checksum_of(const ParamInfo* p, const float* base, const std::vector<Piece>& pieces);

  void write_file(const std::string& path, const CheckpointInfo& info);
  void check_no_nan(long step);  // Errc::invalid_argument naming the first dataset that would hold one
  void check_free_space(const std::string& dir, LocalFailure& f) const;
  // World rank 0: creates dir and claims it (dir_lock.hpp); failures go to f.
  void make_and_lock(const std::string& dir, LocalFailure& f);
  CheckpointInfo read_file(const std::string& path);
  void check_model(hid_t file, const std::string& path);
};

}  // namespace dtrain::ckpt
