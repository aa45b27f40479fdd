#include "ckpt/initial_weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "ckpt/json_value.hpp"
#include "ckpt/safetensors_file.hpp"
#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/ckpt/checksum.hpp"
#include "dtrain/ckpt/file.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::ckpt {
namespace {

using Shape = std::vector<std::uint64_t>;

// A file's tensors under the model's names, in the model's layout (linear weights [out, in]).
class Source {
 public:
  virtual ~Source() = default;
  virtual std::optional<Shape> shape(const std::string& name) const = 0;  // none: absent
  virtual std::vector<float> read(const std::string& name) const = 0;
  virtual int layers() const = 0;                    // 1 + the highest block index named
  virtual std::optional<long> heads() const = 0;     // where the file records it
  virtual std::string kind() const = 0;              // "safetensors, ...", "dtrain checkpoint"
};

// "h.<i>.": the block index of a model name, -1 for a name outside the blocks.
int block_index(const std::string& name) {
  if (name.compare(0, 2, "h.") != 0) return -1;
  std::size_t end = 2;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == 2 || end - 2 > 6 || end >= name.size() || name[end] != '.') return -1;
  return std::stoi(name.substr(2, end - 2));
}

bool is_linear_weight(const std::string& name) {
  for (const char* suffix : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    const std::size_t n = std::strlen(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0 && block_index(name) >= 0) return true;
  }
  return false;
}

class SafetensorsSource : public Source {
 public:
  SafetensorsSource(const std::string& path, const GptConfig& model) : file_(path) {
    for (const SafetensorsTensor& t : file_.tensors()) {
      std::string name = t.name.compare(0, 12, "transformer.") == 0 ? t.name.substr(12) : t.name;
      if (name == "wte.weight" || name == "wpe.weight") name.resize(3);  // Hugging Face's names
      DTRAIN_CHECK(by_name_.emplace(name, &t).second, Errc::invalid_config,
                   "'" << path << "' holds tensor '" << name << "' twice (as '" << by_name_.at(name)->name
                       << "' and '" << t.name << "')");
      layers_ = std::max(layers_, block_index(name) + 1);
    }
    // Conv1D keeps c_attn's weight as [C, 3C]; a linear layer as [3C, C].
    if (const SafetensorsTensor* c = find("h.0.attn.c_attn.weight"))
      transposed_ = c->shape.size() == 2 && c->shape[1] == 3 * c->shape[0];
    read_recorded_heads(path, model);
  }

