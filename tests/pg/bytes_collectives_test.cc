// The byte-string collectives (bytes_collectives.h) over the backend under test
// (TDIST_TEST_BACKEND), ranks as threads at worlds 1-4: lengths that differ per rank,
// empty strings (also every rank's at once), NUL bytes, every root, the Bytes forms,
// several MiB; bad roots and a short scatter list raise InvalidArgument before anything
// is sent (a collective after them still works); and the default-group forms in 3 forked
// processes that meet through file:// (each backend binds its own listeners to port 0).
#include "tdist/bytes_collectives.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "pg/pg_test_util.h"
#include "tdist/distributed.h"

namespace tdist::pg_test {
namespace {

// Rank `rank`'s string in case `seed`: a length that differs per rank (0 for some),
// pattern bytes with a NUL every 7 bytes.
size_t length_for(uint64_t seed, int rank) {
  constexpr size_t kLengths[] = {0, 1, 17, 1000, 3, 4099, 0, 64};
  return kLengths[mix(seed, static_cast<uint64_t>(rank)) % std::size(kLengths)];
}

std::string make_string(uint64_t seed, int rank, size_t length) {
  std::string s(length, '\0');
  for (size_t i = 0; i < length; ++i) {
    s[i] = i % 7 == 3 ? '\0' : static_cast<char>(pattern_byte(seed, rank, 0, i));
  }
  return s;
}
std::string make_string(uint64_t seed, int rank) {
  return make_string(seed, rank, length_for(seed, rank));
}

// "n bytes, first difference at i" rather than gtest printing megabytes.
::testing::AssertionResult same_bytes(const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return ::testing::AssertionFailure() << "got " << got.size() << " bytes, want " << want.size()
                                       << "; first difference at byte " << i;
}

Bytes as_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

class BytesCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(BytesCollectivesTest, AllGather) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    for (uint64_t seed : {1, 2, 3}) {
      const std::vector<std::string> got = all_gather_bytes(pg, make_string(seed, rank));
      ASSERT_EQ(got.size(), static_cast<size_t>(pg.size())) << "rank " << rank;
      for (int r = 0; r < pg.size(); ++r) {
        EXPECT_TRUE(same_bytes(got[static_cast<size_t>(r)], make_string(seed, r)))
            << "rank " << rank << " seed " << seed << ": string of rank " << r;
      }
    }
    // Every rank empty (nothing but the lengths moves), then the Bytes form.
    const std::vector<std::string> empty = all_gather_bytes(pg, std::string_view{});
    EXPECT_EQ(empty, std::vector<std::string>(static_cast<size_t>(pg.size()))) << rank;
    const std::vector<Bytes> got = all_gather_bytes(pg, as_bytes(make_string(4, rank)));
    ASSERT_EQ(got.size(), static_cast<size_t>(pg.size())) << "rank " << rank;
    for (int r = 0; r < pg.size(); ++r) {
      EXPECT_EQ(got[static_cast<size_t>(r)], as_bytes(make_string(4, r))) << rank << " from " << r;
    }
  });
}

TEST_P(BytesCollectivesTest, BroadcastFromEveryRoot) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    for (int root = 0; root < pg.size(); ++root) {
      const uint64_t seed = 10 + static_cast<uint64_t>(root);
      const std::string want = make_string(seed, root, 100 + static_cast<size_t>(root));
      // Non-roots start with something longer, which must be replaced, not overwritten.
      std::string data = rank == root ? want : std::string(5000, 'x');
      broadcast_bytes(pg, data, root);
      EXPECT_TRUE(same_bytes(data, want)) << "rank " << rank << " root " << root;
      // An empty root string empties everyone's.
      std::string empty = rank == root ? "" : "not empty";
      broadcast_bytes(pg, empty, root);
      EXPECT_EQ(empty, "") << "rank " << rank << " root " << root;
      Bytes bytes = rank == root ? as_bytes(want) : Bytes{1, 2, 3};
      broadcast_bytes(pg, bytes, root);
      EXPECT_EQ(bytes, as_bytes(want)) << "rank " << rank << " root " << root;
    }
  });
}

TEST_P(BytesCollectivesTest, GatherToEveryRoot) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    for (int root = 0; root < pg.size(); ++root) {
      const uint64_t seed = 20 + static_cast<uint64_t>(root);
      const std::vector<std::string> got = gather_bytes(pg, make_string(seed, rank), root);
      if (rank != root) {
        EXPECT_TRUE(got.empty()) << "rank " << rank << " (not the root) got " << got.size();
      } else {
        ASSERT_EQ(got.size(), static_cast<size_t>(pg.size()));
        for (int r = 0; r < pg.size(); ++r) {
          EXPECT_TRUE(same_bytes(got[static_cast<size_t>(r)], make_string(seed, r)))
              << "root " << root << ": string of rank " << r;
        }
      }
      const std::vector<std::string> empty = gather_bytes(pg, "", root);
      EXPECT_EQ(empty.size(), rank == root ? static_cast<size_t>(pg.size()) : 0) << rank;
      for (const std::string& s : empty) EXPECT_EQ(s, "");
      const std::vector<Bytes> bytes = gather_bytes(pg, as_bytes(make_string(seed, rank)), root);
      ASSERT_EQ(bytes.size(), rank == root ? static_cast<size_t>(pg.size()) : 0) << rank;
      for (size_t r = 0; r < bytes.size(); ++r) {
        EXPECT_EQ(bytes[r], as_bytes(make_string(seed, static_cast<int>(r)))) << "from " << r;
      }
    }
  });
}

