#pragma once
// File-system side of a checkpoint: the atomic publish of a finished file, the `latest`
// pointer, pruning, and finding what to resume from. Called on one rank only.
#include <string>
#include <vector>

namespace dtrain::ckpt {

// Parses "step_<8+ digits>.h5"; -1 for any other name (temporaries included).
long step_of_name(const std::string& name);
// A name that a save directory's checkpoints write, replace or remove: step_*.h5, `latest`,
// their temporaries (.tmp), the directory's lock file.
bool is_checkpoint_file_name(const std::string& name);
// Complete checkpoints in dir (step_*.h5), oldest first.
std::vector<std::string> list_checkpoints(const std::string& dir);
// fsync tmp, rename it to final_path, fsync the directory: all or nothing.
void publish(const std::string& tmp, const std::string& final_path);
// fsyncs the parent of path and of each directory above it, `levels` of them: directories
// just made, whose entries a crash could otherwise lose with everything saved into them.
void sync_made_dirs(const std::string& path, int levels);
// Points dir/latest at name (written to a temporary file, then renamed over it).
void write_latest(const std::string& dir, const std::string& name);
// The name in dir/latest (its content without the final line break and trailing spaces), ""
// when there is none.
std::string read_latest(const std::string& dir);
// Deletes all but the newest `keep` checkpoints up to `current`'s step (later ones are
// another run's and stay), never `current`, and stale temporaries.
void prune(const std::string& dir, int keep, const std::string& current);

}  // namespace dtrain::ckpt
