// The directories a checkpoint claim makes (ckpt/made_dirs.hpp): measured before they are
// made, as one absolute path, and removed again only as far as they were made and are empty.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ckpt/commit.hpp"
#include "ckpt/made_dirs.hpp"
#include "dtrain/core/error.hpp"

namespace fs = std::filesystem;
using dtrain::ckpt::missing_dirs;
using dtrain::ckpt::remove_made;

namespace {

class MadeDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("dtrain_made_" + std::to_string(::getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_ / "existing");
  }
  void TearDown() override { fs::remove_all(base_); }
  fs::path base_;
};

TEST_F(MadeDirs, MadeLevelsGoAndWhatWasThereStays) {
  const auto made = missing_dirs((base_ / "existing/a/b/").string());  // a trailing separator
  EXPECT_EQ(made.path, (base_ / "existing/a/b").string());
  EXPECT_EQ(made.levels, 2);
  fs::create_directories(made.path);
  remove_made(made);
  EXPECT_FALSE(fs::exists(base_ / "existing/a"));
  EXPECT_TRUE(fs::exists(base_ / "existing"));
  EXPECT_EQ(missing_dirs((base_ / "existing").string()).levels, 0);
}

TEST_F(MadeDirs, ANonEmptyLevelStays) {
  const auto made = missing_dirs((base_ / "existing/a/b").string());
  fs::create_directories(made.path);
  std::ofstream(base_ / "existing/a/b/step_00000001.h5") << "x";
  remove_made(made);
  EXPECT_TRUE(fs::exists(base_ / "existing/a/b/step_00000001.h5"));
  fs::remove(base_ / "existing/a/b/step_00000001.h5");
  std::ofstream(base_ / "existing/a/other") << "x";  // another file one level up
  remove_made(made);
  EXPECT_FALSE(fs::exists(base_ / "existing/a/b"));
  EXPECT_TRUE(fs::exists(base_ / "existing/a/other"));
}

TEST_F(MadeDirs, RelativeLinkedAndDotDotPathsAreFixedWhenMeasured) {
  fs::create_directory_symlink(base_ / "existing", base_ / "link");
  const fs::path cwd = fs::current_path();
  fs::current_path(base_);
  const auto made = missing_dirs("link/new/../x");  // relative, through a link, ".." past a new level
  fs::current_path(cwd);                              // a later change of directory changes nothing
  EXPECT_EQ(made.path, (fs::canonical(base_ / "existing") / "x").string());
  EXPECT_EQ(made.levels, 1);  // "new" is never made: the path measured folds it
  fs::create_directories(made.path);
  remove_made(made);
  EXPECT_FALSE(fs::exists(base_ / "existing/x"));
  EXPECT_TRUE(fs::exists(base_ / "existing"));
  EXPECT_TRUE(fs::is_symlink(base_ / "link"));
}

}  // namespace

// The entries of directories just made are synced up to the first that existed: each level's
// parent is opened (one that cannot be is an error, not a silent skip).
TEST_F(MadeDirs, MadeLevelsAreSyncedInTheirParents) {
  const auto made = missing_dirs((base_ / "existing/a/b").string());
  fs::create_directories(made.path);
  EXPECT_NO_THROW(dtrain::ckpt::sync_made_dirs(made.path, made.levels));
  EXPECT_NO_THROW(dtrain::ckpt::sync_made_dirs(made.path, 0));
  try {
    dtrain::ckpt::sync_made_dirs((base_ / "gone/a/b").string(), 1);
    FAIL() << "a parent that is not there was synced";
  } catch (const dtrain::Error& e) {
    EXPECT_EQ(e.code(), dtrain::Errc::io);
    EXPECT_NE(std::string(e.what()).find("gone/a"), std::string::npos) << e.what();
  }
}
