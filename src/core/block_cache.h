// BlockCache and CachingAllocator: per-thread caches of freed fixed-size blocks, for the
// objects every operation allocates and frees again (a request's Op, its handle, a queued
// operation's Work). A small collective makes several of them; taking a block from this
// thread's cache costs a few instructions, where malloc and free cost some 100.
//
// BlockCache<Size, Align>::get() returns a block of Size bytes (aligned to Align), from
// this thread's cache when it has one; put() gives one back to the cache of the thread
// that calls it (any thread: blocks are plain heap memory), which keeps at most kKeep
// and frees the rest. A thread's cache is freed when the thread exits.
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
    Cache& cache = local();
    if (cache.head != nullptr) {
      Node* node = cache.head;
      cache.head = node->next;
      --cache.count;
      return node;
    }
    return ::operator new(kBytes, std::align_val_t(kAlign));
  }

  static void put(void* block) {
    Cache& cache = local();
    if (cache.count >= kKeep) {
      ::operator delete(block, std::align_val_t(kAlign));
      return;
    }
    cache.head = ::new (block) Node{cache.head};
    ++cache.count;
  }

 private:
  struct Node {
    Node* next;
  };
  static constexpr size_t kAlign = Align < alignof(Node) ? alignof(Node) : Align;
  static constexpr size_t kBytes = Size < sizeof(Node) ? sizeof(Node) : Size;

  struct Cache {
    Node* head = nullptr;
    int count = 0;
    ~Cache() {
      while (head != nullptr) {
        Node* next = head->next;
        ::operator delete(head, std::align_val_t(kAlign));
        head = next;
      }
    }
  };
  static Cache& local() {
    static thread_local Cache cache;
    return cache;
  }
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
