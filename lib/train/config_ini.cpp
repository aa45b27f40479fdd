// TrainConfig::to_ini: the run's options as "key = value" lines (dtrain-gpt's option names),
// stored in every checkpoint so a file says how it was made.
#include <sstream>
#include <type_traits>

#include "core/number_text.hpp"
#include "dtrain/train/config.hpp"

namespace dtrain::train {
namespace {

// "key = value" lines; numbers in the fewest digits that read back the same (lr = 0.003).
class IniLines {
 public:
  template <class T>
  void operator()(const char* key, const T& value) {
    os_ << key << " = ";
    if constexpr (std::is_floating_point_v<T>) {
      os_ << shortest_text(value);
    } else {
      os_ << value;
    }
    os_ << "\n";
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

}  // namespace

std::string TrainConfig::to_ini() const {
  IniLines kv;
  kv("layers", layers);
  kv("heads", heads);
  kv("d-model", d_model);
  kv("seq-len", seq_len);
  kv("vocab", vocab);
  kv("tie-embeddings", tie_embeddings ? "true" : "false");
  kv("tp", tp);
  kv("pp", pp);
  kv("dp", dp);
  kv("zero", zero);
  kv("schedule", schedule);
  kv("virtual-stages", virtual_stages);
  kv("sequence-parallel", sequence_parallel ? "true" : "false");
  kv("bucket-mb", bucket_mb);
  kv("pipeline-layers", pipeline_layers);
  kv("micro-batch", micro_batch);
  kv("global-batch", global_batch);
  kv("lr", lr);
  kv("min-lr", min_lr);
  kv("warmup-steps", warmup_steps);
  kv("weight-decay", weight_decay);
  kv("clip-grad", clip_grad);
  kv("data", data);
  kv("val-data", val_data);
  if (!data.empty()) kv("val-fraction", val_fraction);  // the built-in corpus refuses it
  kv("steps", steps);
  kv("seed", seed);
  kv("precision", precision);
  kv("loss-scale", loss_scale);
  kv("loss-scale-window", loss_scale_window);
  kv("min-loss-scale", min_loss_scale);
  kv("deterministic", deterministic ? "true" : "false");
  kv("param-storage", param_storage);
  kv("fp32-activations", fp32_activations ? "true" : "false");
  kv("recompute", recompute ? "true" : "false");
  kv("init-from", init_from);
  return kv.str();
}

std::string TrainConfig::all_settings_ini() const {
  IniLines kv;
  if (data.empty()) kv("val-fraction", val_fraction);  // refused there, and so compared too
  kv("beta1", beta1);
  kv("beta2", beta2);
  kv("eps", eps);
  kv("device", device);
  kv("save-dir", save_dir);
  kv("save-every", save_every);
  kv("resume", resume);
  kv("keep", keep);
  kv("log-every", log_every);
  kv("metrics", metrics);
  kv("eval-only", eval_only ? "true" : "false");
  kv("eval-every", eval_every);
  kv("eval-batches", eval_batches);
  return to_ini() + kv.str();
}

}  // namespace dtrain::train
