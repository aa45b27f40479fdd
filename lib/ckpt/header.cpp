#include "ckpt/header.hpp"

#include <cmath>
#include <tuple>
#include <utility>

#include "core/number_text.hpp"
#include "dtrain/ckpt/checksum.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::ckpt {

bool link_exists(hid_t file, const std::string& path, const std::string& where) {
  for (std::size_t pos = path.find('/', 1);; pos = path.find('/', pos + 1)) {
    const std::string prefix = path.substr(0, pos);
    const htri_t found = H5Lexists(file, prefix.c_str(), H5P_DEFAULT);
    if (found < 0) h5::fail_damaged(where + ": cannot look up " + prefix);
    if (found == 0) return false;
    if (pos == std::string::npos) return true;
  }
}

h5::Handle open_group(hid_t file, const std::string& path, const std::string& where) {
  DTRAIN_CHECK(link_exists(file, path, where), Errc::corrupt_data, where << " has no " << path << " group");
  const hid_t id = H5Gopen2(file, path.c_str(), H5P_DEFAULT);
  if (id < 0) h5::fail_damaged(where + ": cannot open " + path);
  return h5::Handle(id, H5Gclose);
}

void check_format(hid_t file, const std::string& where) {
  const std::string format = h5::read_attr_string(file, "format", where);
  DTRAIN_CHECK(format == kFormatName, Errc::corrupt_data,
               where << " is not a dtrain checkpoint (format '" << format << "')");
  const long version = h5::read_attr_i64(file, "format_version", where);
  DTRAIN_CHECK(version >= 1 && version <= kFormatVersion, Errc::corrupt_data,
               where << " has format version " << version << "; this library reads 1.." << kFormatVersion);
  const std::string algo = h5::read_attr_string(file, "checksum_algorithm", where);
  DTRAIN_CHECK(algo == kChecksumAlgorithm, Errc::corrupt_data,
               where << " uses checksum algorithm '" << algo << "', expected '" << kChecksumAlgorithm << "'");
}

Header read_header(hid_t file, const std::string& where) {
  check_format(file, where);
  Header h;
  CheckpointInfo& info = h.info;
  // Counts of steps taken: never negative, and with room to count on (a run that took 2^62
  // steps would have needed far longer than any machine has run; one more step from 2^63 - 1
  // wrapped the counter, and AdamW's bias correction turned the weights into NaN).
  const auto check_step = [&](long step, const char* whose) {
    DTRAIN_CHECK(step >= 0, Errc::corrupt_data, where << whose << " has a negative step (" << step << ")");
    DTRAIN_CHECK(step <= kMaxStep, Errc::corrupt_data,
                 where << whose << " has a step of " << step << ", past 2^62 = " << kMaxStep << ": no run takes as many");
  };
  info.step = h5::read_attr_i64(file, "step", where);
  check_step(info.step, "");
  info.consumed_samples = h5::read_attr_u64(file, "consumed_samples", where);
  info.data_position = h5::read_attr_u64(file, "data_position", where);
  info.run_config = h5::read_attr_string(file, "run_config", where);
  if (h5::has_attr(file, "data_fingerprint", where))  // files of a run with token files only
    info.data_fingerprint = h5::read_attr_u64(file, "data_fingerprint", where);
  if (h5::has_attr(file, "val_loss", where))  // the step's evaluation finished
    info.val_loss = h5::read_attr_f64(file, "val_loss", where);
  if (h5::has_attr(file, "loss_scale", where)) {  // written by fp16 runs only
    info.loss_scale = h5::read_attr_f64(file, "loss_scale", where);
    info.loss_scale_clean_steps = h5::read_attr_i64(file, "loss_scale_clean_steps", where);
    DTRAIN_CHECK(std::isfinite(info.loss_scale) && info.loss_scale > 0 && info.loss_scale_clean_steps >= 0,
                 Errc::corrupt_data, where << " has a loss scale of " << info.loss_scale << " after "
                                           << info.loss_scale_clean_steps << " clean steps");
    if (h5::has_attr(file, "loss_scale_skipped_steps", where)) {  // files written before it: 0
      info.loss_scale_skipped_steps = h5::read_attr_i64(file, "loss_scale_skipped_steps", where);
      DTRAIN_CHECK(info.loss_scale_skipped_steps >= 0, Errc::corrupt_data,
                   where << " has a negative count of skipped steps (" << info.loss_scale_skipped_steps << ")");
    }
  }
  h5::Handle og = open_group(file, "/optimizer", where);
  const std::string type = h5::read_attr_string(og, "type", where + " /optimizer");
  DTRAIN_CHECK(type == "adamw", Errc::corrupt_data,
               where << " /optimizer holds the state of optimiser '" << type << "'; this library resumes AdamW's ('adamw')");
  h.optimizer_step = h5::read_attr_i64(og, "step", where + " /optimizer");
  check_step(h.optimizer_step, " /optimizer");
  // Absent (files before they were stored) they stay NaN; present, each must be one a run could use.
  const auto beta_ok = [](double v) { return v >= 0 && v < 1; };
  const auto eps_ok = [](double v) { return v > 0 && std::isfinite(v); };
  const auto decay_ok = [](double v) { return v >= 0 && std::isfinite(v); };
  for (auto [name, value, ok] : {std::tuple{"beta1", &info.beta1, +beta_ok}, std::tuple{"beta2", &info.beta2, +beta_ok},
                                 std::tuple{"eps", &info.eps, +eps_ok},
                                 std::tuple{"weight_decay", &info.weight_decay, +decay_ok}}) {
    if (!h5::has_attr(og, name, where + " /optimizer")) continue;
    *value = h5::read_attr_f64(og, name, where + " /optimizer");
    DTRAIN_CHECK(ok(*value), Errc::corrupt_data,
                 where << " /optimizer has AdamW " << name << " " << shortest_text(*value) << ", which no run uses");
  }
  return h;
}

ModelAttributes read_model_attributes(hid_t file, const std::string& where) {
  h5::Handle mg = open_group(file, "/model", where);
  const std::string at = where + " /model";
  ModelAttributes m;
  m.layers = h5::read_attr_i64(mg, "layers", at);
  m.heads = h5::read_attr_i64(mg, "heads", at);
  m.d_model = h5::read_attr_i64(mg, "d_model", at);
  m.seq_len = h5::read_attr_i64(mg, "seq_len", at);
  m.vocab = h5::read_attr_i64(mg, "vocab", at);
  m.tie_embeddings = h5::read_attr_i64(mg, "tie_embeddings", at);
  // A GPT's sizes are positive, a byom's or an MLP's 0; the tying flag 0 or 1.
  for (auto [name, value] : {std::pair{"layers", m.layers}, std::pair{"heads", m.heads},
                             std::pair{"d_model", m.d_model}, std::pair{"seq_len", m.seq_len},
                             std::pair{"vocab", m.vocab}}) {
    DTRAIN_CHECK(value >= 0, Errc::corrupt_data, at << "'s " << name << " is " << value << ", which no model has");
  }
  DTRAIN_CHECK(m.tie_embeddings == 0 || m.tie_embeddings == 1, Errc::corrupt_data,
               at << "'s tie_embeddings is " << m.tie_embeddings << ", not 0 or 1");
  return m;
}

}  // namespace dtrain::ckpt
