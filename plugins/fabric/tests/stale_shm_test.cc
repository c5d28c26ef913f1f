// RemoveStaleRegions: which files in a /dev/shm-like directory count as
// regions that libfabric's shm provider left behind (stale_shm.h), on a
// scratch directory with hand-made names, ages and pids.
#include "stale_shm.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

namespace ferry_fabric {
namespace {

class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/ferry-stale-shm-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~ScratchDir() {
    for (const std::string& n : made_) {
      std::remove((path_ + "/" + n).c_str());
      rmdir((path_ + "/" + n).c_str());
    }
    rmdir(path_.c_str());
  }
  void File(const std::string& name) {
    FILE* f = std::fopen((path_ + "/" + name).c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
    made_.push_back(name);
  }
  void Dir(const std::string& name) {
    ASSERT_EQ(mkdir((path_ + "/" + name).c_str(), 0700), 0);
    made_.push_back(name);
  }
  bool Exists(const std::string& name) const {
    struct stat st;
    return lstat((path_ + "/" + name).c_str(), &st) == 0;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> made_;
};

double Now() {
  return static_cast<double>(std::time(nullptr));
}

// Which pids "exist" in a test: 4242 (this process) and 7000.
bool Alive(pid_t pid) {
  return pid == 4242 || pid == 7000;
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(FabricStaleShm, RemovesThisPidsOlderRegionsAndDeadProcessesRegions) {
  ScratchDir d;
  for (const char* n : {"4242:0:0", "4242:0:1", "4242:1:0",  // this pid's, older
                        "6000:0:0", "6000:0:1",              // a dead process's
                        "7000:0:0",                          // a live process's
                        "4242:x:0", "4242:0", "4242:0:", "4242::0", "4242:0:0:0",
                        "fi_4242:0:0", "6000:0:0.lock"}) {
    d.File(n);
  }
  d.Dir("6000:3:3");  // not a regular file
  // This "process" (4242) started a minute after the files were made.
  const std::vector<std::string> removed =
      RemoveStaleRegions(d.path(), 4242, getuid(), Now() + 60, Alive);
  const std::vector<std::string> stale = {"4242:0:0", "4242:0:1", "4242:1:0", "6000:0:0",
                                          "6000:0:1"};
  EXPECT_EQ(Sorted(removed), stale);
  for (const std::string& gone : stale) EXPECT_FALSE(d.Exists(gone)) << gone;
  for (const char* kept : {"7000:0:0", "4242:x:0", "4242:0", "4242:0:", "4242::0",
                           "4242:0:0:0", "fi_4242:0:0", "6000:0:0.lock", "6000:3:3"}) {
    EXPECT_TRUE(d.Exists(kept)) << kept;
  }
}

TEST(FabricStaleShm, KeepsRegionsMadeSinceTheProcessStarted) {
  // Another context of the same process, or other libfabric use in it:
  // newer than the process, so never removed (nor within the margin).
  ScratchDir d;
  d.File("4242:0:0");
  EXPECT_TRUE(RemoveStaleRegions(d.path(), 4242, getuid(), Now() - 60, Alive).empty());
  EXPECT_TRUE(RemoveStaleRegions(d.path(), 4242, getuid(), Now() + 1, Alive).empty());
  EXPECT_TRUE(d.Exists("4242:0:0"));
}

TEST(FabricStaleShm, KeepsOtherUsersRegions) {
  ScratchDir d;
  d.File("4242:0:0");
  d.File("6000:0:0");
  EXPECT_TRUE(
      RemoveStaleRegions(d.path(), 4242, getuid() + 1, Now() + 60, Alive).empty());
  EXPECT_TRUE(d.Exists("4242:0:0"));
  EXPECT_TRUE(d.Exists("6000:0:0"));
}

TEST(FabricStaleShm, MissingDirectoryIsNothingToDo) {
  EXPECT_TRUE(
      RemoveStaleRegions("/nonexistent-ferry-dir", 4242, getuid(), Now() + 60, Alive)
          .empty());
}

}  // namespace
}  // namespace ferry_fabric
