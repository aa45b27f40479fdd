// The Trainer's public methods: the step, evaluation, the run loop with its metrics and
// signals, and checkpoint save and load.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <optional>
#include <sstream>
#include <system_error>

#include "core/number_text.hpp"
#include "train/trainer_state.hpp"

namespace dtrain::train {
namespace {

// The value of `key` in "key = value" lines; nothing where the key is absent.
std::optional<std::string> ini_value(const std::string& ini, const std::string& key) {
  std::istringstream in(ini);
  const std::string prefix = key + " = ";
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, prefix.size(), prefix) == 0) return line.substr(prefix.size());
  }
  return std::nullopt;
}

// Two values of an option: paths as the files they name here; whole numbers exactly (seeds
// go past 2^53), other numbers as numbers (files written before the shortest form hold
// 0.0030000000000000001 for 0.003); the rest as text.
bool same_setting(const std::string& then, const std::string& here, bool is_path) {
  if (is_path) {
    if (then.empty() || here.empty()) return then == here;
    std::error_code ec1, ec2;
    const std::filesystem::path p = std::filesystem::weakly_canonical(then, ec1);
    const std::filesystem::path q = std::filesystem::weakly_canonical(here, ec2);
    return !ec1 && !ec2 ? p == q : then == here;
  }
  std::uint64_t i = 0, j = 0;
  if (parse_whole(then, i) && parse_whole(here, j)) return i == j;
  double a = 0, b = 0;
  if (parse_number(then, a) && parse_number(here, b)) return a == b;
  return then == here;
}

// A value for a message: whole numbers as written, other numbers in their shortest form,
// other text quoted.
std::string setting_text(const std::string& value) {
  std::uint64_t whole = 0;
  double x = 0;
  if (parse_whole(value, whole)) return std::to_string(whole);
  return parse_number(value, x) ? shortest_text(x) : "'" + value + "'";
}

// "key then -> now" for each of keys whose value differs between the two runs' settings.
std::string changed_settings(const std::string& saved_ini, const std::string& now,
                             std::initializer_list<const char*> keys) {
  std::string changed;
  for (const char* key : keys) {
    const std::optional<std::string> then = ini_value(saved_ini, key), here = ini_value(now, key);
    if (then && here && !same_setting(*then, *here, false))
      changed += std::string(changed.empty() ? "" : ", ") + key + " " + setting_text(*then) + " -> " +
                 setting_text(*here);
  }
  return changed;
}

