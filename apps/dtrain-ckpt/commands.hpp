#pragma once
// The subcommands of dtrain-ckpt. Each returns the process exit status:
// 0 done (for verify: every checksum matches; for diff: the files are equal),
// 1 the check found a problem (a bad dataset; files that differ).
// Errors (a missing or unreadable file) throw dtrain::Error; main() turns them into 2.
#include <string>

namespace dtrain::ckpt {
class CheckpointFile;
}

namespace dtrain_ckpt {

// What keeps f from being a checkpoint this tool reads (format name, version, checksum
// algorithm); "" when nothing does.
std::string format_problem(const dtrain::ckpt::CheckpointFile& f);
// In a GPT's file (/model's sizes positive): the first tensor of the GPT /model describes that
// is missing, or a head that disagrees with tie_embeddings (0 or 1); "" when none.
std::string gpt_tensor_problem(const dtrain::ckpt::CheckpointFile& f);

int inspect(const std::string& file);
int verify(const std::string& file);
int diff(const std::string& a, const std::string& b);
int export_safetensors(const std::string& file, const std::string& out);
// A GPT's tensors as transformers' GPT2LMHeadModel: dir/model.safetensors and dir/config.json.
int export_hugging_face(const std::string& file, const std::string& dir);

}  // namespace dtrain_ckpt
