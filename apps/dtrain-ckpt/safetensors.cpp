// export: the /model tensors of a checkpoint as one safetensors file, which PyTorch
// (safetensors.torch.load_file) and plain numpy read without dtrain; with --hf, a GPT's as
// Hugging Face's transformers keeps GPT-2 (model.safetensors and config.json in a directory):
//   8 bytes  little-endian u64: length N of the header
//   N bytes  JSON {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [...],
//            "data_offsets": [begin, end]}, ...}, padded with spaces to a multiple of 8
//   then     the tensors' bytes, little-endian, row-major, back to back in header order
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "dtrain/ckpt/checksum.hpp"
#include "dtrain/ckpt/file.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain_ckpt {
namespace {

const char* const kModelPrefix = "/model/";

// The length of the valid UTF-8 sequence at s[i] (shortest form, no surrogate, at most
// U+10FFFF); 0 where the bytes there are not one.
std::size_t utf8_length(const std::string& s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned lead = byte(i);
  const std::size_t n = lead < 0x80 ? 1 : lead < 0xC2 ? 0 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : lead < 0xF5 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  const unsigned second = n > 1 ? byte(i + 1) : 0;
  if ((lead == 0xE0 && second < 0xA0) || (lead == 0xED && second >= 0xA0) || (lead == 0xF0 && second < 0x90) ||
      (lead == 0xF4 && second >= 0x90))
    return 0;
  return n;
}

// A JSON string, which must be UTF-8: a byte of an attribute that is not (a hand-edited
// file) is written as the character of its number, \u00XX.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const std::size_t n = utf8_length(s, i);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (n == 0 || static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out.append(s, i, n);
      i += n;
      continue;
    }
    ++i;
  }
  return out + "\"";
}

