// Helpers for the process-group tests: W ranks as threads in one process, each with its
// own group of a backend over one HashStore; buffers with guard bytes; an element codec
// for every dtype; deterministic inputs and byte patterns. Written independently of
// src/ (the f16/bf16 conversions come from tests/core/reduce_reference.h). Test-only.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "core/reduce_reference.h"
#include "support/scoped_env.h"
#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#include "tdist/process_group.h"

namespace tdist::pg_test {

using std::chrono::milliseconds;
using std::chrono::seconds;

// ---- errors ---------------------------------------------------------------------------

// "PeerError: message" (or the most derived tdist type known) for an exception_ptr.
inline std::string describe(std::exception_ptr e) {
  if (e == nullptr) return "(no error)";
  try {
    std::rethrow_exception(e);
  } catch (const InvalidArgument& x) {
    return std::string("InvalidArgument: ") + x.what();
  } catch (const TimeoutError& x) {
    return std::string("TimeoutError: ") + x.what();
  } catch (const PeerError& x) {
    return std::string("PeerError: ") + x.what();
  } catch (const DesyncError& x) {
    return std::string("DesyncError: ") + x.what();
  } catch (const std::exception& x) {
    return std::string(typeid(x).name()) + ": " + x.what();
  } catch (...) {
    return "unknown exception";
  }
}

template <typename E>
bool is_a(std::exception_ptr e) {
  if (e == nullptr) return false;
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

// ---- ranks as threads -----------------------------------------------------------------

// The backend under test: TDIST_TEST_BACKEND (CTest registers the suites once per backend:
// tcp, shm, auto), "tcp" when unset.
inline std::string test_backend() {
  const char* name = std::getenv("TDIST_TEST_BACKEND");
  return name != nullptr && *name != '\0' ? name : "tcp";
}

// W groups of `backend`, one per rank, created concurrently (as the ranks of a job
// would) over one HashStore. run() executes a function on one thread per rank; an
// exception escaping it is a test failure naming the rank.
class ThreadWorld {
 public:
  explicit ThreadWorld(int world, milliseconds timeout = seconds(30),
                       const std::string& backend = test_backend())
      : store_(std::make_shared<HashStore>()), groups_(static_cast<size_t>(world)) {
    BackendFactory factory = backend_factory(backend);
    std::vector<std::exception_ptr> errors = for_each_rank(world, [&](int r) {
      groups_[static_cast<size_t>(r)] = factory(store_, r, world, timeout);
    });
    for (int r = 0; r < world; ++r) {
      if (errors[static_cast<size_t>(r)] != nullptr) {
        ADD_FAILURE() << "rank " << r << ": creating the group failed: "
                      << describe(errors[static_cast<size_t>(r)]);
        ok_ = false;
      }
    }
  }
  ~ThreadWorld() {
    // Torn down concurrently: a backend's teardown may wait for its peers.
    for_each_rank(size(), [&](int r) { groups_[static_cast<size_t>(r)].reset(); });
  }
  ThreadWorld(const ThreadWorld&) = delete;
  ThreadWorld& operator=(const ThreadWorld&) = delete;

  bool ok() const { return ok_; }
  int size() const { return static_cast<int>(groups_.size()); }
  const std::shared_ptr<Store>& store() const { return store_; }
  ProcessGroup& group(int r) { return *groups_[static_cast<size_t>(r)]; }
  std::shared_ptr<ProcessGroup>& shared(int r) { return groups_[static_cast<size_t>(r)]; }

  // Runs fn(rank, group) on every rank at once; returns what each threw (or null).
  std::vector<std::exception_ptr> run_collect(const std::function<void(int, ProcessGroup&)>& fn) {
    return for_each_rank(size(), [&](int r) { fn(r, group(r)); });
  }
  // As run_collect, but an exception is a test failure.
  void run(const std::function<void(int, ProcessGroup&)>& fn) {
    std::vector<std::exception_ptr> errors = run_collect(fn);
    for (int r = 0; r < size(); ++r) {
      if (errors[static_cast<size_t>(r)] != nullptr) {
        ADD_FAILURE() << "rank " << r << " threw " << describe(errors[static_cast<size_t>(r)]);
      }
    }
  }

  // Runs fn(r) for r in 0..n-1 on n threads; returns the exceptions.
  static std::vector<std::exception_ptr> for_each_rank(int n, const std::function<void(int)>& fn) {
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          fn(r);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return errors;
  }

 private:
  std::shared_ptr<Store> store_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
  bool ok_ = true;
};

// Test-name suffix for a world-size parameter: "W4".
inline std::string world_name(const ::testing::TestParamInfo<int>& param) {
  return "W" + std::to_string(param.param);
}

// ---- guarded buffers ------------------------------------------------------------------

// `count` elements with 64 guard bytes on each side; the payload starts filled with 0xEE.
class Buffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kGuardByte = 0xC5;

  Buffer(DType dtype, size_t count)
      : dtype_(dtype), count_(count), storage_(count * dtype_size(dtype) + 2 * kGuard, 0xEE) {
    std::memset(storage_.data(), kGuardByte, kGuard);
    std::memset(storage_.data() + kGuard + bytes(), kGuardByte, kGuard);
  }
  uint8_t* data() { return storage_.data() + kGuard; }
  const uint8_t* data() const { return storage_.data() + kGuard; }
  uint8_t* at(size_t element) { return data() + element * dtype_size(dtype_); }
  size_t count() const { return count_; }
  size_t bytes() const { return count_ * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (storage_[i] != kGuardByte || storage_[kGuard + bytes() + i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  DType dtype_;
  size_t count_;
  std::vector<uint8_t> storage_;
};

// ---- element codec --------------------------------------------------------------------

inline void put_float(DType t, void* base, size_t i, double v) {
  auto* b = static_cast<uint8_t*>(base);
  switch (t) {
    case DType::kF32:
      testing::write_at<float>(b, i, static_cast<float>(v));
      return;
    case DType::kF64:
      testing::write_at<double>(b, i, v);
      return;
    case DType::kF16:
      testing::write_at<uint16_t>(b, i, testing::ref_f32_to_f16(static_cast<float>(v)));
      return;
    case DType::kBF16:
      testing::write_at<uint16_t>(b, i, testing::ref_f32_to_bf16(static_cast<float>(v)));
      return;
    default:
      ADD_FAILURE() << "put_float on an integer dtype";
  }
}

inline double get_float(DType t, const void* base, size_t i) {
  const auto* b = static_cast<const uint8_t*>(base);
  switch (t) {
    case DType::kF32:
      return testing::read_at<float>(b, i);
    case DType::kF64:
      return testing::read_at<double>(b, i);
    case DType::kF16:
      return testing::ref_f16_to_f32(testing::read_at<uint16_t>(b, i));
    case DType::kBF16:
      return testing::ref_bf16_to_f32(testing::read_at<uint16_t>(b, i));
    default:
      ADD_FAILURE() << "get_float on an integer dtype";
      return 0;
  }
}

// Stores the low bits of v (wrapping) in an integer or bool element.
inline void put_int(DType t, void* base, size_t i, int64_t v) {
  auto* b = static_cast<uint8_t*>(base);
  switch (t) {
    case DType::kI8:
      testing::write_at<int8_t>(b, i, static_cast<int8_t>(v));
      return;
    case DType::kU8:
    case DType::kBool:
      testing::write_at<uint8_t>(b, i, static_cast<uint8_t>(v));
      return;
    case DType::kI32:
      testing::write_at<int32_t>(b, i, static_cast<int32_t>(v));
      return;
    case DType::kI64:
      testing::write_at<int64_t>(b, i, v);
      return;
    default:
      ADD_FAILURE() << "put_int on a floating dtype";
  }
}

inline int64_t get_int(DType t, const void* base, size_t i) {
  const auto* b = static_cast<const uint8_t*>(base);
  switch (t) {
    case DType::kI8:
      return testing::read_at<int8_t>(b, i);
    case DType::kU8:
    case DType::kBool:
      return testing::read_at<uint8_t>(b, i);
    case DType::kI32:
      return testing::read_at<int32_t>(b, i);
    case DType::kI64:
      return testing::read_at<int64_t>(b, i);
    default:
      ADD_FAILURE() << "get_int on a floating dtype";
      return 0;
  }
}

// v reduced to the range of an integer dtype (two's complement wrap), as put_int stores it.
inline int64_t wrap_int(DType t, int64_t v) {
  switch (t) {
    case DType::kI8:
      return static_cast<int8_t>(v);
    case DType::kU8:
      return static_cast<uint8_t>(v);
    case DType::kI32:
      return static_cast<int32_t>(v);
    case DType::kBool:
      return v != 0 ? 1 : 0;
    default:
      return v;
  }
}

// ---- deterministic data ---------------------------------------------------------------

inline uint64_t mix(uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
               (c + 0x2545F4914F6CDD1Dull) * 0x94D049BB133111EBull ^ d * 0xD6E8FEB86659FD93ull;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// Byte `i` of the block that `src` contributes for `dst` in test case `seed`.
inline uint8_t pattern_byte(uint64_t seed, int src, int dst, size_t i) {
  return static_cast<uint8_t>(mix(seed, static_cast<uint64_t>(src), static_cast<uint64_t>(dst), i));
}

inline void fill_pattern(uint8_t* p, size_t bytes, uint64_t seed, int src, int dst) {
  for (size_t i = 0; i < bytes; ++i) p[i] = pattern_byte(seed, src, dst, i);
}

// Index of the first byte that differs from the pattern, or -1.
inline int64_t pattern_mismatch(const uint8_t* p, size_t bytes, uint64_t seed, int src, int dst) {
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != pattern_byte(seed, src, dst, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

// The ops of kAllReduceOpKinds valid for `dtype` (premul_sum with scale 0.5).
inline std::vector<ReduceOp> ops_for(DType dtype) {
  std::vector<ReduceOp> ops;
  for (ReduceOpKind k : kAllReduceOpKinds) {
    if (!is_supported(k, dtype)) continue;
    ops.push_back(k == ReduceOpKind::kPremulSum ? ReduceOp::premul_sum(0.5) : ReduceOp(k));
  }
  return ops;
}

inline std::string case_name(DType dtype, ReduceOp op, size_t count, bool in_place) {
  return std::string(dtype_name(dtype)) + "/" + std::string(reduce_op_name(op.kind)) +
         "/n=" + std::to_string(count) + (in_place ? "/in-place" : "/out-of-place");
}

}  // namespace tdist::pg_test
