// One step's gradients: the forward/backward passes of every micro-batch with their
// data-parallel reduction (bucketed and overlapped, pipelined, or in a fixed order), the
// global norm, the fp16 overflow check, and sharing updated ZeRO pieces.
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "core/number_text.hpp"
#include "train/trainer_state.hpp"

namespace dtrain::train {

// Global gradient norm over everything the model holds across TP and (ZeRO) DP ranks, the
// same as a single rank's. A parameter replicated over the TP group counts once.
double Trainer::State::gradient_norm() {
  const ParameterStore& params = model.parameters();
  if (fixed_norm) {
    const bool all = fixed_order_whole();
    double sq = fixed_norm->sum_squares(params.grads(), all ? whole_arena : fixed_order->owned(), all);
    if (grid.tp_size() > 1) grid.tp().all_reduce(&sq, &sq, 1, DType::f64, ReduceOp::sum);
    if (grid.pp_size() > 1) grid.pp().all_reduce(&sq, &sq, 1, DType::f64, ReduceOp::sum);
    return std::sqrt(sq);
  }
  // One call for every range this rank counts: on a GPU one wait instead of one per tensor.
  dev.sum_squares_runs(params.grads(), norm_starts.data(), norm_lengths.data(),
                       norm_starts.size(), norm_sums.data());
  double sq = 0;
  for (double s : norm_sums) sq += s;
  if (cfg.zero >= 1) grid.dp().all_reduce(&sq, &sq, 1, DType::f64, ReduceOp::sum);
  if (grid.tp_size() > 1) grid.tp().all_reduce(&sq, &sq, 1, DType::f64, ReduceOp::sum);
  if (grid.pp_size() > 1) grid.pp().all_reduce(&sq, &sq, 1, DType::f64, ReduceOp::sum);
  return std::sqrt(sq);
}

// Loads one micro-batch of `split` into the reused token buffers and runs the forward pass.
double Trainer::State::forward_micro(Split split, std::uint64_t first_sample) {
  loader.load(split, first_sample, tokens.as<std::int32_t>(), targets.as<std::int32_t>());
  return model.forward(tokens.as<std::int32_t>(), targets.as<std::int32_t>(), cfg.micro_batch,
                       cfg.seq_len);
}

// Mean of the micro-batch losses of a step over the whole global batch.
double Trainer::State::average_over_dp(double loss_sum, int n_micro) {
  double loss = loss_sum / n_micro;
  if (grid.dp_size() > 1) grid.dp().all_reduce(&loss, &loss, 1, DType::f64, ReduceOp::avg);
  return loss;
}

// Tied embeddings: the first stage's wte and the last stage's copy get the sum of both
// gradients, so the two stay identical after the update.
void Trainer::State::reduce_tied_embedding() {
  if (grid.pp_size() == 1 || !cfg.tie_embeddings || !grid.in_embedding_group()) return;
  ParameterStore& params = model.parameters();
  const ParamInfo& w = params.at("wte");
  grid.embedding().all_reduce(params.grad(w), params.grad(w), w.numel, DType::f32, ReduceOp::sum);
}

// --pp > 1: the schedule runs every micro-batch of the step; then the tied embedding copies
// are summed and the data-parallel reduction runs over the stage's arena (not overlapped
// with backward: the embedding sum must come first, ZeRO-1 shards differ per stage).
double Trainer::State::sync_gradients_pipeline() {
  model.parameters().zero_grads();
  const int n_micro = accum();
  sync->begin(false);  // the backward hooks only accumulate
  double loss = run_pipeline(seed(1.0f / static_cast<float>(n_micro)), {});
  reduce_tied_embedding();
  sync->begin(grid.dp_size() > 1);
  sync->finish();  // launches every bucket
  loss = average_over_dp(loss, n_micro);
  grid.pp().broadcast(&loss, &loss, 1, DType::f64, grid.pp_size() - 1);  // the last stage's
  return loss;
}

// The step's micro-batches through the pipeline schedule (sum of their losses on the last
// stage), and the bubble timers of the steps after the first (which pays one-time costs).
double Trainer::State::run_pipeline(float dloss,
                                    const parallel::PipelineExecutor::BackwardDone& done) {
  const long s = step;
  const double loss = pipeline->run_step(
      [this, s](int mb, std::int32_t* tok, std::int32_t* tgt) {
        loader.load(Split::train, loader.plan().first_sample(s, mb), tok, tgt);
      },
      dloss, done);
  busy_last = pipeline->last_step_seconds() - pipeline->last_idle_seconds();
  span_last = pipeline->last_step_seconds();
  grid.pp().all_reduce(&span_last, &span_last, 1, DType::f64, ReduceOp::max);
  if (step > start_step) {
    busy_sum += busy_last;
    span_sum += span_last;
  }
  return loss;
}

// --pp > 1 with --deterministic: a stage's backwards run in micro-batch order, so each
// micro-batch's gradient joins the fixed-order sum over the data-parallel group as its
// backward ends; then the tied embedding copies are summed (a sum of two: order-free).
double Trainer::State::sync_gradients_pipeline_fixed_order() {
  ParameterStore& params = model.parameters();
  const int n_micro = accum();
  const double shares = static_cast<double>(n_micro) * grid.dp_size();  // may pass INT_MAX
  params.zero_grads();
  run_pipeline(seed(1.0f / static_cast<float>(shares)), [this, &params](int mb) {
    fixed_order->add(mb, params.grads());
    params.zero_grads();
  });
  finish_fixed_order_sum();
  reduce_tied_embedding();
  double loss = fixed_order->sum_losses(pipeline->last_losses().data()) / shares;
  grid.pp().broadcast(&loss, &loss, 1, DType::f64, grid.pp_size() - 1);  // the last stage's
  return loss;
}

// Rank 0 logs every stage's measured bubble, the share of the pipeline step's makespan it
// spent not computing (blocked on messages, or done and waiting for the slowest stage), for
// the last step or (whole_run) the steps after the first, next to the theory. Collective
// over the pipeline group.
void Trainer::State::log_pipeline_bubble(bool whole_run) {
  const double busy = whole_run ? busy_sum : busy_last;
  const double span = whole_run ? span_sum : span_last;
  const double mine = span > 0 ? 1 - busy / span : 0;
  stage_bubbles.resize(static_cast<std::size_t>(grid.pp_size()));
  grid.pp().all_gather(&mine, stage_bubbles.data(), 1, DType::f64);
  if (world.rank() != 0) return;
  std::string bubbles;
  char buf[32];
  for (double b : stage_bubbles) {
    std::snprintf(buf, sizeof buf, " %.3f", b);
    bubbles += buf;
  }
  const auto kind = parallel::parse_schedule_kind(cfg.schedule);
  DTRAIN_LOG(info, "pipeline: " << cfg.schedule << " bubble (idle / makespan) per stage"
                   << (whole_run ? " over the steps after the first:" : ":") << bubbles
                   << "; theory " << parallel::bubble_fraction(kind, grid.pp_size(), accum(),
                                                               cfg.virtual_stages)
                   << "; makespan " << span << " s" << (whole_run ? " in all" : ""));
}

// Forward/backward of every micro-batch, reducing buckets as backward produces them on the
// last micro-step. Returns the step's mean loss over the global batch.
double Trainer::State::sync_gradients_bucketed() {
  if (pipeline) return sync_gradients_pipeline();
  const int n_micro = accum();
  // ZeRO 2/3 hold no full gradient between micro-steps, so each one is reduced into the
  // pieces; otherwise only the last micro-step communicates.
  const bool every_micro = sync->mode() == parallel::GradReduction::shard;
  sync->zero_grads();
  double loss = 0;
  for (int micro = 0; micro < n_micro; ++micro) {
    if (stop_before_micro_batch(micro, n_micro)) return kStoppedPartWay;
    const bool last = micro == n_micro - 1;
    loss += forward_micro(Split::train, loader.plan().first_sample(step, micro));
    sync->begin(grid.dp_size() > 1 && (last || every_micro), last);
    model.backward(seed(1.0f / static_cast<float>(n_micro)));
    sync->finish();
  }
  return average_over_dp(loss, n_micro);
}

// --deterministic: each micro-batch's gradient alone, then the fixed-order sum.
double Trainer::State::sync_gradients_fixed_order() {
  if (pipeline) return sync_gradients_pipeline_fixed_order();
  ParameterStore& params = model.parameters();
  const int n_micro = accum();
  const double shares = static_cast<double>(n_micro) * grid.dp_size();  // may pass INT_MAX
  const float dloss = seed(1.0f / static_cast<float>(shares));
  for (int micro = 0; micro < n_micro; ++micro) {
    if (stop_before_micro_batch(micro, n_micro)) {
      hold_only_owned_gradients();  // as between steps
      return kStoppedPartWay;
    }
    clear_gradients(micro == 0);
    micro_losses[micro] = forward_micro(Split::train, loader.plan().first_sample(step, micro));
    model.backward(dloss);
    fixed_order->add(micro, params.grads());
  }
  finish_fixed_order_sum();
  return fixed_order->sum_losses(micro_losses.data()) / shares;
}

// --deterministic: zeroes the gradient arena for the next micro-batch. Between steps ZeRO
// 2/3 hold only their pieces (the rest was handed back), so at a step's first micro-batch
// the arena is handed back whole and restored (zeros; the CPU maps pages as backward
// touches them); later micro-batches find it held and zero it in place.
void Trainer::State::clear_gradients(bool hand_back) {
  ParameterStore& params = model.parameters();
  if (cfg.zero >= 2 && hand_back) {
    dev.discard(params.grads(), params.bytes());
    dev.restore(params.grads(), params.bytes());
  } else {
    params.zero_grads();
  }
}

// --deterministic, after the last micro-batch: the sum lands in the whole arena, or in
// this rank's pieces only (the rest is never read: the optimiser updates the pieces).
void Trainer::State::finish_fixed_order_sum() {
  float* grads = model.parameters().grads();
  if (fixed_order_whole()) {
    fixed_order->sum(grads);
    return;
  }
  hold_only_owned_gradients();
  fixed_order->sum_owned(grads);
}

// --deterministic, ZeRO 2/3: all but this rank's pieces of the gradient arena handed back.
void Trainer::State::hold_only_owned_gradients() {
  if (cfg.zero < 2 || fixed_order_whole()) return;
  float* grads = model.parameters().grads();
  dev.discard(grads, model.parameters().bytes());
  for (const parallel::Range& r : fixed_order->owned())
    dev.restore(grads + r.first, sizeof(float) * (r.second - r.first));
}

// ZeRO 1/2: every rank's updated pieces to all. ZeRO 3 keeps the pieces; passes gather them.
void Trainer::State::share_updated_parameters() {
  if (gather || cfg.zero == 0) return;
  if (packed) {  // 16-bit storage: the words are what the ranks hold
    if (sync) {
      sync->all_gather_words(packed->words(), packed->format());
    } else {
      fixed_order->all_gather_words(packed->words(), packed->format());
    }
    return;
  }
  float* params = model.parameters().params();
  // Rounded pieces are exact 16-bit values: they travel in half the bytes.
  const DType wire = optimizer.has_master_weights() ? optimizer.low_precision() : DType::f32;
  if (sync) {
    sync->all_gather(params, wire);
  } else {
    fixed_order->all_gather(params, wire);
  }
}

void Trainer::State::check_finite(const char* what, double value) {
  // No collective needed: the step's loss and gradient norm are already every rank's
  // (all-reduced over DP, over TP inside the cross-entropy, broadcast over PP; the norm's
  // sum of squares over every group), and a NaN or inf in any part of a sum leaves it
  // non-finite on every rank, whatever the order of the terms.
  if (std::isfinite(value)) return;
  std::ostringstream msg;
  msg << "training diverged: the " << what << " of step " << step + 1 << " is " << shortest_text(value)
      << "; stopped before updating, so no checkpoint holds it (a smaller --lr, or --clip-grad, "
         "may help)";
  // A checkpoint of the parameters that gave it is no good place to go on from.
  if (last_saved_step == step && step > 0)
    msg << "; the checkpoint of step " << step << " holds the parameters that gave this " << what << ": "
        << "resume from an earlier one (--resume FILE)";
  throw AgreedError(Errc::invalid_config, msg.str());
}

void Trainer::State::check_finite_val_loss(double val) {
  // Every rank's (averaged over DP after the stages' broadcast). The training loss of the
  // last steps was finite, so their updates broke the parameters.
  if (std::isfinite(val)) return;
  std::ostringstream msg;
  if (cfg.eval_only) {
    msg << "the validation loss is " << shortest_text(val) << ": the parameters of step " << step << " are not finite";
  } else {
    msg << "training diverged: the validation loss after step " << step << " is " << shortest_text(val)
        << ", so its parameters are not finite; they are not saved (a smaller --lr, or --clip-grad, "
           "may help)";
  }
  throw AgreedError(Errc::invalid_config, msg.str());
}

// fp16: whether this step's update is to be applied. Every rank checks the gradients it
// holds (its optimiser segments), all agree on one flag, and the scaler decides from it:
// skip and halve, or apply (and maybe grow). An overflow at the minimum scale throws on
// every rank alike. Without loss scaling there is nothing to check.
bool Trainer::State::apply_overflow_check() {
  if (!scaler.enabled()) return true;
  const float* grads = model.parameters().grads();
  const bool overflow = agree_overflow(world, segments_nonfinite(dev, grads, optimizer.segments()));
  const double used = scaler.scale();
  bool apply = false;
  try {
    apply = scaler.update(overflow);
  } catch (const Error& e) {  // overflow at the minimum scale: the flag was agreed
    throw AgreedError(e.code(), e.what());
  }
  if (!apply && world.rank() == 0) {
    DTRAIN_LOG(warn, "fp16: gradients overflowed at loss scale " << used << ": step " << step + 1
                     << " skipped, loss scale now " << scaler.scale());
  }
  return apply;
}

}  // namespace dtrain::train