// Samples are drawn by (seed, sample index) from the data: a resumed run given another seed or
// other data trains on other samples than the run it continues would have. Allowed, but said;
// so are another learning-rate schedule, other clipping and, in fp16, a --loss-scale that the
// saved dynamic scale overrides, and the AdamW settings the file holds.
void warn_if_run_differs(const std::string& path, const ckpt::CheckpointInfo& info, const TrainConfig& cfg,
                         std::uint64_t data_fingerprint, const std::string& adamw_changes) {
  const std::string& saved_ini = info.run_config;
  // Token files' contents, where both runs had them, decide whether the data are the same,
  // whatever their paths (a copy elsewhere is the same data; other contents under the same
  // path are not); otherwise the paths do.
  const bool contents_known = info.data_fingerprint != 0 && data_fingerprint != 0;
  if (contents_known && info.data_fingerprint != data_fingerprint) {
    DTRAIN_LOG(warn, "checkpoint " << path << " was written by a run whose data files (training or validation) "
                     << "had other contents, or were split otherwise between training and validation (content "
                     << "fingerprint " << std::hex << info.data_fingerprint
                     << ", this run's " << data_fingerprint << std::dec << "): from here on it trains or "
                     << "evaluates on other samples than the run it continues would have");
  }
  struct Key {
    const char* name;
    bool is_path;
    bool used;
  };
  const std::string now = cfg.to_ini();
  for (const Key key : {Key{"seed", false, true}, Key{"data", true, true}, Key{"val-data", true, true},
                        Key{"val-fraction", false, cfg.val_data.empty()}}) {
    const std::optional<std::string> then = ini_value(saved_ini, key.name), here = ini_value(now, key.name);
    if (!key.used || !then || !here || (key.is_path && contents_known) || same_setting(*then, *here, key.is_path))
      continue;
    const auto shown = [&](const std::string& value) {
      return std::string(key.name) == "data" && value.empty() ? "'' (the built-in corpus)" : setting_text(value);
    };
    DTRAIN_LOG(warn, "checkpoint " << path << " was written by a run with " << key.name << " = "
                     << shown(*then) << ", this run has " << shown(*here)
                     << ": from here on it draws other samples than the run it continues would have"
                     << (key.is_path && !then->empty() && !here->empty()  // "": the built-in corpus
                             ? " (unless it is the same data under another path)" : ""));
  }
  // The learning rate at step s is a function of these: another value (a longer --steps to
  // train on, say) changes the rates from here on. Said once, as the samples are.
  const std::string schedule = changed_settings(saved_ini, now, {"lr", "min-lr", "warmup-steps", "steps"});
  if (!schedule.empty()) {
    DTRAIN_LOG(warn, "checkpoint " << path << " was written by a run with another learning-rate schedule ("
                     << schedule << "): the rates from here on differ from the run it continues");
  }
  const std::string clipping = changed_settings(saved_ini, now, {"clip-grad"});
  if (!clipping.empty()) {
    DTRAIN_LOG(warn, "checkpoint " << path << " was written by a run with other gradient clipping ("
                     << clipping << "): the updates from here on differ from the run it continues");
  }
  if (!adamw_changes.empty()) {
    DTRAIN_LOG(warn, "checkpoint " << path << " was written with other AdamW settings (" << adamw_changes
                     << "): the updates from here on differ from the run it continues");
  }
  if (info.loss_scale > 0 && cfg.precision == "fp16" && !changed_settings(saved_ini, now, {"loss-scale"}).empty()) {
    DTRAIN_LOG(warn, "checkpoint " << path << " holds the dynamic loss scale " << shortest_text(info.loss_scale)
                     << ", which goes on: this run's --loss-scale " << shortest_text(cfg.loss_scale)
                     << " sets the scale of a fresh run only (and, above 2^24, how far the scale may grow)");
  }
  const std::string scaling = changed_settings(saved_ini, now, {"loss-scale-window", "min-loss-scale"});
  if (info.loss_scale > 0 && cfg.precision == "fp16" && !scaling.empty()) {
    DTRAIN_LOG(warn, "checkpoint " << path << " was written by a run with other loss scaling (" << scaling
                     << "): the scale from here on moves differently from the run it continues");
  }
}

}  // namespace

