#pragma once
// Where the pieces of an interleaved model live, shared by the schedules and the executor.
// Piece p = chunk * N + stage (see dtrain/parallel/pipeline_schedule.hpp).
#include "dtrain/parallel/pipeline_schedule.hpp"

namespace dtrain::parallel::pp {

struct ChunkLocation {
  int stage = -1;  // -1: no such piece (before the first or after the last)
  int chunk = -1;
};

inline int piece_of(int stages, int stage, int chunk) { return chunk * stages + stage; }

inline ChunkLocation location_of_piece(int stages, int virtual_stages, int piece) {
  if (piece < 0 || piece >= stages * virtual_stages) return {};
  return {piece % stages, piece / stages};
}

// The piece feeding (stage, chunk), and the one it feeds.
inline ChunkLocation previous_piece(int stages, int virtual_stages, int stage, int chunk) {
  return location_of_piece(stages, virtual_stages, piece_of(stages, stage, chunk) - 1);
}
inline ChunkLocation next_piece(int stages, int virtual_stages, int stage, int chunk) {
  return location_of_piece(stages, virtual_stages, piece_of(stages, stage, chunk) + 1);
}

// Megatron's interleaved 1F1B: the micro-batch and chunk of this rank's k-th forward (or
// backward) of the M*V it runs. Micro-batches go in groups of N through chunk 0, then the
// same group through chunk 1, ...; backwards visit the chunks in reverse.
int interleaved_micro_batch(int stages, int virtual_stages, int k);
int interleaved_chunk(int stages, int virtual_stages, int k, bool forward);
// Forwards an interleaved rank runs before its first backward.
int interleaved_warmup(int stages, int stage, int micro_batches, int virtual_stages);

}  // namespace dtrain::parallel::pp
