#pragma once
// A checkpoint's attributes read as a resume reads them, with the same checks, for the
// Checkpointer and for the tools (CheckpointFile::header): `dtrain-ckpt verify` refuses what
// a resume would refuse.
#include <string>

#include "ckpt/h5.hpp"
#include "dtrain/ckpt/format.hpp"

namespace dtrain::ckpt {

// The largest step counter a file may hold (its own and /optimizer's).
constexpr long kMaxStep = 1L << 62;

struct Header {
  CheckpointInfo info;
  long optimizer_step = 0;  // /optimizer's `step`: AdamW's bias-correction count
};

// The root's format, version and checksum algorithm: Errc::corrupt_data for one missing, of
// another HDF5 type or a value this library does not read. where: "checkpoint '<path>'",
// the start of every message.
void check_format(hid_t file, const std::string& where);

// check_format, then the run's position and /optimizer's step: Errc::corrupt_data as there.
Header read_header(hid_t file, const std::string& where);

// /model's attributes: the shape of the built-in model the file was written for (zeros for
// a byom's). Errc::corrupt_data as read_header.
struct ModelAttributes {
  long layers = 0, heads = 0, d_model = 0, seq_len = 0, vocab = 0, tie_embeddings = 0;
};
ModelAttributes read_model_attributes(hid_t file, const std::string& where);

// H5Lexists fails on a missing intermediate group, so each level of the path is tested. A
// level HDF5 cannot read (its metadata fails its checksum) is damage, not absence:
// Errc::corrupt_data after `where`.
bool link_exists(hid_t file, const std::string& path, const std::string& where);
// The group at `path`: Errc::corrupt_data when the file has none, or HDF5 cannot open it.
h5::Handle open_group(hid_t file, const std::string& path, const std::string& where);

}  // namespace dtrain::ckpt