Trainer::Trainer(const TrainConfig& cfg, Communicator& world)
    : s_(std::make_unique<State>(cfg, world)) {
  DTRAIN_LOG(info, "model: GPT layers=" << cfg.layers << " heads=" << cfg.heads << " d-model="
                   << cfg.d_model << " seq-len=" << cfg.seq_len << " vocab=" << cfg.vocab << " ("
                   << s_->model.config().logical_parameter_count() << " parameters)");
  DTRAIN_LOG(info, "data: " << s_->source->describe());
  DTRAIN_LOG(info, "layout: " << world.size() << " ranks = dp " << s_->grid.dp_size() << " x tp "
                   << s_->grid.tp_size() << " x pp " << s_->grid.pp_size() << "; micro-batch "
                   << cfg.micro_batch << ", global batch " << s_->loader.plan().global_batch()
                   << " sequences (" << s_->accum()
                   << (s_->accum() == 1 ? " micro-step" : " micro-steps") << " a step), device "
                   << s_->dev.name());
  if (s_->low != DType::f32) {
    DTRAIN_LOG(info, "precision: " << cfg.precision << ", parameters between their uses in "
                     << (s_->packed ? "16-bit words" : "the fp32 arena")
                     << (cfg.zero == 3 ? ", this rank's ZeRO 3 pieces only" : "") << " (--param-storage "
                     << cfg.param_storage << ")");
  } else if (cfg.fp32_activations) {
    DTRAIN_LOG(warn, "--fp32-activations has no effect with --precision fp32");
  }
  const TrainConfig defaults;
  if (cfg.precision != "fp16" && (cfg.loss_scale != defaults.loss_scale ||
                                  cfg.loss_scale_window != defaults.loss_scale_window ||
                                  cfg.min_loss_scale != defaults.min_loss_scale)) {
    DTRAIN_LOG(warn, "--loss-scale, --loss-scale-window and --min-loss-scale have no effect with --precision "
                     << cfg.precision << " (loss scaling is for fp16)");
  }
  if (s_->grid.pp_size() == 1 && cfg.schedule != defaults.schedule) {
    DTRAIN_LOG(warn, "--schedule " << cfg.schedule << " has no effect without a pipeline (--pp 1)");
  }
  if (s_->grid.dp_size() == 1 && cfg.zero > 0) {
    DTRAIN_LOG(warn, "--zero " << cfg.zero << " has no effect with one data-parallel rank (nothing to shard over)");
  }
  if (cfg.eval_only && cfg.save_every != defaults.save_every) {
    DTRAIN_LOG(warn, "--save-every has no effect with --eval-only (it trains nothing)");
  }
  if (cfg.eval_only && !cfg.metrics.empty()) {
    DTRAIN_LOG(warn, "--metrics has no effect with --eval-only (it logs no training step; the log has the "
                     "validation loss)");
  }
  if (cfg.save_dir.empty() && cfg.keep != defaults.keep) {
    DTRAIN_LOG(warn, "--keep has no effect without --save-dir");
  }
  const char* peak_from = s_->peak_flops_given                   ? "DTRAIN_PEAK_FLOPS "
                          : s_->dev.kind() == DeviceKind::cpu ? "measured SGEMM "
                                                              : "measured GEMM ";
  DTRAIN_LOG(info, "peak: " << peak_from << s_->peak_flops_per_rank / 1e9
                   << " GFLOP/s per rank (the MFU denominator)");
  // Resolved again now that the save directory is claimed: a run that wrote into it until a
  // moment ago may have left a newer checkpoint since set-up chose between the file and one.
  const std::string from = ckpt::resolve_resume(world, cfg.resume, cfg.save_dir);
  DTRAIN_CHECK(!from.empty() || s_->resume_from.empty(), Errc::io,
               "checkpoint " << s_->resume_from << " went away during the set-up");
  if (!from.empty()) load_checkpoint(from);
  if (cfg.eval_only && from.empty() && cfg.init_from.empty()) {
    DTRAIN_LOG(warn, "--eval-only: no checkpoint to evaluate"
                     << (cfg.resume == "none"    ? " (--resume none)"
                         : cfg.save_dir.empty() ? ""
                                                : " in --save-dir '" + cfg.save_dir + "'")
                     << " and no --init-from: evaluating freshly initialised weights");
  }
  s_->metrics.keep();  // the set-up is done: a metrics file it created stays
}

Trainer::~Trainer() = default;

long Trainer::step() const { return s_->step; }
GptModel& Trainer::model() { return s_->model; }
parallel::HeldParameters Trainer::whole_parameters() {
  return parallel::HeldParameters(s_->residency());
}
optim::AdamW& Trainer::optimizer() { return s_->optimizer; }
optim::LossScaler& Trainer::loss_scaler() { return s_->scaler; }
ProcessGrid& Trainer::grid() { return s_->grid; }
bool Trainer::optimizer_sharded() const { return s_->cfg.zero >= 1; }

ckpt::Checkpointer& Trainer::State::checkpoints() {
  if (!checkpointer) {
    checkpointer = std::make_unique<ckpt::Checkpointer>(
        grid, model.parameters(), optimizer, cfg.zero, model.config());
  }
  return *checkpointer;
}

// One all-reduce: a signal seen by any rank stops every rank at the same point.
bool Trainer::State::agree_stop() {
  int flag = stop_requested() != 0 ? 1 : 0;
  world.all_reduce(&flag, &flag, 1, DType::i32, ReduceOp::max);
  stopped = flag != 0;
  return stopped;
}

