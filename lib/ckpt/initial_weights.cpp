#include "dtrain/ckpt/initial_weights.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "core/json_value.hpp"
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

// Digits only, as dtrain writes them (strtol alone took " 2", "+2" and "2\0...").
long whole_number(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text.c_str(), &end, 10);
  const bool digits = !text.empty() && (text[0] == '-' ? text.size() > 1 : true) &&
                      std::all_of(text.begin() + (text[0] == '-' ? 1 : 0), text.end(),
                                  [](char c) { return c >= '0' && c <= '9'; });
  DTRAIN_CHECK(digits && end == text.c_str() + text.size() && errno == 0, Errc::corrupt_data,
               what << " is '" << text << "', not a whole number");
  return n;
}

// A recorded head count (metadata text as a long, config.json's as a u64): 1 to INT_MAX, else
// the file is damaged (a refusal would otherwise suggest "heads = -1" as the setting that fits).
template <class N>
long head_count(N n, const std::string& what) {
  DTRAIN_CHECK(n >= 1 && n <= static_cast<N>(INT_MAX), Errc::corrupt_data,
               what << " is " << n << ", not a number of heads");
  return static_cast<long>(n);
}

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
  explicit SafetensorsSource(const std::string& path) : file_(path) {
    for (const SafetensorsTensor& t : file_.tensors()) {
      std::string name = t.name;
      for (const std::string prefix : {"_orig_mod.", "transformer."})  // torch.compile's, then the model's
        if (name.compare(0, prefix.size(), prefix) == 0) name.erase(0, prefix.size());
      if (name == "wte.weight" || name == "wpe.weight") name.resize(3);  // Hugging Face's names
      DTRAIN_CHECK(by_name_.emplace(name, &t).second, Errc::invalid_config,
                   "'" << path << "' holds tensor '" << name << "' twice (as '" << by_name_.at(name)->name
                       << "' and '" << t.name << "')");
      layers_ = std::max(layers_, block_index(name) + 1);
    }
    // A tied model saved by safetensors keeps one name of the shared tensor, which may be the
    // head's (nanoGPT's lm_head.weight): that is the embedding, and the model has no head.
    if (!by_name_.count("wte") && by_name_.count("lm_head.weight")) {
      by_name_["wte"] = by_name_.at("lm_head.weight");
      by_name_.erase("lm_head.weight");
    }
    // Conv1D keeps c_attn's weight as [C, 3C]; a linear layer as [3C, C].
    if (const SafetensorsTensor* c = find("h.0.attn.c_attn.weight"))
      transposed_ = c->shape.size() == 2 && c->shape[1] == 3 * c->shape[0];
    read_recorded_heads(path);
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
  void read_recorded_heads(const std::string& path) {
    for (const auto& [key, value] : file_.metadata())
      if (key == "heads") {
        const std::string what = "'" + path + "': its metadata 'heads'";
        heads_ = head_count(whole_number(value, what), what);
        return;
      }
    const std::filesystem::path config = std::filesystem::path(path).parent_path() / "config.json";
    std::error_code ec;
    const std::filesystem::file_status status = std::filesystem::status(config, ec);
    if (!std::filesystem::exists(status)) return;
    DTRAIN_CHECK(std::filesystem::is_regular_file(status), Errc::io,
                 "'" << config.string() << "' next to the weights is not a regular file");
    std::ifstream in(config);
    DTRAIN_CHECK(in, Errc::io, "cannot read '" << config.string() << "': " << std::strerror(errno));
    std::stringstream text;
    text << in.rdbuf();
    const std::string where = "'" + config.string() + "'";
    const json::Value root = json::parse(text.str(), where);
    DTRAIN_CHECK(root.kind == json::Value::Kind::object, Errc::corrupt_data, where << " is not a JSON object");
    const SafetensorsTensor* wte = find("wte");
    check_gpt2_settings(root, where, wte && wte->shape.size() == 2 ? wte->shape[1] : 0);
    if (const json::Value* n = root.find("n_head"))
      heads_ = head_count(json::to_u64(*n, where + ": n_head"), where + ": n_head");
  }

  // What dtrain's GPT computes: tanh GELU, LayerNorm eps 1e-5, a 4C hidden layer, attention
  // scaled by 1/sqrt(head size). Another setting would load and compute something else.
  // d_model: the file's (0: unknown).
  static void check_gpt2_settings(const json::Value& c, const std::string& where, std::uint64_t d_model) {
    auto refuse = [&](const std::string& what) {
      DTRAIN_FAIL(Errc::invalid_config, where << " describes a model dtrain's GPT does not compute: " << what);
    };
    if (const json::Value* t = c.find("model_type"); t && t->kind == json::Value::Kind::string && t->text != "gpt2")
      refuse("model_type \"" + t->text + "\", not \"gpt2\"");
    if (const json::Value* a = c.find("activation_function"); a && a->kind == json::Value::Kind::string &&
        a->text != "gelu_new" && a->text != "gelu_pytorch_tanh" && a->text != "gelu_fast")
      refuse("activation_function \"" + a->text + "\" (dtrain's GELU is the tanh form, \"gelu_new\")");
    if (const json::Value* e = c.find("layer_norm_epsilon");
        e && std::fabs(json::to_double(*e, where + ": layer_norm_epsilon") - 1e-5) > 1e-12)
      refuse("layer_norm_epsilon " + e->text + " (dtrain's is 1e-5)");
    if (const json::Value* i = c.find("n_inner"); i && i->kind != json::Value::Kind::null && d_model != 0 &&
        json::to_u64(*i, where + ": n_inner") != 4 * d_model)
      refuse("n_inner " + i->text + " (dtrain's hidden layer is 4 x d-model, " + std::to_string(4 * d_model) + ")");
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
    // A byom's or an MLP's checkpoint records its /model sizes as 0 (docs/c-api.md):
    // not damage, another kind of model.
    int zero_sizes = 0;
    const auto attributes = file_.attributes("/model");
    for (const auto& [key, value] : attributes)
      if ((key == "layers" || key == "heads" || key == "d_model" || key == "seq_len" || key == "vocab") && value == "0")
        ++zero_sizes;
    DTRAIN_CHECK(zero_sizes < 5, Errc::invalid_config,
                 "checkpoint '" << path << "' was written for a model that is not a built-in GPT (a byom or "
                                << "an MLP): its weights are not a GPT's");
    for (const auto& [key, value] : attributes)
      if (key == "heads") {
        const std::string what = "checkpoint '" + path + "': /model's heads";
        heads_ = head_count(whole_number(value, what), what);
      }
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
                 "checkpoint '" << file_.path() << "': "
                                << (d.has_checksum ? "dataset " + d.path + " fails its checksum" : d.checksum_problem)
                                << ": the file is damaged");
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
FileKind file_kind(const std::string& path, const std::string& caller) {
  std::ifstream in(path, std::ios::binary);
  DTRAIN_CHECK(in, Errc::io, caller << " '" << path << "': cannot open it: " << std::strerror(errno));
  unsigned char b[9] = {};
  in.read(reinterpret_cast<char*>(b), 9);
  if (in.gcount() >= 8 && std::memcmp(b, "\x89HDF\r\n\x1a\n", 8) == 0) return FileKind::hdf5;
  if (in.gcount() < 9 || b[8] != '{') return FileKind::other;
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | b[i];
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  // A header the file cannot hold is still safetensors' (a file cut short, which its reader
  // names) when its length is plausible: 8 bytes of text read as one are at least 2^59.
  return !ec && (header <= size - 8 || header < (std::uint64_t{1} << 32)) ? FileKind::safetensors : FileKind::other;
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
  std::string caller;  // what messages begin with: "--init-from"
  std::string path;
  GptConfig model;
  std::unique_ptr<Source> source;
  std::string summary;  // what the file holds
  bool file_has_head = false;
  std::string cached_name;
  std::vector<float> cached;

  // dtrain-gpt's options name the settings ("--d-model 768"), else the C ABI's config fields
  // do ("d_model = 768").
  bool options() const { return caller.rfind("--", 0) == 0; }
  std::string setting(const std::string& option, const std::string& value) const {
    if (options()) return "--" + option + " " + value;
    std::string field = option;
    std::replace(field.begin(), field.end(), '-', '_');
    return field + " = " + value;
  }
  std::string tied_setting(bool tied) const {
    return setting("tie-embeddings", options() ? (tied ? "true" : "false") : (tied ? "1" : "0"));
  }

  [[noreturn]] void refuse(const std::string& why) const {
    DTRAIN_FAIL(Errc::invalid_config, caller << " '" << path << "' holds a GPT of " << summary << "; " << why);
  }
};

InitialWeights::InitialWeights(const std::string& path, const GptConfig& model, const std::string& caller)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.caller = caller;
  m.path = path;
  m.model = model;
  const auto type_of = [&](const std::string& p) {  // a path that cannot be searched: Errc::io, not a throw of its own
    std::error_code ec;
    const std::filesystem::file_type t = std::filesystem::status(p, ec).type();
    DTRAIN_CHECK(!ec || t == std::filesystem::file_type::not_found, Errc::io,
                 caller << " '" << p << "': " << ec.message());
    return t;
  };
  if (type_of(path) == std::filesystem::file_type::directory) {
    m.path = (std::filesystem::path(path) / "model.safetensors").string();
    DTRAIN_CHECK(type_of(m.path) == std::filesystem::file_type::regular, Errc::io,
                 caller << " '" << path << "' is a directory without a model.safetensors");
  }
  const std::filesystem::file_type type = type_of(m.path);
  DTRAIN_CHECK(type != std::filesystem::file_type::not_found, Errc::io, m.caller << " '" << m.path << "': no such file");
  DTRAIN_CHECK(type == std::filesystem::file_type::regular, Errc::io, m.caller << " '" << m.path << "' is not a regular file");
  switch (file_kind(m.path, m.caller)) {
    case FileKind::hdf5: m.source = std::make_unique<CheckpointSource>(m.path); break;
    case FileKind::safetensors: m.source = std::make_unique<SafetensorsSource>(m.path); break;
    case FileKind::other:
      DTRAIN_FAIL(Errc::corrupt_data, m.caller << " '" << m.path << "' is neither a dtrain checkpoint (HDF5) nor a "
                                      "safetensors file");
  }
  const Source& src = *m.source;
  const std::optional<Shape> wte = src.shape("wte"), wpe = src.shape("wpe");
  DTRAIN_CHECK(wte && wte->size() == 2 && wpe && wpe->size() == 2, Errc::invalid_config,
               m.caller << " '" << m.path << "' (" << src.kind() << ") holds no GPT: it has no 2-D wte and wpe");
  // Sizes no GPT has (an empty wte, past GptConfig's limits): the file's damage, not settings
  // to suggest.
  for (const auto& [what, n, limit] : {std::tuple{"vocabulary", (*wte)[0], GptConfig::kMaxVocab},
                                       std::tuple{"d-model", (*wte)[1], GptConfig::kMaxDModel},
                                       std::tuple{"position count", (*wpe)[0], INT_MAX}}) {
    DTRAIN_CHECK(n >= 1 && n <= static_cast<std::uint64_t>(limit), Errc::corrupt_data,
                 m.caller << " '" << m.path << "' (" << src.kind() << ") holds a wte of " << shape_text(*wte)
                          << " and a wpe of " << shape_text(*wpe) << ": a " << what << " of " << n << " is no GPT's");
  }
  m.file_has_head = src.shape("lm_head.weight").has_value();
  m.summary = model_text(src.layers(), (*wte)[1], (*wte)[0], (*wpe)[0], !m.file_has_head, src.heads()) + " (" +
              src.kind() + ")";
  std::vector<std::string> fit;  // the settings that would fit the file
  if (src.layers() != model.layers) fit.push_back(m.setting("layers", std::to_string(src.layers())));
  if ((*wte)[1] != static_cast<std::uint64_t>(model.d_model)) fit.push_back(m.setting("d-model", std::to_string((*wte)[1])));
  if ((*wte)[0] != static_cast<std::uint64_t>(model.vocab)) fit.push_back(m.setting("vocab", std::to_string((*wte)[0])));
  if (src.heads() && *src.heads() != model.heads) fit.push_back(m.setting("heads", std::to_string(*src.heads())));
  if (!m.file_has_head && !model.tie_embeddings) fit.push_back(m.tied_setting(true));
  if (!fit.empty()) {
    std::string settings;
    for (const std::string& f : fit) settings += (settings.empty() ? "" : m.options() ? " " : ", ") + f;
    m.refuse(std::string(m.options() ? "this run has " : "this model has ") +
             model_text(model.layers, model.d_model, model.vocab, model.seq_len, model.tie_embeddings, model.heads) +
             (m.options() ? ": pass " : ": set ") + settings);
  }
  if ((*wpe)[0] < static_cast<std::uint64_t>(model.seq_len))
    m.refuse(m.setting("seq-len", std::to_string(model.seq_len)) + " is longer than its " +
             std::to_string((*wpe)[0]) + " positions");
}

