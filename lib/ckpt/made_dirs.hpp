#pragma once
// Checkpoint directories a run makes, and taking them away again where it saved nothing: a
// run refused at start-up (a bad --resume, a failed set-up) leaves the file system as it was.
#include <string>

namespace dtrain::ckpt {

// How many levels of dir (dir itself, its parent, ...) do not exist yet: what making it
// would create. 0: dir exists.
int missing_levels(const std::string& dir);

// Removes dir, then its parents, `levels` of them at most, each only while it is empty:
// undoes a create_directories that missing_levels(dir) measured before.
void remove_made_levels(const std::string& dir, int levels);

}  // namespace dtrain::ckpt
