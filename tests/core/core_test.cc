// Unit tests for the rest of core: dtypes, reduce ops, the settings registry, logging,
// errors and deadlines.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <type_traits>

#include "support/scoped_env.h"
#include "tdist/deadline.h"
#include "tdist/dtype.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/reduce_op.h"
#include "tdist/settings.h"

namespace tdist {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using test_support::ScopedEnv;

// ---- dtypes ----------------------------------------------------------------------------

TEST(DType, SizesAndKinds) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI8), 1u);
  EXPECT_EQ(dtype_size(DType::kU8), 1u);
  EXPECT_EQ(dtype_size(DType::kI32), 4u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
  EXPECT_TRUE(is_floating(DType::kBF16));
  EXPECT_FALSE(is_floating(DType::kI64));
  EXPECT_TRUE(is_integral(DType::kU8));
  EXPECT_FALSE(is_integral(DType::kBool));
  EXPECT_FALSE(is_integral(DType::kF16));
}

TEST(DType, NamesParseBack) {
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_EQ(dtype_name(DType::kBool), "bool");
  for (DType t : kAllDTypes) {
    EXPECT_EQ(parse_dtype(dtype_name(t)), t) << dtype_name(t);
  }
  EXPECT_EQ(parse_dtype("float32"), DType::kF32);
  EXPECT_EQ(parse_dtype("half"), DType::kF16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("long"), DType::kI64);
  EXPECT_EQ(parse_dtype("int"), DType::kI32);
  EXPECT_EQ(parse_dtype("uint8"), DType::kU8);
  EXPECT_EQ(parse_dtype("f8"), std::nullopt);
  EXPECT_EQ(parse_dtype(""), std::nullopt);
}

// ---- reduce ops -----------------------------------------------------------------------

TEST(ReduceOp, NamesParseBackCaseInsensitively) {
  for (ReduceOpKind k : kAllReduceOpKinds) {
    EXPECT_EQ(parse_reduce_op(reduce_op_name(k)), k) << reduce_op_name(k);
  }
  EXPECT_EQ(parse_reduce_op("SUM"), ReduceOpKind::kSum);
  EXPECT_EQ(parse_reduce_op("PREMUL_SUM"), ReduceOpKind::kPremulSum);
  EXPECT_EQ(parse_reduce_op("product"), ReduceOpKind::kProd);
  EXPECT_EQ(parse_reduce_op("Avg"), ReduceOpKind::kAvg);
  EXPECT_EQ(parse_reduce_op("median"), std::nullopt);
  EXPECT_EQ(reduce_op_name(ReduceOpKind::kBxor), "bxor");
}

TEST(ReduceOp, PremulSumCarriesItsScale) {
  constexpr ReduceOp op = ReduceOp::premul_sum(0.25);
  EXPECT_EQ(op.kind, ReduceOpKind::kPremulSum);
  EXPECT_EQ(op.scale, 0.25);
  EXPECT_NE(op, ReduceOp::premul_sum(0.5));
  EXPECT_EQ(ReduceOp(ReduceOpKind::kMax), ReduceOp(ReduceOpKind::kMax));
}

TEST(ReduceOp, SupportTable) {
  for (DType t : kAllDTypes) {
    EXPECT_TRUE(is_supported(ReduceOpKind::kSum, t));
    EXPECT_TRUE(is_supported(ReduceOpKind::kMin, t));
    EXPECT_EQ(is_supported(ReduceOpKind::kBand, t), !is_floating(t)) << dtype_name(t);
    EXPECT_EQ(is_supported(ReduceOpKind::kPremulSum, t), is_floating(t)) << dtype_name(t);
    EXPECT_EQ(is_supported(ReduceOpKind::kAvg, t), t != DType::kBool) << dtype_name(t);
  }
}

TEST(ReduceOp, ValidateNamesOpAndDtype) {
  EXPECT_NO_THROW(validate(ReduceOpKind::kBxor, DType::kI64));
  try {
    validate(ReduceOpKind::kBand, DType::kF32);
    FAIL() << "bitwise and on f32 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "band")) << e.what();
    EXPECT_TRUE(contains(e.what(), "f32")) << e.what();
  }
  try {
    validate(ReduceOp::premul_sum(2.0), DType::kI8);
    FAIL() << "premul_sum on i8 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "premul_sum")) << e.what();
    EXPECT_TRUE(contains(e.what(), "i8")) << e.what();
  }
}