bool Trainer::State::stop_before_micro_batch(long micro, long n) {
  if (!watch_stop) return false;
  if (stop_vote.valid()) {  // started before the micro-batch just done
    stop_vote.wait();
    if (stop_vote_flag != 0) {
      stopped = true;
      return true;
    }
  }
  if (micro + 1 < n) {  // read before the next one; the step's last starts none
    stop_vote_flag = stop_requested() != 0 ? 1 : 0;
    stop_vote = world.iall_reduce(&stop_vote_flag, &stop_vote_flag, 1, DType::i32, ReduceOp::max);
  }
  return false;
}

// Agreed over the ranks: this one may not have received the signal itself.
std::string Trainer::State::stop_cause() {
  const int sig = stop_requested();
  return sig ? "signal " + std::to_string(sig) + " received" : "a stop signal reached another rank";
}

std::string Trainer::save_checkpoint() {
  State& s = *s_;
  DTRAIN_CHECK(!s.cfg.save_dir.empty(), Errc::invalid_config, "saving a checkpoint needs --save-dir");
  s.check_not_held("save_checkpoint()");
  ckpt::CheckpointInfo info;
  info.step = s.step;
  const std::uint64_t global_batch = s.loader.plan().global_batch();
  // Counted across resumes, whatever their global batch; the next sample's index is this
  // run's (the data order is a function of it).
  info.consumed_samples = s.consumed_before + static_cast<std::uint64_t>(s.step - s.consumed_before_step) * global_batch;
  info.data_position = static_cast<std::uint64_t>(s.step) * global_batch;
  info.run_config = s.cfg.to_ini();
  info.data_fingerprint = s.data_fingerprint;
  if (s.last_val_step == s.step) info.val_loss = s.last_val_loss;
  if (s.scaler.enabled()) {
    info.loss_scale = s.scaler.scale();
    info.loss_scale_clean_steps = s.scaler.clean_steps_in_a_row();
    info.loss_scale_skipped_steps = s.scaler.skipped_steps();
  }
  // Each rank writes what it holds: ZeRO 3 its pieces, mixed precision its fp32 masters
  // (not the rounded arena), so nothing is gathered and the parameters stay as they are.
  Stopwatch watch;
  const std::string path = s.checkpoints().save(s.cfg.save_dir, info, s.cfg.keep);
  s.last_saved_step = s.step;
  DTRAIN_LOG(info, "checkpoint: wrote " << path << " (step " << s.step << ", " << watch.seconds() << " s)");
  return path;
}

void Trainer::load_checkpoint(const std::string& path) {
  State& s = *s_;
  s.check_not_held("load_checkpoint()");
  Stopwatch watch;
  // Each rank reads what it holds (ZeRO 3 its pieces; mixed precision its masters, which
  // the load rounds into the parameters it updates); ZeRO 1/2 then share them, as after a step.
  // A unit a failed pass left held would keep stale values: drop every unit first.
  if (parallel::ParamResidency* r = s.residency()) r->release_all();
  const ckpt::CheckpointInfo info = s.checkpoints().load(path);
  if (s.optimizer.has_master_weights()) s.share_updated_parameters();
  // fp16 goes on from the saved loss scale; from a file without one (another precision) it
  // starts again from --loss-scale, as a new run's would (and as the C ABI's load does), so
  // that the state after a load does not depend on what came before it.
  if (s.scaler.enabled() && info.loss_scale > 0)
    s.scaler.set_scale(info.loss_scale, info.loss_scale_clean_steps, info.loss_scale_skipped_steps);
  else if (s.scaler.enabled())
    s.scaler.set_scale(s.scaler.config().initial_scale, 0);
  // What changes the run from here on, said only where there is a here: an evaluation, or a
  // checkpoint at or past --steps, trains nothing.
  if (!s.cfg.eval_only && info.step < s.cfg.steps) {
    // The data order is a function of the sample index, and step s starts at s x the global
    // batch: another global batch resumes elsewhere in it.
    const std::uint64_t batch = s.loader.plan().global_batch();
    const std::uint64_t expected = static_cast<std::uint64_t>(info.step) * batch;
    if (info.data_position != expected) {
      const bool again = expected < info.data_position;
      DTRAIN_LOG(warn, "checkpoint " << path << " was at sample " << info.data_position << "; at this run's global batch of "
                       << batch << " sequences step " << info.step << " starts at sample " << expected << ": samples "
                       << std::min(expected, info.data_position) << ".."
                       << std::max(expected, info.data_position) - 1
                       << (again ? " are drawn again" : " are skipped"));
    }
    warn_if_run_differs(path, info, s.cfg, s.data_fingerprint, s.checkpoints().adamw_changes(info));
  }
  s.consumed_before = info.consumed_samples;
  s.consumed_before_step = info.step;
  s.step = info.step;
  s.start_step = info.step;
  s.last_saved_step = info.step;
  s.last_val_step = std::isfinite(info.val_loss) ? info.step : -1;
  s.last_val_loss = info.val_loss;
  DTRAIN_LOG(info, "checkpoint: resumed from " << path << " at step " << info.step << " ("
                   << watch.seconds() << " s)");
}
const std::vector<double>& Trainer::loss_history() const { return s_->losses; }
double Trainer::last_grad_norm() const { return s_->last_grad_norm; }