TEST_P(BytesCollectivesTest, ScatterFromEveryRoot) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    for (int root = 0; root < pg.size(); ++root) {
      const uint64_t seed = 30 + static_cast<uint64_t>(root);
      std::vector<std::string> pieces;
      for (int r = 0; r < pg.size(); ++r) pieces.push_back(make_string(seed, r));
      // Non-roots pass {} or a list of the wrong length: both are ignored there.
      const std::string got =
          rank == root ? scatter_bytes(pg, pieces, root)
                       : (rank % 2 == 0 ? scatter_bytes(pg, {}, root)
                                        : scatter_bytes(pg, std::vector<std::string>(7), root));
      EXPECT_TRUE(same_bytes(got, make_string(seed, rank))) << "rank " << rank << " root " << root;
      const std::string empty =
          scatter_bytes(pg, std::vector<std::string>(static_cast<size_t>(pg.size())), root);
      EXPECT_EQ(empty, "") << "rank " << rank << " root " << root;
      std::vector<Bytes> byte_pieces;
      if (rank == root) {
        for (const std::string& p : pieces) byte_pieces.push_back(as_bytes(p));
      }
      const Bytes bytes = scatter_bytes(pg, byte_pieces, root);
      EXPECT_EQ(bytes, as_bytes(make_string(seed, rank))) << "rank " << rank << " root " << root;
    }
  });
}

// Several MiB per rank, of different sizes, through all four.
TEST_P(BytesCollectivesTest, SeveralMebibytes) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  constexpr size_t kMiB = size_t{1} << 20;
  auto big = [](int r) { return make_string(40, r, 3 * kMiB + 1000 * static_cast<size_t>(r)); };
  world.run([&](int rank, ProcessGroup& pg) {
    const int root = pg.size() - 1;
    const std::vector<std::string> all = all_gather_bytes(pg, big(rank));
    ASSERT_EQ(all.size(), static_cast<size_t>(pg.size()));
    for (int r = 0; r < pg.size(); ++r) {
      EXPECT_TRUE(same_bytes(all[static_cast<size_t>(r)], big(r))) << rank << " from " << r;
    }
    std::string data = rank == root ? make_string(41, root, 5 * kMiB + 3) : "";
    broadcast_bytes(pg, data, root);
    EXPECT_TRUE(same_bytes(data, make_string(41, root, 5 * kMiB + 3))) << rank;
    const std::vector<std::string> gathered = gather_bytes(pg, big(rank), root);
    ASSERT_EQ(gathered.size(), rank == root ? static_cast<size_t>(pg.size()) : 0) << rank;
    for (size_t r = 0; r < gathered.size(); ++r) {
      EXPECT_TRUE(same_bytes(gathered[r], big(static_cast<int>(r)))) << "from " << r;
    }
    std::vector<std::string> pieces;
    if (rank == root) {
      for (int r = 0; r < pg.size(); ++r) pieces.push_back(big(r));
    }
    EXPECT_TRUE(same_bytes(scatter_bytes(pg, pieces, root), big(rank))) << rank;
  });
}

