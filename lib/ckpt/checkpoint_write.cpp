// Checkpointer's save: every rank's pieces of every tensor written collectively into one HDF5
// file with the attributes of docs/checkpoint-format.md and a checksum per dataset.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <optional>

#include "ckpt/checkpointer_impl.hpp"
#include "ckpt/mpi_io_path.hpp"
#include "comm/comm_state.hpp"
#include "comm/watchdog.hpp"
#include "dtrain/ckpt/checksum.hpp"
#include "dtrain/ckpt/format.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/version.hpp"

namespace dtrain::ckpt {

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
    check_no_nan(info.step);
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
        transfer(true, d, dxpl, plan.param, memory(kind), pieces, n_calls, "'" + path + "': dataset " + name);
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
// A NaN in what this rank writes (its shares, which over the ranks cover every element once)
// refuses the save before the file is made: a resume refuses such a file, and publishing it
// would have pruned the last checkpoint that loads (a byom's parameters are its program's to
// keep finite; a GPT run stops at a non-finite loss first).
void Checkpointer::Impl::check_no_nan(long step) {
  for (const TensorPlan& plan : plans) {
    for (int kind : {kParam, kExpAvg, kExpAvgSq}) {
      for (const Piece& piece : kind == kParam ? plan.param_write : plan.state_write) {
        const float* v = memory(kind) + piece.mem;
        const float* nan = std::find_if(v, v + piece.count, [](float x) { return std::isnan(x); });
        DTRAIN_CHECK(nan == v + piece.count, Errc::invalid_argument,
                     "cannot save the checkpoint of step " << step << ": " << dataset_path(*plan.entry, kind)
                         << " would hold nan (the model diverged?); a resume refuses such a file, so "
                            "nothing was written and the earlier checkpoints are as they were");
      }
    }
  }
}

}  // namespace dtrain::ckpt