bool little_endian_host() {
  const std::uint32_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// The bytes of `data` in little-endian order whatever the host's.
void to_little_endian(std::vector<float>& data) {
  if (little_endian_host()) return;
  for (float& f : data) {
    unsigned char b[4];
    std::memcpy(b, &f, 4);
    std::swap(b[0], b[3]);
    std::swap(b[1], b[2]);
    std::memcpy(&f, b, 4);
  }
}

// A new file next to `out` (mkstemp: never an existing file, never through a link, so OUT.tmp
// or a link there is not written into), renamed over `out` by commit() and removed unless
// committed: a failed export leaves no half-written file. commit() is finish() (the data on
// the disk) then publish() (the rename), which an export of two files calls apart.
class NewFileNextTo {
 public:
  explicit NewFileNextTo(const std::string& out) : out_(out), tmp_(out + ".XXXXXX") {
    const int fd = ::mkstemp(tmp_.data());
    DTRAIN_CHECK(fd >= 0, Errc::io, "cannot create a file next to '" << out_ << "': " << std::strerror(errno));
    const mode_t mask = ::umask(0);  // mkstemp makes 0600: the permissions a new file gets
    ::umask(mask);
    ::fchmod(fd, 0666 & ~mask);
    file_ = ::fdopen(fd, "wb");
    if (!file_) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp_.c_str());
      DTRAIN_FAIL(Errc::io, "cannot write '" << out_ << "': " << std::strerror(err));
    }
  }
  ~NewFileNextTo() {
    if (file_) std::fclose(file_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  NewFileNextTo(const NewFileNextTo&) = delete;
  NewFileNextTo& operator=(const NewFileNextTo&) = delete;

  void write(const void* data, std::size_t bytes) {
    DTRAIN_CHECK(std::fwrite(data, 1, bytes, file_) == bytes, Errc::io,
                 "cannot write '" << out_ << "': " << std::strerror(errno));
  }
  void commit() {
    finish();
    publish();
  }
  void finish() {
    std::FILE* f = file_;
    file_ = nullptr;
    // Buffered data reaches the file only here: a full disk shows up now. On the disk before
    // the rename, so that a crash leaves the old file or the whole new one.
    const bool synced = std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
    const int err = errno;
    DTRAIN_CHECK(std::fclose(f) == 0 && synced, Errc::io,
                 "cannot write '" << out_ << "': " << std::strerror(synced ? errno : err));
  }
  void publish() {
    DTRAIN_CHECK(std::rename(tmp_.c_str(), out_.c_str()) == 0, Errc::io,
                 "cannot rename '" << tmp_ << "' to '" << out_ << "': " << std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string out_, tmp_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

// One tensor of an export: a checkpoint dataset under the export's name, transposed where
// Hugging Face's Conv1D keeps a linear layer's weight as [in, out].
struct ExportedTensor {
  std::string name;
  const dtrain::ckpt::DatasetInfo* dataset;
  bool transpose = false;
};

// A checkpoint that this tool reads, with its /model tensors (float32 with checksums).
struct ModelTensors {
  dtrain::ckpt::CheckpointFile file;
  std::vector<const dtrain::ckpt::DatasetInfo*> tensors;

  explicit ModelTensors(const std::string& path) : file(path) {
    for (const dtrain::ckpt::DatasetInfo& d : file.datasets()) {
      if (d.path.rfind(kModelPrefix, 0) != 0) continue;
      DTRAIN_CHECK(d.dtype == "float32", Errc::invalid_argument, "dataset " << d.path << " is " << d.dtype << ", not float32");
      tensors.push_back(&d);
    }
    DTRAIN_CHECK(!tensors.empty(), Errc::invalid_argument, "'" << path << "' has no /model tensors");
    // A damaged tensor is not exported as if it were the model's: each is checked against
    // its checksum, in a format this tool knows.
    const std::string problem = format_problem(file);
    DTRAIN_CHECK(problem.empty(), Errc::invalid_argument, "'" << path << "': " << problem << ": nothing exported");
  }
  static std::string name(const dtrain::ckpt::DatasetInfo* d) { return d->path.substr(std::strlen(kModelPrefix)); }
};

// Writes the tensors as one safetensors file into os, with metadata (the caller commits it);
// returns the data's bytes.
std::uint64_t write_safetensors(const ModelTensors& model, const std::string& checkpoint,
                                const std::vector<ExportedTensor>& tensors, const dtrain::ckpt::AttributeList& metadata,
                                NewFileNextTo& os) {
  namespace ck = dtrain::ckpt;
  std::ostringstream json;
  json << "{\"__metadata__\":{";
  for (std::size_t i = 0; i < metadata.size(); ++i) {
    json << (i ? "," : "") << json_string(metadata[i].first) << ":" << json_string(metadata[i].second);
  }
  json << "}";
  std::uint64_t offset = 0;
  for (const ExportedTensor& t : tensors) {
    std::vector<std::uint64_t> shape = t.dataset->shape;
    if (t.transpose) std::swap(shape[0], shape[1]);
    std::uint64_t bytes = 4;
    json << "," << json_string(t.name) << ":{\"dtype\":\"F32\",\"shape\":[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
      json << (i ? "," : "") << shape[i];
      bytes *= shape[i];
    }
    json << "],\"data_offsets\":[" << offset << "," << offset + bytes << "]}";
    offset += bytes;
  }
  json << "}";
  std::string header = json.str();
  header.append((8 - header.size() % 8) % 8, ' ');

  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
  os.write(len, 8);
  os.write(header.data(), header.size());
  std::vector<float> transposed;
  for (const ExportedTensor& t : tensors) {
    const ck::DatasetInfo* d = t.dataset;
    std::vector<float> data = model.file.read(d->path);
    DTRAIN_CHECK(d->has_checksum && ck::checksum_run(data.data(), data.size(), 0) == d->checksum,
                 Errc::corrupt_data, (d->has_checksum ? "dataset " + d->path + " fails its checksum" : d->checksum_problem)
                                         << ": '" << checkpoint << "' is damaged, nothing exported");
    if (t.transpose) {
      const std::size_t rows = d->shape[0], cols = d->shape[1];
      transposed.resize(data.size());
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < cols; ++c) transposed[c * rows + r] = data[r * cols + c];
      }
      data.swap(transposed);
    }
    to_little_endian(data);
    os.write(data.data(), data.size() * sizeof(float));
  }
  return offset;
}

// Whether an existing file is what an export writes: a safetensors file (a little-endian
// 8-byte header length, then its JSON header) or a JSON object (config.json).
bool looks_like_an_export(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const auto size = static_cast<std::uint64_t>(std::max<std::streamoff>(0, in.tellg()));
  in.seekg(0);
  unsigned char head[9] = {0};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  const auto got = static_cast<std::size_t>(in.gcount());
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | head[i];
  const bool safetensors = got == 9 && head[8] == '{' && header <= size - 8;
  std::size_t first = 0;
  while (first < got && std::isspace(head[first])) ++first;
  return safetensors || (first < got && head[first] == '{');
}

// Refuses an output that is the checkpoint itself, a link, not a regular file, or an existing file
// that no export wrote (another checkpoint, `latest`, a text file): export overwrites only
// its own earlier output.
void check_output(const std::string& checkpoint, const std::string& out) {
  namespace fs = std::filesystem;
  DTRAIN_CHECK(!out.empty(), Errc::invalid_argument, "the output file name is empty");
  std::error_code same_ec, type_ec;
  DTRAIN_CHECK(!fs::equivalent(checkpoint, out, same_ec), Errc::invalid_argument,
               "'" << out << "' is the checkpoint itself: export to another file");
  // The rename would replace a link, not the file it names (nor make the one a dangling link names).
  DTRAIN_CHECK(!fs::is_symlink(fs::symlink_status(out, type_ec)), Errc::invalid_argument,
               "'" << out << "' is a symbolic link: export to the path of a file, not a link");
  const fs::file_status existing = fs::status(out, type_ec);
  DTRAIN_CHECK(!fs::exists(existing) || fs::is_regular_file(existing), Errc::invalid_argument,
               "'" << out << "' exists and is not a regular file: export to a file");
  DTRAIN_CHECK(!fs::exists(existing) || looks_like_an_export(out), Errc::invalid_argument,
               "'" << out << "' exists and is not an earlier export (safetensors or JSON): export "
                   "overwrites only its own output; remove it or export elsewhere");
}

// The root's and /model's attributes (provenance: step, format_version, d_model, ...).
dtrain::ckpt::AttributeList provenance(const dtrain::ckpt::CheckpointFile& f) {
  dtrain::ckpt::AttributeList out;
  for (const char* object : {"/", "/model"}) {
    for (const auto& [name, value] : f.attributes(object)) {
      if (name != "run_config" && name != "checksum_algorithm") out.emplace_back(name, value);
    }
  }
  return out;
}

// Hugging Face's name for a dtrain GPT tensor, "" for a tensor GPT-2 does not have.
std::string hugging_face_name(const std::string& name) {
  if (name == "wte" || name == "wpe") return "transformer." + name + ".weight";
  if (name == "lm_head.weight") return name;
  if (name.rfind("h.", 0) == 0 || name.rfind("ln_f.", 0) == 0) return "transformer." + name;
  return "";
}

bool is_linear_weight(const std::string& name) {
  for (const char* suffix : {".c_attn.weight", ".c_proj.weight", ".c_fc.weight"}) {
    const std::size_t n = std::strlen(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0) return true;
  }
  return false;
}

}  // namespace