// ---- settings --------------------------------------------------------------------------

TEST(Settings, RegistryIsSortedAndDescribed) {
  auto all = all_settings();
  ASSERT_FALSE(all.empty());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].name.substr(0, 6), "TDIST_") << all[i].name;
    EXPECT_FALSE(all[i].description.empty()) << all[i].name;
    if (i > 0) {
      EXPECT_LT(all[i - 1].name, all[i].name);
    }
  }
  EXPECT_EQ(find_setting("TDIST_LOG_LEVEL").default_value, "warn");
  EXPECT_EQ(find_setting("TDIST_REDUCE_ISA").default_value, "auto");
}

TEST(Settings, UndeclaredNameThrows) {
  try {
    find_setting("TDIST_NO_SUCH_THING");
    FAIL() << "undeclared setting was found";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "TDIST_NO_SUCH_THING")) << e.what();
  }
  EXPECT_THROW(setting_int("TDIST_NO_SUCH_THING"), InvalidArgument);
  EXPECT_THROW(setting_string("RANK"), InvalidArgument);
  EXPECT_THROW(setting_is_set("RANK"), InvalidArgument);
}

TEST(Settings, DefaultsAndEnvironmentOverrides) {
  {
    ScopedEnv unset("TDIST_STORE_MAX_KEY_BYTES", std::nullopt);
    EXPECT_EQ(setting_int("TDIST_STORE_MAX_KEY_BYTES"), 4096);
    EXPECT_FALSE(setting_is_set("TDIST_STORE_MAX_KEY_BYTES"));
  }
  {
    ScopedEnv empty("TDIST_STORE_MAX_KEY_BYTES", "");
    EXPECT_EQ(setting_int("TDIST_STORE_MAX_KEY_BYTES"), 4096);
    EXPECT_FALSE(setting_is_set("TDIST_STORE_MAX_KEY_BYTES"));
  }
  {
    ScopedEnv set("TDIST_STORE_MAX_KEY_BYTES", "17");
    EXPECT_TRUE(setting_is_set("TDIST_STORE_MAX_KEY_BYTES"));
    EXPECT_EQ(setting_int("TDIST_STORE_MAX_KEY_BYTES"), 17);
    EXPECT_EQ(setting_string("TDIST_STORE_MAX_KEY_BYTES"), "17");
  }
  {
    ScopedEnv set("TDIST_STORE_TIMEOUT", "1.5");
    EXPECT_EQ(setting_double("TDIST_STORE_TIMEOUT"), 1.5);
    EXPECT_EQ(setting_seconds("TDIST_STORE_TIMEOUT"), std::chrono::milliseconds(1500));
  }
  for (const char* yes : {"1", "TRUE", "yes", "On"}) {
    ScopedEnv set("TDIST_STORE_TIMEOUT", yes);
    EXPECT_TRUE(setting_bool("TDIST_STORE_TIMEOUT")) << yes;
  }
  for (const char* no : {"0", "false", "NO", "off"}) {
    ScopedEnv set("TDIST_STORE_TIMEOUT", no);
    EXPECT_FALSE(setting_bool("TDIST_STORE_TIMEOUT")) << no;
  }
}

TEST(Settings, BadValuesNameTheVariable) {
  auto expect_bad = [](const char* name, const char* value, auto read) {
    ScopedEnv set(name, value);
    try {
      read(name);
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), name)) << e.what();
      EXPECT_TRUE(contains(e.what(), value)) << e.what();
    }
  };
  expect_bad("TDIST_STORE_MAX_KEY_BYTES", "12x", setting_int);
  expect_bad("TDIST_STORE_MAX_KEY_BYTES", "99999999999999999999999", setting_int);
  expect_bad("TDIST_STORE_TIMEOUT", "soon", setting_double);
  expect_bad("TDIST_STORE_TIMEOUT", "inf", setting_double);
  expect_bad("TDIST_STORE_TIMEOUT", "-1", setting_seconds);
  expect_bad("TDIST_STORE_TIMEOUT", "maybe", setting_bool);
}

