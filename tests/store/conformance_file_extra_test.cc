// FileStore beyond the conformance suite: a torn last record (a writer killed mid-write)
// is ignored and cut off, num_workers removes the file after the last worker, and
// processes hammering add on one file reach an exact total.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>

#include "store/conformance.h"
#include "tdist/error.h"
#include "tdist/file_store.h"

namespace tdist_test {
namespace {

using std::chrono::milliseconds;
using tdist::Bytes;
using tdist::Deadline;
using tdist::FileStore;
using tdist::to_bytes;

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

off_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

// A temporary store file, removed at the end of the test.
class FileStoreTest : public ::testing::Test {
 protected:
  void TearDown() override { ::unlink(path_.c_str()); }
  std::string path_ = temp_store_path();
};

TEST_F(FileStoreTest, PathAndPersistence) {
  {
    FileStore store(path_);
    EXPECT_EQ(store.path(), path_);
    store.set("kept", std::string_view("yes"));
  }
  FileStore reopened(path_);
  EXPECT_EQ(reopened.get("kept", Deadline::after(kReleaseWait)), to_bytes("yes"));
  EXPECT_EQ(reopened.num_keys(), 1);  // the internal counters are not user keys
}

TEST_F(FileStoreTest, TornLastRecordIsIgnoredAndCutOff) {
  {
    FileStore store(path_);
    store.set("a", std::string_view("1"));
    store.set("b", std::string_view("2"));
  }
  off_t torn_from = 0;
  off_t torn_to = 0;
  {
    FileStore store(path_);
    torn_from = file_size(path_);
    store.set("c", Bytes(100, 'c'));
    torn_to = file_size(path_);
  }
  ASSERT_GT(torn_to, torn_from);
  // Tear "c" in its body, then (second round) in its header: as a writer killed mid-write.
  for (off_t keep : {torn_from + (torn_to - torn_from) / 2, torn_from + 3}) {
    ASSERT_EQ(::truncate(path_.c_str(), keep), 0);
    FileStore store(path_);
    EXPECT_EQ(store.get("a", Deadline::after(kReleaseWait)), to_bytes("1"));
    EXPECT_EQ(store.get("b", Deadline::after(kReleaseWait)), to_bytes("2"));
    EXPECT_FALSE(store.check({"c"}));
    store.set("d", std::string_view("after the tear"));
    FileStore other(path_);
    EXPECT_FALSE(other.check({"c"}));
    EXPECT_EQ(other.get("d", Deadline::after(kReleaseWait)), to_bytes("after the tear"));
    EXPECT_EQ(other.num_keys(), 3);
    other.delete_key("d");
    // Put "c" back at the end so the next round tears it again.
    torn_from = file_size(path_);
    store.set("c", Bytes(100, 'c'));
    torn_to = file_size(path_);
  }
}

TEST_F(FileStoreTest, WriterKilledMidWriteLeavesAUsableStore) {
  constexpr size_t kValueSize = 256 * 1024;
  const pid_t pid = fork_child([&] {
    FileStore store(path_);
    for (uint8_t round = 0;; ++round) {
      store.set("k", Bytes(kValueSize, round));
      store.add("rounds", 1);
    }
    return 0;
  });
  ASSERT_GT(pid, 0);
  FileStore store(path_);
  store.wait({"rounds"}, Deadline::after(kReleaseWait));
  std::this_thread::sleep_for(milliseconds(30));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status));

  FileStore after(path_);
  const Bytes value = after.get("k", Deadline::after(kReleaseWait));
  ASSERT_EQ(value.size(), kValueSize);
  EXPECT_EQ(Bytes(kValueSize, value[0]), value);  // one whole write, never a mix
  after.set("fresh", std::string_view("ok"));
  EXPECT_EQ(store.get("fresh", Deadline::after(kReleaseWait)), to_bytes("ok"));
  EXPECT_GE(store.add("rounds", 0), 1);
}

TEST_F(FileStoreTest, NumWorkersRemovesTheFileAfterTheLast) {
  auto a = std::make_unique<FileStore>(path_, 3);
  auto b = std::make_unique<FileStore>(path_, 3);
  auto c = std::make_unique<FileStore>(path_, 3);
  a->set("x", std::string_view("1"));
  a.reset();
  EXPECT_TRUE(file_exists(path_));
  EXPECT_EQ(c->get("x", Deadline::after(kReleaseWait)), to_bytes("1"));
  b.reset();
  EXPECT_TRUE(file_exists(path_));
  c.reset();
  EXPECT_FALSE(file_exists(path_));

  // The path is free again: a new store starts empty.
  FileStore fresh(path_);
  EXPECT_EQ(fresh.num_keys(), 0);
  EXPECT_FALSE(fresh.check({"x"}));
}

TEST_F(FileStoreTest, WithoutNumWorkersTheFileStays) {
  {
    FileStore a(path_);
    FileStore b(path_);
    a.set("x", std::string_view("1"));
  }
  EXPECT_TRUE(file_exists(path_));
}

TEST_F(FileStoreTest, NumWorkersCountsAcrossProcesses) {
  constexpr int kWorkers = 3;
  auto mine = std::make_unique<FileStore>(path_, kWorkers);
  std::vector<pid_t> pids;
  for (int c = 0; c < kWorkers - 1; ++c) {
    pids.push_back(fork_child([&, c] {
      FileStore store(path_, kWorkers);
      store.set("child/" + std::to_string(c), std::string_view("done"));
      return 0;  // the destructor counts this worker finished
    }));
  }
  EXPECT_EQ(wait_children(pids, Deadline::after(kReleaseWait)), "");
  EXPECT_TRUE(mine->check({"child/0", "child/1"}));
  EXPECT_TRUE(file_exists(path_));
  mine.reset();
  EXPECT_FALSE(file_exists(path_));
}

TEST_F(FileStoreTest, ProcessesHammeringAddReachAnExactTotal) {
  constexpr int kChildren = 2;
  constexpr int kAdds = 2000;
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    pids.push_back(fork_child([&] {
      FileStore store(path_);
      for (int i = 0; i < kAdds; ++i) store.add("total", 1);
      return 0;
    }));
  }
  FileStore store(path_);
  for (int i = 0; i < kAdds; ++i) store.add("total", 1);
  EXPECT_EQ(wait_children(pids, Deadline::after(kReleaseWait)), "");
  EXPECT_EQ(store.add("total", 0), (kChildren + 1) * kAdds);
  EXPECT_EQ(FileStore(path_).get("total", Deadline::after(kReleaseWait)),
            to_bytes(std::to_string((kChildren + 1) * kAdds)));
}

TEST_F(FileStoreTest, AddRejectsNonIntegerValues) {
  FileStore store(path_);
  store.set("text", std::string_view("twelve"));
  EXPECT_THROW(store.add("text", 1), tdist::InvalidArgument);
  EXPECT_EQ(store.get("text", Deadline::after(kReleaseWait)), to_bytes("twelve"));
}

TEST(FileStore, RejectsAnEmptyPathAndUnopenableFiles) {
  EXPECT_THROW(FileStore(""), tdist::InvalidArgument);
  EXPECT_THROW(FileStore("/nonexistent_dir_for_tdist/store"), tdist::Error);
}

}  // namespace
}  // namespace tdist_test