int export_safetensors(const std::string& file, const std::string& out) {
  const ModelTensors model(file);
  check_output(file, out);
  std::vector<ExportedTensor> tensors;
  for (const dtrain::ckpt::DatasetInfo* d : model.tensors) tensors.push_back({ModelTensors::name(d), d});
  NewFileNextTo os(out);
  const std::uint64_t bytes = write_safetensors(model, file, tensors, provenance(model.file), os);
  os.commit();
  std::printf("exported %zu tensors (%llu bytes of data) to %s\n", tensors.size(), static_cast<unsigned long long>(bytes),
              out.c_str());
  return 0;
}

// The directories an export makes for its output, deepest first: removed again (when still
// empty) unless keep() is called, so that a failed export leaves no new directory behind.
class MadeDirectories {
 public:
  explicit MadeDirectories(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    // symlink_status: a dangling link in the path is the user's, never one to remove. (It
    // sets its error code for a path that is not there.)
    std::error_code status_ec;
    for (fs::path p = fs::absolute(dir, ec); !ec && !p.empty() && !fs::exists(fs::symlink_status(p, status_ec));
         p = p.parent_path()) {
      made_.push_back(p);
      if (p == p.parent_path()) break;
    }
    fs::create_directories(dir, ec);
    std::error_code type_ec;
    if (fs::is_directory(dir, type_ec)) return;
    remove_made();
    DTRAIN_FAIL(Errc::io, "cannot make the directory '" << dir << "'" << (ec ? ": " + ec.message() : ""));
  }
  ~MadeDirectories() { remove_made(); }
  MadeDirectories(const MadeDirectories&) = delete;
  MadeDirectories& operator=(const MadeDirectories&) = delete;
  void keep() { made_.clear(); }

