// TCPStore server limits over time and memory: a half-sent request's timeout, and the one
// buffer budget all connections share (large transfers refused, small ones served; parked
// requests' keys counted; connections paused behind unsent replies served once it has room).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "net/socket.h"
#include "store/tcp_store_protocol.h"
#include "tcp_store_test_util.h"
#include "tdist/error.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

using namespace std::chrono_literals;
using namespace store_test;
using store_wire::FrameWriter;

// A request that stays half-sent past TDIST_STORE_FRAME_TIMEOUT closes its connection (so
// many connections cannot each hold a frame just under the limit forever); an idle
// connection with nothing half-sent stays.
TEST(TCPStore, HalfSentRequestIsClosedAfterTheFrameTimeout) {
  ::setenv("TDIST_STORE_FRAME_TIMEOUT", "0.5", 1);
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  auto good = connect(server->port());
  ::unsetenv("TDIST_STORE_FRAME_TIMEOUT");
  auto raw = [&] { return net::connect_tcp("127.0.0.1", server->port(), Deadline::after(kShort)); };
  net::Fd slow = raw();
  net::Fd idle = raw();
  std::vector<uint8_t> frame;
  FrameWriter(frame, static_cast<uint8_t>(store_wire::Command::kSet), 1)
      .bytes(std::string_view("slow"))
      .bytes(std::string(1000, 'v'))
      .finish();
  net::write_full(slow.get(), frame.data(), 100, Deadline::after(kShort), "server");
  const auto start = Clock::now();
  EXPECT_TRUE(closed_by_peer(slow.get(), Deadline::after(kShort)));
  EXPECT_GE(Clock::now() - start, 400ms);  // not before its time
  std::vector<uint8_t> ping;
  FrameWriter(ping, static_cast<uint8_t>(store_wire::Command::kPing), 9).finish();
  net::write_full(idle.get(), ping.data(), ping.size(), Deadline::after(kShort), "server");
  uint8_t header[store_wire::kHeaderBytes];
  net::read_full(idle.get(), header, sizeof(header), Deadline::after(kShort), "server");
  EXPECT_EQ(store_wire::decode_header(header).request_id, 9u);
  good->set("k", std::string_view("v"));
  EXPECT_EQ(get_text(*good, "k"), "v");
  EXPECT_FALSE(good->check({"slow"}));
}

// All clients share TDIST_STORE_MAX_BUFFER_BYTES: a large request (counted whole from its
// first bytes) or reply that does not fit is refused, while small requests go on.
TEST(TCPStore, BufferBudgetRefusesLargeTransfersOnly) {
  ::setenv("TDIST_STORE_MAX_BUFFER_BYTES", "8388608", 1);  // 8 MiB
  ::setenv("TDIST_STORE_MAX_VALUE_BYTES", "4194304", 1);   // 4 MiB
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  auto good = connect(server->port());
  ::unsetenv("TDIST_STORE_MAX_BUFFER_BYTES");
  ::unsetenv("TDIST_STORE_MAX_VALUE_BYTES");
  const std::string three_mib(3 << 20, 't');
  good->set("three", three_mib);
  good->set("small", std::string_view("ok"));
  auto raw = [&] { return net::connect_tcp("127.0.0.1", server->port(), Deadline::after(kShort)); };
  // Replies: three pipelined GETs of 3 MiB, not read: the third does not fit.
  {
    net::Fd reader = raw();
    std::vector<uint8_t> frames;
    for (uint32_t id = 1; id <= 3; ++id) {
      FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kGet), id)
          .bytes(std::string_view("three"))
          .finish();
    }
    net::write_full(reader.get(), frames.data(), frames.size(), Deadline::after(kShort), "s");
    EXPECT_EQ(get_text(*good, "small"), "ok");  // small traffic goes on
    std::vector<uint8_t> payload;
    for (uint32_t id = 1; id <= 2; ++id) {
      const store_wire::FrameHeader h = read_reply(reader.get(), &payload);
      EXPECT_EQ(h.request_id, id);
      EXPECT_EQ(h.code, static_cast<uint8_t>(store_wire::Status::kOk))
          << std::string(payload.begin() + 4, payload.end());
    }
    const store_wire::FrameHeader h = read_reply(reader.get(), &payload);
    EXPECT_EQ(h.request_id, 3u);
    EXPECT_EQ(h.code, static_cast<uint8_t>(store_wire::Status::kError));
    const std::string why(payload.begin() + 4, payload.end());
    EXPECT_NE(why.find("TDIST_STORE_MAX_BUFFER_BYTES"), std::string::npos) << why;
  }
  // Requests: three half-sent SETs of 3 MiB; the third does not fit and is closed.
  std::vector<uint8_t> set_frame;
  FrameWriter(set_frame, static_cast<uint8_t>(store_wire::Command::kSet), 1)
      .bytes(std::string_view("big"))
      .bytes(three_mib)
      .finish();
  std::vector<net::Fd> senders;
  for (int i = 0; i < 3; ++i) {
    senders.push_back(raw());
    net::write_full(senders.back().get(), set_frame.data(), 1024, Deadline::after(kShort), "s");
    EXPECT_EQ(get_text(*good, "small"), "ok");  // processed in order
  }
  EXPECT_TRUE(closed_by_peer(senders[2].get(), Deadline::after(kShort)));
  good->set("small", std::string_view("still ok"));
  EXPECT_EQ(get_text(*good, "small"), "still ok");
  net::write_full(senders[0].get(), set_frame.data() + 1024, set_frame.size() - 1024,
                  Deadline::after(kShort), "s");
  std::vector<uint8_t> payload;
  EXPECT_EQ(read_reply(senders[0].get(), &payload).code,
            static_cast<uint8_t>(store_wire::Status::kOk));
  EXPECT_EQ(get_text(*good, "big").size(), three_mib.size());
}

