#pragma once
// Checkpoint directories a run makes, and taking them away again where it saved nothing: a
// run refused at start-up (a bad --resume, a set-up that fails on every rank) leaves the file
// system as it was.
#include <string>

namespace dtrain::ckpt {

// What making a directory creates: its absolute path (links in the part that exists
// resolved), fixed when measured so that a later change of the working directory changes
// nothing, and how many levels of it (itself, its parent, ...) do not exist yet.
struct MadeDirs {
  std::string path;
  int levels = 0;
};

// Measured before making dir: levels 0 where it exists.
MadeDirs missing_dirs(const std::string& dir);

// Removes made.path, then its parents, made.levels of them at most, each only while it is
// empty: undoes the create_directories that missing_dirs measured before.
void remove_made(const MadeDirs& made);

}  // namespace dtrain::ckpt