double Trainer::train_step() {
  State& s = *s_;
  s.check_not_held("train_step()");
  ParameterStore& params = s.model.parameters();
  // Gradients averaged over the global batch: identical to one rank training on all of it.
  const double loss = s.fixed_order ? s.sync_gradients_fixed_order() : s.sync_gradients_bucketed();
  if (s.stopped) return loss;  // part-way, inside run(): nothing is updated
  s.dev.trim_memory(Device::Trim::unused);  // spare memory this step did not take goes back
  s.check_finite("loss", loss);
  s.last_lr = s.schedule.at(s.step);
  s.last_loss_scale = s.scaler.scale();
  const float unscale = s.scaler.inverse_scale();  // of this step's seed (1 unless fp16)
  // Mixed precision: the reduced gradients in the 16-bit format (fp16: beyond 65504 -> inf).
  if (s.low != DType::f32) round_segments(s.dev, params.grads(), s.gradient_segments_to_round(), s.low);
  if (!s.apply_overflow_check()) {
    // Skipped: the batch is consumed and the step counter (hence the LR schedule) moves on;
    // parameters, moments and the optimiser's own step count stay as they were.
    s.last_grad_norm = std::numeric_limits<double>::quiet_NaN();
    ++s.step;
    s.losses.push_back(loss);
    return loss;
  }
  s.last_grad_norm = s.gradient_norm() * static_cast<double>(unscale);
  s.check_finite("gradient norm", s.last_grad_norm);  // a finite loss can still have inf gradients
  const float clip = optim::clip_factor(s.last_grad_norm, s.cfg.clip_grad) * unscale;
  if (s.gather) s.gather->drop_unheld();
  s.optimizer.step(params.params(), params.grads(), static_cast<float>(s.last_lr), clip);
  s.share_updated_parameters();
  ++s.step;
  s.losses.push_back(loss);
  return loss;
}

