#include "pipeline_config.hpp"

#include <string>

#include "dtrain/core/error.hpp"
#include "dtrain/parallel/pipeline_partition.hpp"
#include "guard.hpp"
#include "model.hpp"

namespace dtrain::capi {
namespace {

// config->pipeline_layers ("3,2,2,1") as the layer counts of the pipeline's `chunks` chunks,
// checked against the model's layers.
std::vector<int> layer_counts(const std::string& spec, int chunks, int layers) {
  std::vector<int> counts;
  try {
    counts = parallel::parse_pipeline_layers(spec);
  } catch (const Error&) {
    fail(DT_ERR_INVALID_CONFIG, "config->pipeline_layers must be a comma-separated list of layer "
                                "counts, got '" + spec + "'");
  }
  if (static_cast<int>(counts.size()) != chunks)
    fail(DT_ERR_INVALID_CONFIG, "config->pipeline_layers lists " + std::to_string(counts.size()) +
                                    " chunks, the pipeline has pp x virtual_stages = " + std::to_string(chunks));
  long sum = 0;
  for (int c : counts) {
    if (c < 1) fail(DT_ERR_INVALID_CONFIG, "config->pipeline_layers: every chunk needs at least one layer");
    sum += c;
  }
  if (sum != layers)
    fail(DT_ERR_INVALID_CONFIG, "config->pipeline_layers adds up to " + std::to_string(sum) +
                                    " layers, the model has " + std::to_string(layers));
  return counts;
}

}  // namespace

PipelineSettings pipeline_settings(const dt_gpt_config_t* config, int pp) {
  const bool has = covers(config, offsetof(dt_gpt_config_t, virtual_stages), sizeof(int));
  const char* schedule = has ? config->schedule : nullptr;
  const int micro = has ? config->micro_batches : 0, virt = has ? config->virtual_stages : 0;
  const char* layers =
      covers(config, offsetof(dt_gpt_config_t, pipeline_layers), sizeof(const char*)) ? config->pipeline_layers : nullptr;
  PipelineSettings p;
  if (pp == 1) {
    if (schedule || micro != 0 || virt != 0 || layers)
      fail(DT_ERR_INVALID_CONFIG, "config->schedule, micro_batches, virtual_stages and pipeline_layers "
                                  "need pipeline parallelism: dt_model_create_gpt_grid on a grid with pp > 1");
    return p;
  }
  const std::string name = schedule ? schedule : "1f1b";
  if (name == "gpipe") p.schedule = parallel::ScheduleKind::gpipe;
  else if (name == "interleaved") p.schedule = parallel::ScheduleKind::interleaved;
  else if (name != "1f1b")
    fail(DT_ERR_INVALID_CONFIG, "config->schedule must be 1f1b, gpipe or interleaved, got '" + name + "'");
  if (micro < 0) fail(DT_ERR_INVALID_CONFIG, "config->micro_batches must be >= 0 (0: the grid's pp)");
  if (virt < 0) fail(DT_ERR_INVALID_CONFIG, "config->virtual_stages must be >= 0 (0: 1)");
  p.micro_batches = micro ? micro : pp;
  p.virtual_stages = virt ? virt : 1;
  if (p.virtual_stages > 1 && p.schedule != parallel::ScheduleKind::interleaved)
    fail(DT_ERR_INVALID_CONFIG, "config->virtual_stages > 1 needs config->schedule \"interleaved\"");
  if (p.schedule == parallel::ScheduleKind::interleaved && p.micro_batches % pp != 0)
    fail(DT_ERR_INVALID_CONFIG, "config->schedule \"interleaved\" needs micro_batches (" +
                                    std::to_string(p.micro_batches) + ") to be a multiple of the grid's pp (" +
                                    std::to_string(pp) + ")");
  if (config->layers < static_cast<long long>(pp) * p.virtual_stages)
    fail(DT_ERR_INVALID_CONFIG, "config->layers (" + std::to_string(config->layers) +
                                    ") is fewer than the pipeline's stages x virtual_stages (" +
                                    std::to_string(static_cast<long long>(pp) * p.virtual_stages) +
                                    "): every chunk needs a layer");
  if (layers) p.layer_counts = layer_counts(layers, pp * p.virtual_stages, config->layers);
  return p;
}

std::vector<GptStage> stage_chunks(const GptConfig& gc, const ProcessGrid* layout,
                                           const PipelineSettings& p) {
  if (!layout || layout->pp_size() == 1) return {GptStage{}};
  const int N = layout->pp_size(), s = layout->pp_rank(), V = p.virtual_stages;
  const auto pieces = parallel::partition_layers(gc.layers, N * V, p.layer_counts);
  const std::vector<int> slots = parallel::chunk_slots(p.schedule, N, s, p.micro_batches, V);
  std::vector<GptStage> chunks;
  for (int c = 0; c < V; ++c) {
    const parallel::LayerRange r = pieces[static_cast<std::size_t>(c * N + s)];
    chunks.push_back({r.first, r.count, s == 0 && c == 0, s == N - 1 && c == V - 1,
                      slots[static_cast<std::size_t>(c)]});
  }
  return chunks;
}

}  // namespace dtrain::capi