// Bad input on one rank at a time (the others do not call): InvalidArgument naming the
// call, and nothing was sent, since the collective all ranks run next still matches up.
TEST_P(BytesCollectivesTest, BadRootsAndShortScatterListsSendNothing) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  auto expect_invalid = [](int rank, const char* op, const std::function<void()>& call) {
    try {
      call();
      ADD_FAILURE() << "rank " << rank << ": " << op << " did not throw";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << rank << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << rank << ": " << op << " threw " << e.what();
    }
  };
  world.run([&](int rank, ProcessGroup& pg) {
    const int w = pg.size();
    for (int culprit = 0; culprit < w; ++culprit) {
      if (rank == culprit) {
        for (int root : {-1, w, w + 5}) {
          std::string s = "abc";
          Bytes b = {1, 2};
          expect_invalid(rank, "broadcast_bytes", [&] { broadcast_bytes(pg, s, root); });
          expect_invalid(rank, "broadcast_bytes", [&] { broadcast_bytes(pg, b, root); });
          expect_invalid(rank, "gather_bytes", [&] { gather_bytes(pg, "abc", root); });
          expect_invalid(rank, "scatter_bytes", [&] { scatter_bytes(pg, {}, root); });
          EXPECT_EQ(s, "abc");
        }
        // The root with a list whose length is not size().
        expect_invalid(rank, "scatter_bytes", [&] { scatter_bytes(pg, {}, rank); });
        expect_invalid(rank, "scatter_bytes", [&] {
          scatter_bytes(pg, std::vector<std::string>(static_cast<size_t>(w + 1)), rank);
        });
        expect_invalid(rank, "scatter_bytes",
                       [&] { scatter_bytes(pg, std::vector<Bytes>(1 + (w == 1)), rank); });
      }
      const std::vector<std::string> got = all_gather_bytes(pg, make_string(50, rank));
      ASSERT_EQ(got.size(), static_cast<size_t>(w)) << "after rank " << culprit << "'s calls";
      for (int r = 0; r < w; ++r) {
        EXPECT_TRUE(same_bytes(got[static_cast<size_t>(r)], make_string(50, r)))
            << "rank " << rank << " after rank " << culprit << "'s calls";
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, BytesCollectivesTest, ::testing::Values(1, 2, 3, 4), world_name);

// ---- the default group, in real processes ---------------------------------------------

// One rank's part (in a forked child): joins through file://, runs each default-group
// form, checks the result. Returns the exit code: 0, or the number of the failed check.
int default_group_rank(const std::string& url, int rank, int world) {
  auto fail = [rank](int code, const std::string& what) {
    std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
    return code;
  };
  try {
    init_process_group(test_backend(), url, world, rank, std::chrono::seconds(20));
    const std::vector<std::string> all = all_gather_bytes(make_string(60, rank));
    for (int r = 0; r < world; ++r) {
      if (all.size() != static_cast<size_t>(world) ||
          all[static_cast<size_t>(r)] != make_string(60, r)) {
        return fail(10, "all_gather_bytes: wrong string of rank " + std::to_string(r));
      }
    }
    std::string data = rank == 1 ? make_string(61, 1, 70'000) : "old";
    broadcast_bytes(data, 1);
    if (data != make_string(61, 1, 70'000)) return fail(11, "broadcast_bytes: wrong string");
    const std::vector<std::string> gathered = gather_bytes(make_string(62, rank), 2);
    if (gathered.size() != (rank == 2 ? static_cast<size_t>(world) : 0)) {
      return fail(12, "gather_bytes: " + std::to_string(gathered.size()) + " strings");
    }
    for (size_t r = 0; r < gathered.size(); ++r) {
      if (gathered[r] != make_string(62, static_cast<int>(r))) {
        return fail(13, "gather_bytes: wrong string of rank " + std::to_string(r));
      }
    }
    std::vector<std::string> pieces;
    if (rank == 0) {
      for (int r = 0; r < world; ++r) pieces.push_back(make_string(63, r));
    }
    if (scatter_bytes(pieces, 0) != make_string(63, rank)) {
      return fail(14, "scatter_bytes: wrong string");
    }
    get_default_group()->barrier()->wait();
    destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    return fail(20, std::string("threw: ") + e.what());
  }
}

TEST(BytesCollectivesDefaultGroupTest, ThreeProcesses) {
  constexpr int kWorld = 3;
  constexpr auto kLimit = std::chrono::seconds(40);
  std::string tmpl = (std::filesystem::temp_directory_path() / "tdist_bytes_XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string url = "file://" + tmpl + "/store";
  // Forked before this process starts any thread (each CTest test is its own process;
  // run alone, earlier tests joined theirs), so the children may run tdist.
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(default_group_rank(url, r, kWorld));
    EXPECT_GT(pid, 0) << "fork failed";
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + kLimit;
  std::vector<int> status(pids.size(), -1);
  size_t left = pids.size();
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int st = 0;
      if (status[i] == -1 && pids[i] > 0 && ::waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        status[i] = st;
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] <= 0) continue;
    if (status[i] == -1) {
      ::kill(pids[i], SIGKILL);
      ::waitpid(pids[i], nullptr, 0);
      ADD_FAILURE() << "rank " << i << " still ran after " << kLimit.count() << " s; killed";
    } else {
      EXPECT_TRUE(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0)
          << "rank " << i << " ended with status " << status[i] << " (exit code "
          << (WIFEXITED(status[i]) ? WEXITSTATUS(status[i]) : -1) << "; see its stderr)";
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
}

TEST(BytesCollectivesDefaultGroupTest, WithoutADefaultGroupItIsAnError) {
  ASSERT_FALSE(is_initialized());
  std::string s = "x";
  EXPECT_THROW(all_gather_bytes("x"), Error);
  EXPECT_THROW(broadcast_bytes(s, 0), Error);
  EXPECT_THROW(gather_bytes("x", 0), Error);
  EXPECT_THROW(scatter_bytes({}, 0), Error);
}

}  // namespace
}  // namespace tdist::pg_test