// The validation set is --eval-batches global batches of the val split, each split over the
// DP ranks and micro-batches as a step's samples are: the same sequences, so the same loss
// (to rounding), whatever the layout.
double Trainer::evaluate() {
  State& s = *s_;
  const auto held = s.hold_parameters_if_they_fit();  // one widening for all the batches
  const BatchPlan& plan = s.loader.plan();
  double total = 0;
  long done = 0;  // eval batches x micro-steps may pass INT_MAX
  bool stop = false;
  // A long pass (many --eval-batches of a large model) says how far it is, once a minute.
  constexpr double kReportSeconds = 60;
  Stopwatch since_start;
  double next_report = kReportSeconds;
  for (int b = 0; b < s.cfg.eval_batches && !stop; ++b) {
    for (int micro = 0; micro < plan.accum_steps; ++micro, ++done) {
      // Checked per micro-batch: one global batch of a large model may take minutes.
      if (s.world.rank() == 0 && since_start.seconds() >= next_report) {
        DTRAIN_LOG(info, "eval: " << b << " of " << s.cfg.eval_batches << " batches"
                         << (plan.accum_steps > 1 ? " and " + std::to_string(micro) + " of " +
                                                        std::to_string(plan.accum_steps) + " micro-batches"
                                                  : std::string())
                         << " in " << static_cast<long>(since_start.seconds()) << " s");
        next_report = since_start.seconds() + kReportSeconds;
      }
      // Preemption inside run(): between micro-batches, counted over all the batches; with
      // pipeline stages, whose micro-batches overlap, between batches.
      if (s.watch_stop) {
        stop = s.pipeline ? micro == 0 && s.agree_stop()
                          : s.stop_before_micro_batch(static_cast<long>(b) * plan.accum_steps + micro,
                                                      static_cast<long>(s.cfg.eval_batches) * plan.accum_steps);
      }
      if (stop) break;
      const std::uint64_t first = plan.first_sample(static_cast<std::uint64_t>(b), micro);
      if (s.pipeline) {
        s.loader.load(Split::val, first, s.tokens.as<std::int32_t>(), s.targets.as<std::int32_t>());
        total += s.pipeline->forward_only(s.tokens.as<std::int32_t>(), s.targets.as<std::int32_t>());
      } else {
        total += s.forward_micro(Split::val, first);
      }
    }
  }
  if (s.pipeline) s.grid.pp().broadcast(&total, &total, 1, DType::f64, s.grid.pp_size() - 1);
  total = done > 0 ? total / done : std::numeric_limits<double>::quiet_NaN();
  Communicator& dp = s.grid.dp();
  if (dp.size() > 1) dp.all_reduce(&total, &total, 1, DType::f64, ReduceOp::avg);
  return total;
}

