// Checkpoint entry points: save and load of byom tensors and built-in models, and finding
// the checkpoint to resume from.
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "byom.hpp"
#include "dtrain/ckpt/initial_weights.hpp"
#include "model.hpp"

using namespace dtrain::capi;

namespace {

std::string need_path(const char* p, const char* name) {
  need_ptr(p, name);
  if (!*p) fail(DT_ERR_INVALID_ARGUMENT, std::string(name) + " must not be empty");
  return p;
}

// HDF5 opens one file collectively: ranks given different paths would each wait in the other
// file's open forever, so every rank of the call's group must name the same place: the
// absolute path with symbolic links resolved ("ckpt" and "./ckpt" agree; "ckpt" from two
// working directories does not). `extra`: further arguments that must agree (keep); `what`
// names them all for the message.
// Collective; after the agreed argument checks, so every rank has a path.
void need_same_path(dtrain::Communicator& ranks, const std::string& p, const char* what,
                    std::uint64_t extra = 0) {
  // "ckpt/" is "ckpt" (weakly_canonical keeps a trailing separator while the path is missing).
  std::string bare = p;
  while (bare.size() > 1 && bare.back() == '/') bare.pop_back();
  std::error_code ec;
  const std::filesystem::path where = std::filesystem::weakly_canonical(std::filesystem::absolute(bare, ec), ec);
  const std::string text = ec ? p : where.string();
  if (!same_value(ranks, mix(fnv1a(text.data(), text.size()), extra)))
    fail(DT_ERR_INVALID_ARGUMENT,
         std::string("the ranks were given different ") + what +
             ": every rank of the call must name the same place (here: '" + text + "')");
}

int need_keep(int keep) {
  need(keep >= 0, "keep must be >= 0 (0 keeps every checkpoint)");
  return keep;
}

}  // namespace

extern "C" {

// Saves and loads are collective (HDF5's collective I/O): their arguments are agreed first,
// so that a bad one on some ranks fails every rank instead of leaving the others waiting.

dt_result_t dt_byom_save_checkpoint(dt_byom_t byom, const char* dir, int keep) {
  return with_byom(__func__, byom, [&](dt_byom_s& b) {
    std::string d;
    agreed_checks(b.everyone(), true, [&] {
      d = need_path(dir, "dir");
      need_keep(keep);
    });
    need_same_path(b.everyone(), d, "dir paths or keep values", static_cast<std::uint64_t>(keep));
    Checkpoints& io = b.checkpoint_io();
    b.copy_in(false);  // the program's buffers are the parameters to save
    io.save(d, keep);
  });
}

dt_result_t dt_byom_load_checkpoint(dt_byom_t byom, const char* source) {
  return with_byom(__func__, byom, [&](dt_byom_s& b) {
    std::string s;
    agreed_checks(b.everyone(), true, [&] { s = need_path(source, "source"); });
    need_same_path(b.everyone(), s, "source paths");
    b.checkpoint_io().load(s);
    b.copy_out();
  });
}

dt_result_t dt_model_save_checkpoint(dt_model_t model, const char* dir, int keep) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    std::string d;
    agreed_checks(m.group(), true, [&] {
      d = need_path(dir, "dir");
      need_keep(keep);
    });
    need_same_path(m.group(), d, "dir paths or keep values", static_cast<std::uint64_t>(keep));
    share_tied_embedding(m);          // the file holds one copy of a tied wte
    m.checkpoint_io().save(d, keep);  // ZeRO 3: each rank writes its own pieces
  });
}

dt_result_t dt_model_load_checkpoint(dt_model_t model, const char* source) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    std::string s;
    agreed_checks(m.group(), true, [&] { s = need_path(source, "source"); });
    need_same_path(m.group(), s, "source paths");
    // ZeRO 3: each rank reads its own pieces; a unit a failed pass left held would keep
    // stale values, so every unit is dropped first.
    if (dtrain::parallel::ParamGather* g = m.engine->gather()) g->release_all();
    m.checkpoint_io().load(s);
    m.tied_written = {};  // the file's wte replaces values set before
    m.engine->zero_grads();
    m.decoded_text_stale = true;
  });
}

dt_result_t dt_checkpoint_find(dt_comm_t comm, const char* dir, char* path, size_t capacity,
                               size_t* length) {
  return call<dt_comm_s>(__func__, comm, Kind::comm, "comm", [&](dt_comm_s& c) {
    std::string d;
    agreed_checks(*c.comm, true, [&] {
      d = need_path(dir, "dir");
      need_ptr(length, "length");
    });
    need_same_path(*c.comm, d, "dir paths");
    const std::string found = find_checkpoint(*c.comm, d);
    *length = found.size();
    const bool query = capacity == 0 && !path;  // the length only
    agreed_checks(*c.comm, true, [&] {  // a rank's short buffer fails every rank, as the header says
      if (query) return;
      need_ptr(path, "path");
      need(capacity > found.size(), "capacity is too small for the path and its NUL");
    });
    if (!query) std::memcpy(path, found.c_str(), found.size() + 1);
  });
}

dt_result_t dt_model_load_weights(dt_model_t model, const char* source) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    std::string s;
    agreed_checks(m.group(), true, [&] {
      s = need_path(source, "source");
      if (!m.gpt) fail(DT_ERR_INVALID_ARGUMENT, "the model is an MLP: dt_model_load_weights() loads a GPT's");
    });
    need_same_path(m.group(), s, "source paths");
    // Every tensor this rank holds is read, checked and kept as what its arena takes (its
    // slices, its ZeRO 3 pieces) first: a refused file changes nothing.
    std::vector<std::vector<ArenaWrite>> writes;
    agreed_checks(m.group(), true, [&] {
      dtrain::ckpt::InitialWeights file(s, m.gpt->config(), "source");
      file.check_shapes(m.params());
      for (const dtrain::ParamInfo& p : m.params()) writes.push_back(arena_writes(m, p, file.values(p)));
    });
    // ZeRO 3: a unit a failed pass left held would keep stale values (as a checkpoint load).
    if (dtrain::parallel::ParamGather* g = m.engine->gather()) g->release_all();
    agreed_checks(m.group(), true, [&] {  // copies only; a device that fails them leaves the values undefined
      for (std::size_t t = 0; t < m.params().size(); ++t) {
        const dtrain::ParamInfo& p = m.params()[t];
        write_arena(m, writes[t]);
        m.engine->parameters_written(p.offset, p.offset + p.local_numel());  // mixed precision
      }
    });
    m.tied_written = {};  // both ends of a tied wte read the file's
    m.engine->zero_grads();  // gradients of other values, as after a checkpoint load
    m.decoded_text_stale = true;
  });
}

}  // extern "C"