// An out-of-range or unknown value is refused, naming the variable, the value and what is
// accepted; nothing is clamped or wrapped (issue 14's list, and every other bound).
TEST(Settings, OutOfRangeValuesAreRefusedWithTheAcceptedRange) {
  struct Bad {
    const char* name;
    const char* value;
    const char* accepted;
  };
  const Bad bad[] = {
      {"TDIST_STORE_MAX_VALUE_BYTES", "-1", "0..4292870144"},
      {"TDIST_STORE_MAX_VALUE_BYTES", "4294967296", "0..4292870144"},
      {"TDIST_SHM_RING_BYTES", "0", "4096..1073741824"},
      {"TDIST_SOCKET_NSOCKS_PERPEER", "9", "1..8"},
      {"TDIST_SOCKET_NSOCKS_PERPEER", "0", "1..8"},
      {"TDIST_SOCKET_BUFFER_BYTES", "4294967296", "0..2147483647"},
      {"TDIST_STORE_MAX_KEY_BYTES", "-17", "1..1048576"},
      {"TDIST_STORE_MAX_CONNECTIONS", "0", "1..16777216"},
      {"TDIST_CHUNK_BYTES", "0", "1..1073741824"},
      {"TDIST_POLL_US", "2000000", "0..1000000"},
      {"TDIST_TIMEOUT", "1e12", "0..31536000 seconds"},
      {"TDIST_LOG_LEVEL", "loud", "trace, debug, info, warn, warning, error, off, none"},
      {"TDIST_REDUCE_ISA", "avx9000", "auto, avx512, avx2, sse4, scalar"},
      {"TDIST_ENGINE", "nccl", "auto, tcp, shm"},
      {"TDIST_USE_AGENT_STORE", "2", "a boolean"},
  };
  for (const Bad& b : bad) {
    ScopedEnv set(b.name, b.value);
    try {
      check_settings();
      ADD_FAILURE() << b.name << "=" << b.value << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), b.name)) << e.what();
      EXPECT_TRUE(contains(e.what(), std::string("'") + b.value + "'")) << e.what();
      EXPECT_TRUE(contains(e.what(), b.accepted)) << e.what();
    }
  }
  // The typed reads refuse the same values.
  {
    ScopedEnv set("TDIST_SHM_RING_BYTES", "0");
    EXPECT_THROW(setting_int("TDIST_SHM_RING_BYTES"), InvalidArgument);
  }
  {
    ScopedEnv set("TDIST_LOG_LEVEL", "loud");
    EXPECT_THROW(setting_string("TDIST_LOG_LEVEL"), InvalidArgument);
  }
  {
    ScopedEnv set("TDIST_TIMEOUT", "31536001");
    EXPECT_THROW(setting_seconds("TDIST_TIMEOUT"), InvalidArgument);
  }
}

TEST(Settings, BoundsAndChoicesAreAccepted) {
  const std::pair<const char*, const char*> good[] = {
      {"TDIST_STORE_MAX_VALUE_BYTES", "0"},
      {"TDIST_STORE_MAX_VALUE_BYTES", "4292870144"},
      {"TDIST_SHM_RING_BYTES", "4096"},
      {"TDIST_SOCKET_NSOCKS_PERPEER", "8"},
      {"TDIST_POLL_US", "0"},
      {"TDIST_TIMEOUT", "0.5"},
      {"TDIST_LOG_LEVEL", "WARNING"},
      {"TDIST_REDUCE_ISA", "Scalar"},
      {"TDIST_ENGINE", "shm"},
      {"TDIST_USE_AGENT_STORE", "yes"},
      {"TDIST_SOCKET_IFNAME", "^lo,docker"},
  };
  for (const auto& [name, value] : good) {
    ScopedEnv set(name, value);
    EXPECT_NO_THROW(check_settings()) << name << "=" << value;
  }
  EXPECT_EQ(accepted_values(find_setting("TDIST_SOCKET_NSOCKS_PERPEER")), "1..8");
  EXPECT_EQ(accepted_values(find_setting("TDIST_SOCKET_IFNAME")), "");
}

TEST(Settings, EnvStringReadsAnyVariable) {
  {
    ScopedEnv set("TDIST_CORE_TEST_UNDECLARED", "value 1");
    EXPECT_EQ(env_string("TDIST_CORE_TEST_UNDECLARED"), "value 1");
  }
  EXPECT_EQ(env_string("TDIST_CORE_TEST_UNDECLARED"), "");
}