  std::optional<Shape> shape(const std::string& name) const override {
    const SafetensorsTensor* t = find(name);
    if (!t) return std::nullopt;
    Shape s = t->shape;
    if (transposes(name, s)) std::reverse(s.begin(), s.end());
    return s;
  }
  std::vector<float> read(const std::string& name) const override {
    const SafetensorsTensor& t = *find(name);
    std::vector<float> v = file_.read(t);
    if (!transposes(name, t.shape)) return v;
    const std::uint64_t rows = t.shape[0], cols = t.shape[1];  // [in, out] -> [out, in]
    std::vector<float> out(v.size());
    constexpr std::uint64_t kTile = 64;  // in tiles, so that neither side strides through memory
    for (std::uint64_t r0 = 0; r0 < rows; r0 += kTile)
      for (std::uint64_t c0 = 0; c0 < cols; c0 += kTile)
        for (std::uint64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
          for (std::uint64_t c = c0; c < std::min(cols, c0 + kTile); ++c) out[c * rows + r] = v[r * cols + c];
    return out;
  }
  int layers() const override { return layers_; }
  std::optional<long> heads() const override { return heads_; }
  std::string kind() const override {
    return transposed_ ? "safetensors, Hugging Face GPT-2 layout (linear weights [in, out])"
                       : "safetensors (linear weights [out, in])";
  }

 private:
  const SafetensorsTensor* find(const std::string& name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }
  bool transposes(const std::string& name, const Shape& s) const {
    return transposed_ && s.size() == 2 && is_linear_weight(name);
  }

  // dtrain-ckpt export writes /model's attributes into the metadata; Hugging Face keeps the
  // model's settings in config.json next to the weights.
  void read_recorded_heads(const std::string& path, const GptConfig& model) {
    for (const auto& [key, value] : file_.metadata())
      if (key == "heads") {
        char* end = nullptr;
        heads_ = std::strtol(value.c_str(), &end, 10);
        DTRAIN_CHECK(end && *end == '\0' && !value.empty(), Errc::corrupt_data,
                     "'" << path << "': its metadata 'heads' is '" << value << "', not a number");
        return;
      }
    const std::filesystem::path config = std::filesystem::path(path).parent_path() / "config.json";
    std::ifstream in(config);
    if (!in) return;
    std::stringstream text;
    text << in.rdbuf();
    const std::string where = "'" + config.string() + "'";
    const json::Value root = json::parse(text.str(), where);
    DTRAIN_CHECK(root.kind == json::Value::Kind::object, Errc::corrupt_data, where << " is not a JSON object");
    check_gpt2_settings(root, where, model);
    if (const json::Value* n = root.find("n_head")) heads_ = static_cast<long>(json::to_u64(*n, where + ": n_head"));
  }

  // What dtrain's GPT computes: tanh GELU, LayerNorm eps 1e-5, a 4C hidden layer, attention
  // scaled by 1/sqrt(head size). Another setting would load and compute something else.
  static void check_gpt2_settings(const json::Value& c, const std::string& where, const GptConfig& model) {
    auto refuse = [&](const std::string& what) {
      DTRAIN_FAIL(Errc::invalid_config, where << " describes a model dtrain's GPT does not compute: " << what);
    };
    if (const json::Value* t = c.find("model_type"); t && t->kind == json::Value::Kind::string && t->text != "gpt2")
      refuse("model_type \"" + t->text + "\", not \"gpt2\"");
    if (const json::Value* a = c.find("activation_function"); a && a->kind == json::Value::Kind::string &&
        a->text != "gelu_new" && a->text != "gelu_pytorch_tanh" && a->text != "gelu_fast")
      refuse("activation_function \"" + a->text + "\" (dtrain's GELU is the tanh form, \"gelu_new\")");
    if (const json::Value* e = c.find("layer_norm_epsilon"); e && std::fabs(json::to_double(*e, where) - 1e-5) > 1e-12)
      refuse("layer_norm_epsilon " + e->text + " (dtrain's is 1e-5)");
    if (const json::Value* i = c.find("n_inner"); i && i->kind != json::Value::Kind::null &&
        json::to_u64(*i, where + ": n_inner") != 4 * static_cast<std::uint64_t>(model.d_model))
      refuse("n_inner " + i->text + " (dtrain's hidden layer is 4 x d-model)");
    if (const json::Value* s = c.find("scale_attn_weights"); s && s->kind == json::Value::Kind::boolean && !s->boolean)
      refuse("scale_attn_weights false (dtrain scales scores by 1/sqrt(head size))");
    if (const json::Value* s = c.find("scale_attn_by_inverse_layer_idx"); s && s->kind == json::Value::Kind::boolean && s->boolean)
      refuse("scale_attn_by_inverse_layer_idx true");
  }

  SafetensorsFile file_;
  std::map<std::string, const SafetensorsTensor*> by_name_;
  bool transposed_ = false;
  int layers_ = 0;
  std::optional<long> heads_;
};

class CheckpointSource : public Source {
 public:
  explicit CheckpointSource(const std::string& path) : file_(path) {
    file_.header();  // format, version, checksum algorithm and counters, as a resume checks them
    for (const DatasetInfo& d : file_.datasets())
      if (d.path.compare(0, kModel.size(), kModel) == 0) layers_ = std::max(layers_, block_index(d.path.substr(kModel.size())));
    ++layers_;
    for (const auto& [key, value] : file_.attributes("/model"))
      if (key == "heads") heads_ = std::strtol(value.c_str(), nullptr, 10);
  }
  std::optional<Shape> shape(const std::string& name) const override {
    const DatasetInfo* d = file_.find(kModel + name);
    if (!d) return std::nullopt;
    return d->shape;
  }
  std::vector<float> read(const std::string& name) const override {
    const DatasetInfo& d = *file_.find(kModel + name);
    std::vector<float> v = file_.read(d.path);
    DTRAIN_CHECK(d.has_checksum && checksum_run(v.data(), v.size(), 0) == d.checksum, Errc::corrupt_data,
                 "checkpoint '" << file_.path() << "': dataset " << d.path
                                << (d.has_checksum ? " fails its checksum" : " has no checksum") << ": the file is damaged");
    return v;
  }
  int layers() const override { return layers_; }
  std::optional<long> heads() const override { return heads_; }
  std::string kind() const override { return "dtrain checkpoint, its /model tensors"; }

 private:
  inline static const std::string kModel = "/model/";
  CheckpointFile file_;
  int layers_ = -1;
  std::optional<long> heads_;
};

enum class FileKind { hdf5, safetensors, other };

// By the first bytes: HDF5's signature, or a safetensors header length the file can hold
// followed by the header's '{'.
FileKind file_kind(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char b[9] = {};
  in.read(reinterpret_cast<char*>(b), 9);
  if (in.gcount() >= 8 && std::memcmp(b, "\x89HDF\r\n\x1a\n", 8) == 0) return FileKind::hdf5;
  if (in.gcount() < 9 || b[8] != '{') return FileKind::other;
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | b[i];
  return header <= std::filesystem::file_size(path) - 8 ? FileKind::safetensors : FileKind::other;
}

std::string model_text(int layers, std::uint64_t d_model, std::uint64_t vocab, std::uint64_t positions, bool tied,
                       std::optional<long> heads) {
  std::ostringstream s;
  s << layers << " layers, d-model " << d_model << ", vocabulary " << vocab << ", " << positions << " positions, "
    << (tied ? "tied embeddings" : "an lm_head.weight") << ", ";
  if (heads) s << *heads << " heads";
  else s << "heads not recorded";
  return s.str();
}

}  // namespace