// A parked WAIT's keys count against the budget: a WAIT naming 200,000 short keys (a 2.4 MB
// frame, ~8 MB of keys once decoded) fits 16 MiB once; a second does not and is refused
// before it is decoded, while small requests go on; when the first leaves, its share is
// free again.
TEST(TCPStore, ParkedWaitsCountAgainstTheBufferBudget) {
  ::setenv("TDIST_STORE_MAX_BUFFER_BYTES", "16777216", 1);  // 16 MiB
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  ::unsetenv("TDIST_STORE_MAX_BUFFER_BYTES");
  auto good = connect(server->port());
  std::vector<std::string> keys;
  for (int i = 0; i < 200'000; ++i) keys.push_back("k" + std::to_string(i));
  net::Fd waiter = net::connect_tcp("127.0.0.1", server->port(), Deadline::after(kShort));
  std::vector<uint8_t> frames;
  for (uint32_t id = 1; id <= 2; ++id) {
    FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kWait), id).keys(keys).finish();
  }
  FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kCancel), 3).u32(1).finish();
  FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kWait), 4).keys(keys).finish();
  FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kPing), 5).finish();
  net::write_full(waiter.get(), frames.data(), frames.size(), Deadline::after(kShort), "s");
  std::vector<uint8_t> payload;
  store_wire::FrameHeader h = read_reply(waiter.get(), &payload);  // the second WAIT's
  EXPECT_EQ(h.request_id, 2u);
  EXPECT_EQ(h.code, static_cast<uint8_t>(store_wire::Status::kError));
  const std::string why(payload.begin() + 4, payload.end());
  EXPECT_NE(why.find("200000 keys"), std::string::npos) << why;
  EXPECT_NE(why.find("TDIST_STORE_MAX_BUFFER_BYTES"), std::string::npos) << why;
  good->set("small", std::string_view("ok"));
  EXPECT_EQ(get_text(*good, "small"), "ok");
  EXPECT_EQ(read_reply(waiter.get(), &payload).request_id, 3u);  // CANCEL of the first
  EXPECT_EQ(payload.at(0), 1);                                   // it was parked
  EXPECT_EQ(read_reply(waiter.get(), &payload).request_id, 5u);  // the third WAIT parked: PING
}

// Over the budget, a connection with unsent replies is not read (small replies always fit,
// so without this many such connections would exceed it together); once the budget has
// room, its pipelined requests are served.
TEST(TCPStore, ConnectionsPausedForTheBudgetResumeWhenItHasRoom) {
  ::setenv("TDIST_STORE_MAX_BUFFER_BYTES", "33554432", 1);  // 32 MiB
  auto server = TCPStoreServer::start("127.0.0.1", 0);
  ::unsetenv("TDIST_STORE_MAX_BUFFER_BYTES");
  auto good = connect(server->port());
  good->set("v60", std::string(60 << 10, 'v'));  // replies under 64 KiB always fit
  good->set("s", std::string_view("1"));
  auto raw = [&] { return net::connect_tcp("127.0.0.1", server->port(), Deadline::after(kShort)); };
  auto gets = [](uint32_t n) {
    std::vector<uint8_t> frames;
    for (uint32_t id = 1; id <= n; ++id) {
      FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kGet), id)
          .bytes(std::string_view("v60"))
          .finish();
    }
    return frames;
  };
  // A fills the budget: 1000 pipelined GETs of 60 KiB (60 MB of replies, far more than the
  // sockets hold), never read.
  net::Fd hog = raw();
  std::vector<uint8_t> frames = gets(1000);
  net::write_full(hog.get(), frames.data(), frames.size(), Deadline::after(kShort), "s");
  EXPECT_EQ(get_text(*good, "s"), "1");  // others are served meanwhile
  // C pipelines 300 such GETs (18 MB) and then a SET, reading nothing: over the budget, it
  // is not read once more than 64 KiB of its replies wait, so its SET waits too.
  net::Fd paused = raw();
  frames = gets(300);
  FrameWriter(frames, static_cast<uint8_t>(store_wire::Command::kSet), 301)
      .bytes(std::string_view("c_done"))
      .bytes(std::string_view("1"))
      .finish();
  net::write_full(paused.get(), frames.data(), frames.size(), Deadline::after(kShort), "s");
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(good->check({"c_done"}));
  hog.reset();  // the budget has room again
  EXPECT_NO_THROW(good->wait({"c_done"}, Deadline::after(kShort)));
  std::vector<uint8_t> payload;
  for (uint32_t id = 1; id <= 301; ++id) {
    ASSERT_EQ(read_reply(paused.get(), &payload).request_id, id);
  }
}

}  // namespace
}  // namespace tdist