InitialWeights::~InitialWeights() = default;

void InitialWeights::check_shapes(const ParameterStore& params) const {
  const Impl& m = *impl_;
  for (const ParamInfo& p : params) {
    const std::optional<Shape> file_shape = m.source->shape(p.name);
    if (!file_shape) m.refuse("it has no tensor '" + p.name + "'");
    Shape want(p.shape.begin(), p.shape.end());
    // wpe: its first seq-len rows are read, so any count of rows (checked against seq-len
    // before) fits; only its width must be d-model.
    const bool rows_free = p.name == "wpe" && !file_shape->empty();
    if (rows_free) want[0] = (*file_shape)[0];
    if (*file_shape != want) {
      m.refuse("its tensor '" + p.name + "' has shape " + shape_text(*file_shape) + " where this model's is " +
               shape_text(Shape(p.shape.begin(), p.shape.end())) + (rows_free ? " (more rows are fine: the first are read)" : ""));
    }
  }
}

const float* InitialWeights::values(const ParamInfo& p) {
  Impl& m = *impl_;
  if (m.cached_name == p.name) return m.cached.data();
  m.cached_name.clear();
  m.cached = {};
  try {
    m.cached = m.source->read(p.name);
  } catch (const Error& e) {  // a tensor of integers: the file is not the model's
    if (e.code() != Errc::invalid_argument) throw;
    DTRAIN_FAIL(Errc::invalid_config, e.what());
  }
  const float* v = m.cached.data();
  const std::size_t n = p.logical_numel();  // wpe: its first seq-len rows are the model's
  DTRAIN_CHECK(m.cached.size() >= n, Errc::internal, m.caller << ": tensor '" << p.name << "' has too few values");
  const float* bad = std::find_if(v, v + n, [](float x) { return !std::isfinite(x); });
  if (bad != v + n) {
    m.refuse("its tensor '" + p.name + "' holds " + std::to_string(*bad) + " at element " + std::to_string(bad - v) +
             ": a model to start from must be finite");
  }
  if (p.name == "wte" && m.model.tie_embeddings && m.file_has_head) {
    const std::vector<float> head = m.source->read("lm_head.weight");
    if (head.size() != n || std::memcmp(head.data(), v, n * sizeof(float)) != 0)
      m.refuse("its lm_head.weight is not its wte: that model's LM head is separate (" + m.tied_setting(false) + ")");
  }
  m.cached_name = p.name;
  return v;
}

bool InitialWeights::records_heads() const { return impl_->source->heads().has_value(); }

std::string InitialWeights::describe() const { return "'" + impl_->path + "': " + impl_->summary; }

}  // namespace dtrain::ckpt