 private:
  void remove_made() {
    std::error_code ec;
    for (const auto& p : made_) std::filesystem::remove(p, ec);  // fails on a non-empty one
  }
  std::vector<std::filesystem::path> made_;
};

// /model's attributes against its tensors: config.json is written from the attributes,
// which a crafted or damaged file could set to anything (n_head 0, a vocabulary of 2^40).
void check_gpt_attributes(const std::string& file, const std::map<std::string, std::string>& attr,
                          const ModelTensors& model) {
  model.file.header();  // every attribute as a resume reads it, their HDF5 types too (2.0 is not 2)
  std::map<std::string, long long> v;
  for (const char* key : {"layers", "heads", "d_model", "seq_len", "vocab"}) {
    const std::string& text = attr.at(key);
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(text.c_str(), &end, 10);
    DTRAIN_CHECK(!text.empty() && *end == '\0' && errno == 0 && n > 0, Errc::invalid_argument,
                 "'" << file << "': /model's " << key << " is '" << text << "', not a positive count");
    v[key] = n;
  }
  DTRAIN_CHECK(v["d_model"] % v["heads"] == 0, Errc::invalid_argument,
               "'" << file << "': /model's heads (" << v["heads"] << ") do not divide its d_model (" << v["d_model"] << ")");
  std::set<long long> blocks;
  for (const dtrain::ckpt::DatasetInfo* d : model.tensors) {
    const std::string name = ModelTensors::name(d);
    const std::vector<std::uint64_t> want_wte = {static_cast<std::uint64_t>(v["vocab"]), static_cast<std::uint64_t>(v["d_model"])};
    const std::vector<std::uint64_t> want_wpe = {static_cast<std::uint64_t>(v["seq_len"]), static_cast<std::uint64_t>(v["d_model"])};
    DTRAIN_CHECK(name != "wte" || d->shape == want_wte, Errc::invalid_argument,
                 "'" << file << "': wte is not [vocab, d_model] = [" << v["vocab"] << ", " << v["d_model"] << "] as /model says");
    DTRAIN_CHECK(name != "wpe" || d->shape == want_wpe, Errc::invalid_argument,
                 "'" << file << "': wpe is not [seq_len, d_model] = [" << v["seq_len"] << ", " << v["d_model"] << "] as /model says");
    if (name.rfind("h.", 0) == 0) blocks.insert(std::strtoll(name.c_str() + 2, nullptr, 10));
  }
  DTRAIN_CHECK(static_cast<long long>(blocks.size()) == v["layers"] && !blocks.empty() && *blocks.begin() == 0 &&
                   *blocks.rbegin() == v["layers"] - 1,
               Errc::invalid_argument,
               "'" << file << "': /model says " << v["layers"] << " layers, its tensors hold " << blocks.size() << " blocks");
  // Every tensor there, and the head as tie_embeddings says: transformers ties the head to wte
  // or loads lm_head.weight as config.json's flag says.
  const std::string problem = gpt_tensor_problem(model.file);
  DTRAIN_CHECK(problem.empty(), Errc::invalid_argument, "'" << file << "': " << problem);
}

