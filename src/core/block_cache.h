// BlockCache and CachingAllocator: per-thread caches of freed fixed-size blocks, for the
// objects every operation allocates and frees again (a request's Op, its handle, a queued
// operation's Work). A small collective makes several of them; taking a block from this
// thread's cache costs a few instructions, where malloc and free cost some 100.
//
// BlockCache<Size, Align>::get() returns a block of Size bytes (aligned to Align), from
// this thread's cache when it has one; put() gives one back to the cache of the thread
// that calls it (any thread: blocks are plain heap memory), which keeps at most kKeep
// and frees the rest. A thread's cache is freed when the thread exits (blocks given back
// after that, by other thread-locals' destructors, go to the heap).
// CachingAllocator<T> is a std allocator over it for single objects (allocate_shared),
// and falls back to std::allocator for arrays.
// Thread-safety: each thread has its own cache; nothing is shared.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace tdist::core {

template <size_t Size, size_t Align>
class BlockCache {
 public:
  static constexpr int kKeep = 32;

  static void* get() {
    if (head_ != nullptr) {
      Node* node = head_;
      head_ = node->next;
      --count_;
      return node;
    }
    return ::operator new(kBytes, std::align_val_t(kAlign));
  }

  static void put(void* block) {
    if (exited_ || count_ >= kKeep) {  // after the thread's cache was freed: the heap
      ::operator delete(block, std::align_val_t(kAlign));
      return;
    }
    static thread_local Reaper reaper;  // frees the cache at thread exit
    (void)reaper;
    head_ = ::new (block) Node{head_};
    ++count_;
  }

 private:
  struct Node {
    Node* next;
  };
  static constexpr size_t kAlign = Align < alignof(Node) ? alignof(Node) : Align;
  static constexpr size_t kBytes = Size < sizeof(Node) ? sizeof(Node) : Size;

  // Frees the cache when the thread exits; blocks put later (by destructors of other
  // thread-locals) go straight back to the heap.
  struct Reaper {
    ~Reaper() {
      exited_ = true;
      while (head_ != nullptr) {
        Node* next = head_->next;
        ::operator delete(head_, std::align_val_t(kAlign));
        head_ = next;
      }
      count_ = 0;
    }
  };

  // Plain thread-locals (no destructor: usable until the thread ends).
  static inline thread_local Node* head_ = nullptr;
  static inline thread_local int count_ = 0;
  static inline thread_local bool exited_ = false;
};

template <typename T>
struct CachingAllocator {
  using value_type = T;
  using Blocks = BlockCache<sizeof(T), alignof(T)>;

  CachingAllocator() = default;
  template <typename U>
  CachingAllocator(const CachingAllocator<U>& /*other*/) {}  // NOLINT: rebinding converts

  T* allocate(size_t n) {
    if (n == 1) return static_cast<T*>(Blocks::get());
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (n == 1) {
      Blocks::put(p);
    } else {
      std::allocator<T>().deallocate(p, n);
    }
  }
  template <typename U>
  bool operator==(const CachingAllocator<U>& /*other*/) const {
    return true;
  }
};

}  // namespace tdist::core