TrainSummary Trainer::run() {
  State& s = *s_;
  TrainSummary sum;
  sum.entropy_rate = s.source->entropy_rate();
  sum.memory = s.memory;
  // This run's first step: where a resume, train_step() calls or an earlier run() left off
  // (its timings, bubbles and summary count from here).
  s.start_step = s.step;
  s.busy_sum = s.span_sum = 0;
  sum.start_step = s.start_step;
  const long skipped_before = s.scaler.skipped_steps();
  sum.final_loss = std::numeric_limits<double>::quiet_NaN();  // until a step is trained
  StopSignalScope signals;  // SIGTERM/SIGUSR1 only set a flag until run() returns
  // A stop requested before run() (a signal during the program's set-up, under its own
  // StopSignalScope) is acted on; run() consumes it, so a later run() starts clean.
  s.stopped = false;
  s.watch_stop = true;
  struct Unwatch {  // train_step() and evaluate() outside run() neither poll nor stop
    State& s;
    ~Unwatch() {
      s.watch_stop = false;
      s.stopped = false;
      clear_stop_request();
    }
  } unwatch{s};
  // A signal after the run's last look at it (during a final evaluation or save, or before a
  // run with nothing to train) still stops what the program does after the run (generation):
  // agreed before Unwatch drops it, so that the program exits as preempted.
  // A stop of a run that saved nothing (a resumed run stopped during its set-up) writes
  // `latest` anew all the same: the job script tells by it that the ranks stopped with a
  // checkpoint where SLURM reports their signal instead of status 3.
  const auto stop_at_the_end = [&] {
    if (!s.stopped && s.agree_stop())
      DTRAIN_LOG(info, s.stop_cause() << " at the end of the run (at step " << s.step << "): stopping");
    sum.stopped_by_signal = s.stopped;
    sum.finished = !s.cfg.eval_only && s.step >= s.cfg.steps && s.last_val_step == s.step;
    if (s.stopped && !s.cfg.save_dir.empty() && !s.cfg.eval_only && sum.last_checkpoint.empty())
      s.checkpoints().republish_latest(s.cfg.save_dir);
  };
  if (s.cfg.eval_only) {
    sum.final_val_loss = evaluate();
    if (!s.stopped) s.check_finite_val_loss(sum.final_val_loss);
    sum.stopped_by_signal = s.stopped;
    if (s.stopped)
      DTRAIN_LOG(warn, "eval: stopped by a signal before the validation pass finished (its "
                       "micro-batches so far: val loss " << sum.final_val_loss << ")");
    else
      DTRAIN_LOG(info, "eval: val loss " << shortest_text(sum.final_val_loss));  // every digit it has
    stop_at_the_end();
    return sum;
  }
  if (s.step > 0 && s.step >= s.cfg.steps) {
    DTRAIN_LOG(info, "nothing to train: the run is at step " << s.step << " and --steps is "
                     << s.cfg.steps);
    if (s.step == s.cfg.steps && s.last_val_step != s.step) {
      // The run stopped during its last step's evaluation (or was trained by train_step()):
      // the final validation loss is still owed.
      const double val = evaluate();
      if (!s.stopped) {
        s.check_finite_val_loss(val);
        s.last_val_step = s.step;
        s.last_val_loss = val;
        DTRAIN_LOG(info, "eval: val loss " << shortest_text(val) << " at step " << s.step
                         << " (the evaluation the run's last step did not finish)");
      } else {
        DTRAIN_LOG(info, s.stop_cause() << ": stopping during the evaluation step " << s.step
                         << " still owes");
      }
    }
    if (s.last_val_step == s.step) sum.final_val_loss = s.last_val_loss;
    // Steps trained by train_step() are saved as a run's would be.
    if (!s.cfg.save_dir.empty() && s.last_saved_step != s.step) sum.last_checkpoint = save_checkpoint();
    stop_at_the_end();
    sum.steps = s.step;
    return sum;
  }
  Progress progress(s.start_step, s.cfg.steps, s.tokens_per_step(), s.model.flops_per_token(),
                    s.peak_flops_per_rank * s.world.size(), sum.entropy_rate);
  Stopwatch loop;
  double timed_seconds = 0;  // steps after the first (which pays one-time costs)
  std::uint64_t allocations_before = 0;
  double exposed = 0;
  if (s.agree_stop()) {
    DTRAIN_LOG(info, "a stop signal arrived before the first step: stopping at step " << s.step);
  }
  while (!s.stopped && s.step < s.cfg.steps) {
    Stopwatch watch;
    const double waited_before = s.comm_wait_seconds();
    const double loss = train_step();
    s.dev.synchronize();  // a GPU may still be running the step's last kernels
    if (s.stopped) {
      DTRAIN_LOG(info, s.stop_cause() << ": stopping during step " << s.step + 1
                       << " (its micro-batches so far are dropped; the run is at step " << s.step << ")");
      break;
    }
    sum.final_loss = loss;
    const double step_s = watch.seconds();
    if (s.step == s.start_step + 1) {
      if (s.residency()) s.count_param_peaks();  // (the same on every rank: the model's layout)
      allocations_before = AlignedBuffer::allocation_count();
    } else {
      timed_seconds += step_s;
      exposed += s.comm_wait_seconds() - waited_before;
    }
    // A stop after the step, or during its evaluation, still logs the step: it is the one the
    // checkpoint holds, and a resumed run's metrics go on from the next.
    const bool stop_after_step = s.agree_stop();
    const bool last = s.step == s.cfg.steps;
    const bool eval_due = last || (s.cfg.eval_every > 0 && s.step % s.cfg.eval_every == 0);
    double val = -1;
    if (eval_due && !stop_after_step) val = evaluate();
    if (eval_due && !s.stopped) s.check_finite_val_loss(val);
    if (eval_due && !s.stopped) {
      sum.final_val_loss = val;
      s.last_val_step = s.step;
      s.last_val_loss = val;
    } else {
      val = -1;  // not evaluated, or stopped part-way
    }
    if (eval_due || s.step % s.cfg.log_every == 0) {  // eval_due: also the last step
      StepMetrics m = progress.metrics(s.step, loss, val, s.last_lr, s.last_grad_norm, step_s,
                                       loop.seconds());
      m.memory_per_rank = s.memory_per_rank;
      if (s.scaler.enabled()) {
        m.loss_scale = s.last_loss_scale;
        m.skipped_steps = s.scaler.skipped_steps();
      }
      s.metrics.write(m);
      if (s.world.rank() == 0) DTRAIN_LOG(info, progress.line(m, s.memory.total(), loop.seconds()));
      if (s.pipeline) s.log_pipeline_bubble(false);
    }
    if (s.stopped) {
      DTRAIN_LOG(info, s.stop_cause() << (stop_after_step ? ": stopping after step "
                                                           : ": stopping during the evaluation after step ")
                                      << s.step);
      break;
    }
    if (s.cfg.save_every > 0 && s.step % s.cfg.save_every == 0) {
      sum.last_checkpoint = save_checkpoint();
      // A signal during the save: stop on the checkpoint just written, not after a step more
      // and a second save (the step's only micro-batch polls nothing before it starts).
      if (s.agree_stop()) {
        DTRAIN_LOG(info, s.stop_cause() << ": stopping after step " << s.step << " (during its checkpoint)");
        break;
      }
    }
  }
  // The summary's val loss is the last step's, if it was evaluated (a stop may drop that).
  if (s.last_val_step != s.step) sum.final_val_loss = -1;
  if (!s.cfg.save_dir.empty() && s.last_saved_step != s.step) sum.last_checkpoint = save_checkpoint();
  stop_at_the_end();
  if (s.stopped && s.cfg.save_dir.empty()) {
    DTRAIN_LOG(warn, "stopped by a signal without --save-dir: nothing was saved");
  }
  if (s.pipeline && s.step > s.start_step + 1) s.log_pipeline_bubble(true);
  sum.steps = s.step;
  sum.skipped_steps = s.scaler.skipped_steps();
  sum.seconds = loop.seconds();
  if (s.step > s.start_step + 1) {
    sum.tokens_per_s =
        static_cast<double>(s.tokens_per_step()) * (s.step - s.start_step - 1) / timed_seconds;
    sum.mfu = progress.mfu(sum.tokens_per_s);
    sum.allocations_after_first_step = AlignedBuffer::allocation_count() - allocations_before;
    sum.exposed_comm_seconds = exposed;
    sum.timed_step_seconds = timed_seconds;
    if (s.grid.dp_size() > 1) {
      DTRAIN_LOG(info, "data-parallel communication not hidden by compute: "
                           << 1e3 * exposed / (s.step - s.start_step - 1) << " ms/step, "
                           << 100 * exposed / timed_seconds << "% of the step time");
    }
  }
  DTRAIN_LOG(info, progress.summary(sum.steps, sum.final_loss, sum.final_val_loss, sum.seconds,
                                    sum.tokens_per_s, sum.mfu, s.memory.total()));
  if (s.scaler.enabled()) {
    DTRAIN_LOG(info, "fp16: " << sum.skipped_steps - skipped_before << " of " << sum.steps - sum.start_step
                     << " steps skipped on gradient overflow; loss scale now " << s.scaler.scale());
  }
  const double mib = 1024.0 * 1024.0;
  std::string in_pass;  // ZeRO 3 and 16-bit storage hold whole units in fp32 during a pass
  if (s.residency()) {
    in_pass = ", peak parameters in a pass " +
              std::to_string(static_cast<double>(s.peak_param_bytes()) / mib);
  }
  DTRAIN_LOG(info, "memory of rank " << s.world.rank() << " (MiB): parameters " << s.memory.params / mib
                   << ", gradients " << s.memory.grads / mib << ", optimizer " << s.memory.optimizer / mib
                   << ", activations " << s.memory.activations / mib << in_pass);
  return sum;
}

int first_failed_rank(Communicator& world, bool failed) {
  int candidate = failed ? world.rank() : std::numeric_limits<int>::max();
  world.all_reduce(&candidate, &candidate, 1, DType::i32, ReduceOp::min);
  return candidate == std::numeric_limits<int>::max() ? -1 : candidate;
}

}  // namespace dtrain::train
