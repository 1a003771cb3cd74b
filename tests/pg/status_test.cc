// The status reply (diag/status.h): the JSON one rank's answer travels in between the ranks
// and tdist-status, written by encode_status and read by decode_status. The job-level
// behaviour (tdist-status, the wait warnings) is hang_test's.
#include "diag/status.h"

#include <gtest/gtest.h>

#include <string>

namespace tdist::diag {
namespace {

GroupStatus group(const std::string& name, const std::string& state) {
  GroupStatus g;
  g.name = name;
  g.backend = "tcp";
  g.rank = 1;
  g.size = 3;
  g.global_ranks = {4, 5, 7};
  g.last_seq = 41;
  g.last_op = "all_reduce #41 f32 x4 sum";
  g.current_state = state;
  if (state != "-") {
    g.current_seq = 42;
    g.current_ms = 12345;
    g.current_op = "broadcast #42 f32 x8 root 0";
  }
  return g;
}

void expect_same(const GroupStatus& a, const GroupStatus& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.global_ranks, b.global_ranks);
  EXPECT_EQ(a.last_seq, b.last_seq);
  EXPECT_EQ(a.last_op, b.last_op);
  EXPECT_EQ(a.current_seq, b.current_seq);
  EXPECT_EQ(a.current_state, b.current_state);
  EXPECT_EQ(a.current_ms, b.current_ms);
  EXPECT_EQ(a.current_op, b.current_op);
}

TEST(StatusReply, IsOneJsonObjectWithTheFieldsInOrder) {
  RankStatus s;
  s.rank = 5;
  s.host = "node1";
  s.pid = 4242;
  s.groups.push_back(group("default", "started"));
  EXPECT_EQ(encode_status(s),
            R"({"rank":5,"host":"node1","pid":4242,"groups":[{"name":"default","backend":"tcp",)"
            R"("rank":1,"size":3,"global_ranks":[4,5,7],"last_seq":41,)"
            R"("last_op":"all_reduce #41 f32 x4 sum","current_seq":42,"current_state":"started",)"
            R"("current_ms":12345,"current_op":"broadcast #42 f32 x8 root 0"}]})");
}

// Tabs, newlines and quotes in names (which a line- and tab-separated answer could not
// carry) come back as they were; no groups, idle groups and busy ones alike.
TEST(StatusReply, DecodesWhatItEncodes) {
  RankStatus s;
  s.rank = 7;
  s.host = "host\twith \"odd\"\nname";
  s.pid = 1LL << 40;
  RankStatus none = decode_status(encode_status(s));
  EXPECT_EQ(none.rank, 7);
  EXPECT_EQ(none.host, s.host);
  EXPECT_EQ(none.pid, s.pid);
  EXPECT_TRUE(none.groups.empty());

  s.groups.push_back(group("split/1\tcolor\n0", "-"));
  s.groups.push_back(group("default", "queued"));
  const RankStatus back = decode_status(encode_status(s));
  ASSERT_EQ(back.groups.size(), 2u);
  expect_same(back.groups[0], s.groups[0]);
  expect_same(back.groups[1], s.groups[1]);
}

TEST(StatusReply, InvalidUtf8BecomesReplacementCharacters) {
  RankStatus s;
  s.rank = 0;
  s.groups.push_back(group("bad\xff name", "-"));
  const RankStatus back = decode_status(encode_status(s));
  ASSERT_EQ(back.groups.size(), 1u);
  EXPECT_EQ(back.groups[0].name, "bad\xef\xbf\xbd name");
}

// What it cannot read stays as a default-made RankStatus/GroupStatus has it.
TEST(StatusReply, UnreadableFieldsStayDefault) {
  const RankStatus old_format = decode_status("rank\t1\thost\t2\n");
  EXPECT_EQ(old_format.rank, -1);
  EXPECT_TRUE(old_format.host.empty());
  EXPECT_TRUE(old_format.groups.empty());
  EXPECT_EQ(decode_status("").rank, -1);
  EXPECT_EQ(decode_status("[1,2]").rank, -1);

  const RankStatus odd = decode_status(
      R"({"rank":"3","pid":9,"groups":[{"name":4,"size":2,"global_ranks":[0,"x"]},5]})");
  EXPECT_EQ(odd.rank, -1);
  EXPECT_EQ(odd.pid, 9);
  ASSERT_EQ(odd.groups.size(), 1u);
  EXPECT_EQ(odd.groups[0].name, "");
  EXPECT_EQ(odd.groups[0].size, 2);
  EXPECT_EQ(odd.groups[0].global_ranks, (std::vector<int>{0, -1}));
  EXPECT_EQ(odd.groups[0].last_seq, -1);
  EXPECT_EQ(odd.groups[0].current_seq, -1);
}

}  // namespace
}  // namespace tdist::diag
