#pragma once
// A GPT's pipeline stages in the C ABI: the pipeline settings of a dt_gpt_config_t, checked
// by config field name, and the layer chunks a pipeline rank holds.
#include <vector>

#include "dtrain.h"
#include "dtrain/comm/process_grid.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/parallel/pipeline_schedule.hpp"

namespace dtrain::capi {

// Pipeline parallelism's settings of a config.
struct PipelineSettings {
  parallel::ScheduleKind schedule = parallel::ScheduleKind::one_f_one_b;
  int micro_batches = 1, virtual_stages = 1;
  std::vector<int> layer_counts;  // per chunk in pipeline order; empty: an even split
};

// config's pipeline settings for a grid with pp stages, checked (DT_ERR_INVALID_CONFIG naming
// the field) and with the defaults filled in (older callers' structs end before the fields);
// without stages they must keep their defaults.
PipelineSettings pipeline_settings(const dt_gpt_config_t* config, int pp);

// This pipeline rank's chunks of the model (chunk c = piece c * pp + stage of the layers, cut
// as config->pipeline_layers says or evenly), each with the activation slots the schedule
// keeps in flight; the whole model without stages (layout null or pp 1).
std::vector<GptStage> stage_chunks(const GptConfig& gc, const ProcessGrid* layout,
                                   const PipelineSettings& p);

}  // namespace dtrain::capi