struct InitialWeights::Impl {
  std::string path;
  GptConfig model;
  std::unique_ptr<Source> source;
  std::string summary;  // what the file holds
  bool file_has_head = false;
  std::string cached_name;
  std::vector<float> cached;

  void refuse(const std::string& why) const {
    DTRAIN_FAIL(Errc::invalid_config, "--init-from '" << path << "' holds a GPT of " << summary << "; " << why);
  }
};

InitialWeights::InitialWeights(const std::string& path, const GptConfig& model) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.model = model;
  DTRAIN_CHECK(std::filesystem::is_regular_file(path), Errc::io, "--init-from '" << path << "': no such file");
  switch (file_kind(path)) {
    case FileKind::hdf5: m.source = std::make_unique<CheckpointSource>(path); break;
    case FileKind::safetensors: m.source = std::make_unique<SafetensorsSource>(path, model); break;
    case FileKind::other:
      DTRAIN_FAIL(Errc::corrupt_data, "--init-from '" << path << "' is neither a dtrain checkpoint (HDF5) nor a "
                                      "safetensors file");
  }
  const Source& src = *m.source;
  const std::optional<Shape> wte = src.shape("wte"), wpe = src.shape("wpe");
  DTRAIN_CHECK(wte && wte->size() == 2 && wpe && wpe->size() == 2, Errc::invalid_config,
               "--init-from '" << path << "' (" << src.kind() << ") holds no GPT: it has no 2-D wte and wpe");
  m.file_has_head = src.shape("lm_head.weight").has_value();
  m.summary = model_text(src.layers(), (*wte)[1], (*wte)[0], (*wpe)[0], !m.file_has_head, src.heads()) + " (" +
              src.kind() + ")";
  std::ostringstream pass;  // the options that would fit the file
  if (src.layers() != model.layers) pass << " --layers " << src.layers();
  if ((*wte)[1] != static_cast<std::uint64_t>(model.d_model)) pass << " --d-model " << (*wte)[1];
  if ((*wte)[0] != static_cast<std::uint64_t>(model.vocab)) pass << " --vocab " << (*wte)[0];
  if (src.heads() && *src.heads() != model.heads) pass << " --heads " << *src.heads();
  if (!m.file_has_head && !model.tie_embeddings) pass << " --tie-embeddings true";
  if (!pass.str().empty())
    m.refuse("this run has " + model_text(model.layers, model.d_model, model.vocab, model.seq_len,
                                          model.tie_embeddings, model.heads) +
             ": pass" + pass.str());
  if ((*wpe)[0] < static_cast<std::uint64_t>(model.seq_len))
    m.refuse("--seq-len " + std::to_string(model.seq_len) + " is longer than its " + std::to_string((*wpe)[0]) +
             " positions");
}

InitialWeights::~InitialWeights() = default;

void InitialWeights::check(const ParameterStore& params) {
  Impl& m = *impl_;
  for (const ParamInfo& p : params) {
    const std::optional<Shape> file_shape = m.source->shape(p.name);
    if (!file_shape) m.refuse("it has no tensor '" + p.name + "'");
    Shape want(p.shape.begin(), p.shape.end());
    if (p.name == "wpe" && !file_shape->empty()) want[0] = (*file_shape)[0];  // its first seq-len rows
    if (*file_shape != want) {
      m.refuse("its tensor '" + p.name + "' has shape " + shape_text(*file_shape) + " where this model's is " +
               shape_text(want));
    }
    const float* v = values(p);
    const float* bad = std::find_if(v, v + p.logical_numel(), [](float x) { return !std::isfinite(x); });
    if (bad != v + p.logical_numel()) {
      m.refuse("its tensor '" + p.name + "' holds " + std::to_string(*bad) + " at element " +
               std::to_string(bad - v) + ": a model to start from must be finite");
    }
    if (p.name == "wte" && m.model.tie_embeddings && m.file_has_head) {
      const std::vector<float> head = m.source->read("lm_head.weight");
      if (head.size() != p.logical_numel() || std::memcmp(head.data(), v, head.size() * sizeof(float)) != 0)
        m.refuse("its lm_head.weight is not its wte: that model's LM head is separate (--tie-embeddings false)");
    }
  }
  m.cached = {};
  m.cached_name.clear();
}

const float* InitialWeights::values(const ParamInfo& p) {
  Impl& m = *impl_;
  if (m.cached_name != p.name) {
    m.cached_name.clear();
    m.cached = {};
    m.cached = m.source->read(p.name);
    m.cached_name = p.name;
  }
  DTRAIN_CHECK(m.cached.size() >= p.logical_numel(), Errc::internal,
               "--init-from: tensor '" << p.name << "' has fewer values than its shape");
  return m.cached.data();  // wpe: its first seq-len rows are the model's
}

std::string InitialWeights::describe() const { return "'" + impl_->path + "': " + impl_->summary; }

}  // namespace dtrain::ckpt