int export_hugging_face(const std::string& file, const std::string& dir) {
  namespace fs = std::filesystem;
  const ModelTensors model(file);
  std::map<std::string, std::string> shape;  // /model's attributes: layers, heads, d_model, ...
  for (const auto& [name, value] : model.file.attributes("/model")) shape[name] = value;
  for (const char* key : {"layers", "heads", "d_model", "seq_len", "vocab", "tie_embeddings"}) {
    DTRAIN_CHECK(shape.count(key), Errc::invalid_argument,
                 "'" << file << "' holds no GPT (its /model has no " << key << " attribute): --hf exports a GPT");
  }
  std::vector<ExportedTensor> tensors;
  for (const dtrain::ckpt::DatasetInfo* d : model.tensors) {
    const std::string name = ModelTensors::name(d);
    const std::string hf = hugging_face_name(name);
    DTRAIN_CHECK(!hf.empty(), Errc::invalid_argument, "'" << file << "': tensor '" << name << "' is not GPT-2's: --hf exports a GPT");
    tensors.push_back({hf, d, d->shape.size() == 2 && is_linear_weight(name)});
  }
  check_gpt_attributes(file, shape, model);
  MadeDirectories made(dir);
  const std::string weights = (fs::path(dir) / "model.safetensors").string(), config = (fs::path(dir) / "config.json").string();
  check_output(file, weights);
  check_output(file, config);

  // GPT-2's settings, which dtrain's GPT shares (GELU's tanh form, LayerNorm eps 1e-5, a
  // 4 x d-model MLP, attention scaled by 1/sqrt(head size)); dropout as GPT-2's.
  const bool tied = shape.at("tie_embeddings") == "1";
  std::ostringstream json;
  json << "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
       << "  \"n_layer\": " << shape.at("layers") << ",\n  \"n_head\": " << shape.at("heads") << ",\n"
       << "  \"n_embd\": " << shape.at("d_model") << ",\n  \"n_positions\": " << shape.at("seq_len") << ",\n"
       << "  \"n_ctx\": " << shape.at("seq_len") << ",\n  \"vocab_size\": " << shape.at("vocab") << ",\n"
       << "  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
       << "  \"scale_attn_weights\": true,\n  \"resid_pdrop\": 0.1,\n  \"embd_pdrop\": 0.1,\n  \"attn_pdrop\": 0.1,\n"
       << "  \"initializer_range\": 0.02,\n  \"tie_word_embeddings\": " << (tied ? "true" : "false") << ",\n"
       << "  \"torch_dtype\": \"float32\"\n}\n";
  // Both files whole on the disk before either replaces an earlier export in DIR: a failure
  // to write leaves that export as it was.
  NewFileNextTo weights_file(weights), config_file(config);
  const std::string text = json.str();
  config_file.write(text.data(), text.size());
  config_file.finish();
  // transformers reads only files whose metadata says "format": "pt"; the checkpoint's own
  // format name goes under another key.
  dtrain::ckpt::AttributeList metadata = {{"format", "pt"}};
  for (const auto& [name, value] : provenance(model.file)) metadata.emplace_back(name == "format" ? "checkpoint_format" : name, value);
  const std::uint64_t bytes = write_safetensors(model, file, tensors, metadata, weights_file);
  weights_file.finish();
  weights_file.publish();
  try {  // a rename within DIR, after one succeeded: no weights without their config
    config_file.publish();
  } catch (...) {
    std::error_code ec;
    fs::remove(weights, ec);
    throw;
  }
  made.keep();
  std::printf("exported %zu tensors (%llu bytes of data) in Hugging Face's GPT-2 layout to %s (model.safetensors, config.json)\n",
              tensors.size(), static_cast<unsigned long long>(bytes), dir.c_str());
  return 0;
}

}  // namespace dtrain_ckpt