// ---- logging --------------------------------------------------------------------------

// Everything written to stderr (fd 2) while `fn` runs.
template <typename Fn>
std::string capture_stderr(Fn&& fn) {
  std::fflush(stderr);
  char path[] = "/tmp/tdist_core_test_XXXXXX";
  int file = mkstemp(path);
  EXPECT_GE(file, 0);
  unlink(path);
  int saved = dup(STDERR_FILENO);
  dup2(file, STDERR_FILENO);
  fn();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string text;
  char buf[4096];
  lseek(file, 0, SEEK_SET);
  for (ssize_t n; (n = read(file, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(file);
  return text;
}

class LoggingTest : public ::testing::Test {
 protected:
  void TearDown() override {
    set_log_rank(-1);
    set_log_level(LogLevel::kWarn);
  }
};

TEST_F(LoggingTest, LineHasTimeRankLevelAndText) {
  set_log_level(LogLevel::kInfo);
  set_log_rank(3);
  std::string out = capture_stderr([] { TDIST_LOG(kWarn) << "hello " << 42; });
  std::regex line(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[tdist rank 3 W\] hello 42\n)");
  EXPECT_TRUE(std::regex_match(out, line)) << "got: " << out;
}

TEST_F(LoggingTest, RankComesFromEnvironmentWhenNotSet) {
  set_log_level(LogLevel::kInfo);
  set_log_rank(-1);
  {
    ScopedEnv rank("RANK", "7");
    std::string out = capture_stderr([] { TDIST_LOG(kInfo) << "x"; });
    EXPECT_TRUE(contains(out, "[tdist rank 7 I] x\n")) << out;
  }
  ScopedEnv no_rank("RANK", std::nullopt);
  std::string out = capture_stderr([] { TDIST_LOG(kError) << "y"; });
  EXPECT_TRUE(contains(out, "[tdist rank - E] y\n")) << out;
}

TEST_F(LoggingTest, LinesBelowTheLevelAreNotEvaluated) {
  set_log_level(LogLevel::kError);
  int evaluated = 0;
  auto touch = [&evaluated] { return ++evaluated; };
  std::string out = capture_stderr([&] { TDIST_LOG(kWarn) << touch(); });
  EXPECT_EQ(out, "");
  EXPECT_EQ(evaluated, 0);
  EXPECT_FALSE(log_enabled(LogLevel::kInfo));
  EXPECT_TRUE(log_enabled(LogLevel::kError));
  set_log_level(LogLevel::kOff);
  EXPECT_FALSE(log_enabled(LogLevel::kError));
  EXPECT_EQ(capture_stderr([] { TDIST_LOG(kError) << "z"; }), "");
}

TEST_F(LoggingTest, LinesFromThreadsStayWhole) {
  set_log_level(LogLevel::kInfo);
  std::string out = capture_stderr([] {
    std::thread t1([] {
      for (int i = 0; i < 200; ++i) TDIST_LOG(kInfo) << "aaaaaaaaaaaaaaaaaaaa";
    });
    std::thread t2([] {
      for (int i = 0; i < 200; ++i) TDIST_LOG(kInfo) << "bbbbbbbbbbbbbbbbbbbb";
    });
    t1.join();
    t2.join();
  });
  std::regex line(R"([^\n]*\] (a{20}|b{20})\n)");
  size_t lines = 0;
  for (size_t start = 0; start < out.size(); ++lines) {
    size_t end = out.find('\n', start);
    ASSERT_NE(end, std::string::npos);
    ASSERT_TRUE(std::regex_match(out.substr(start, end - start + 1), line))
        << out.substr(start, end - start + 1);
    start = end + 1;
  }
  EXPECT_EQ(lines, 400u);
}

// The level is read from the environment once per process, so check it in children.
TEST(LoggingLevel, ParsedFromEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("TDIST_LOG_LEVEL", "debug", 1);
        std::_Exit(log_level() == LogLevel::kDebug ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("TDIST_LOG_LEVEL", "ERROR", 1);
        std::_Exit(log_level() == LogLevel::kError ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("TDIST_LOG_LEVEL", "off", 1);
        std::_Exit(log_level() == LogLevel::kOff && !log_enabled(LogLevel::kError) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        unsetenv("TDIST_LOG_LEVEL");
        std::_Exit(log_level() == LogLevel::kWarn ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  // A log line never throws: a bad value logs at the default level (check_settings, called
  // by init_process_group and tdistrun, refuses it).
  EXPECT_EXIT(
      {
        setenv("TDIST_LOG_LEVEL", "loud", 1);
        bool ok = false;
        try {
          ok = log_level() == LogLevel::kWarn;
        } catch (...) {
        }
        std::_Exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---- errors ---------------------------------------------------------------------------

static_assert(std::is_base_of_v<std::runtime_error, Error>);
static_assert(std::is_base_of_v<Error, InvalidArgument>);
static_assert(std::is_base_of_v<Error, TimeoutError>);
static_assert(std::is_base_of_v<Error, PeerError>);
static_assert(std::is_base_of_v<Error, DesyncError>);

TEST(Errors, ThrowAppendsFileAndLine) {
  int line = 0;
  try {
    // clang-format off
    line = __LINE__; TDIST_THROW(PeerError, "peer ", 3, " closed");
    // clang-format on
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "peer 3 closed (core_test.cc:" + std::to_string(line) + ")");
    EXPECT_NE(dynamic_cast<const PeerError*>(&e), nullptr);
    return;
  }
  FAIL() << "TDIST_THROW did not throw";
}

TEST(Errors, CheckThrowsOnlyWhenFalseAndEvaluatesLazily) {
  int evaluated = 0;
  auto touch = [&evaluated] { return ++evaluated; };
  EXPECT_NO_THROW(TDIST_CHECK(1 + 1 == 2, TimeoutError, touch()));
  EXPECT_EQ(evaluated, 0);
  EXPECT_THROW(TDIST_CHECK(false, TimeoutError, "waited ", touch()), TimeoutError);
  EXPECT_EQ(evaluated, 1);
  EXPECT_THROW(TDIST_CHECK(false, DesyncError, "x"), Error);
}

TEST(Errors, BaseNameStripsDirectories) {
  EXPECT_STREQ(detail::base_name("/a/b/c.cc"), "c.cc");
  EXPECT_STREQ(detail::base_name("c.cc"), "c.cc");
  EXPECT_EQ(detail::str_cat("a", 1, '-', 2.5), "a1-2.5");
}

// ---- deadlines ------------------------------------------------------------------------

TEST(Deadline, AfterExpiresAndCountsDown) {
  Deadline d = Deadline::after(std::chrono::milliseconds(200));
  EXPECT_FALSE(d.is_never());
  EXPECT_FALSE(d.expired());
  EXPECT_LE(d.remaining(), std::chrono::milliseconds(200));
  EXPECT_GT(d.remaining(), std::chrono::milliseconds(0));
  EXPECT_GE(d.poll_timeout_ms(), 0);
  Deadline past = Deadline::after(std::chrono::milliseconds(0));
  EXPECT_TRUE(past.expired());
  EXPECT_EQ(past.remaining(), std::chrono::milliseconds(0));
  EXPECT_EQ(past.poll_timeout_ms(), 0);
}

TEST(Deadline, NeverAndEarliest) {
  EXPECT_TRUE(Deadline::never().is_never());
  EXPECT_FALSE(Deadline::never().expired());
  EXPECT_EQ(Deadline::never().poll_timeout_ms(), -1);
  EXPECT_TRUE(Deadline::after(std::chrono::milliseconds(-1)).is_never());
  EXPECT_TRUE(Deadline::after(std::chrono::hours(24 * 365 * 200)).is_never());
  Deadline soon = Deadline::after(std::chrono::seconds(1));
  Deadline later = Deadline::after(std::chrono::seconds(10));
  EXPECT_EQ(Deadline::earliest(later, soon).time(), soon.time());
  EXPECT_EQ(Deadline::earliest(Deadline::never(), soon).time(), soon.time());
  // 30 days in ms does not fit in an int: clamped.
  EXPECT_EQ(Deadline::after(std::chrono::hours(24 * 30)).poll_timeout_ms(), INT_MAX);
}

}  // namespace
}  // namespace tdist
