// Thread-safety annotations: the lock rules of a class written so that clang checks them
// (-Wthread-safety), and the mutex types that carry them.
//
// A member that a mutex protects is declared TDIST_GUARDED_BY(mu_); a function that must
// be called with the mutex held is declared TDIST_REQUIRES(mu_) (by convention its name
// ends in _locked); one that takes it itself may say TDIST_EXCLUDES(mu_). Clang then
// rejects, at compile time, an access or a call without the lock. Other compilers see
// empty macros: the annotations cost nothing and change no code.
//
// Mutex is std::mutex with the annotations; MutexLock holds one for its scope; UniqueLock
// also lets the holder unlock and relock; MutexUnlock releases a held one for its scope
// (around a call that must run unlocked); CondVar is std::condition_variable for a Mutex,
// whose waits require it held. None costs more than the std types they wrap (CondVar
// keeps std::condition_variable, not std::condition_variable_any).
// Where the analysis cannot follow a correct protocol (a lock handed between functions, an
// atomic that publishes a field), TDIST_NO_THREAD_SAFETY_ANALYSIS switches it off for one
// function, with a comment saying why.
// Thread-safety: as std::mutex and std::condition_variable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TDIST_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TDIST_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are locks ("mutex").
#define TDIST_CAPABILITY(name) TDIST_THREAD_ANNOTATION(capability(name))
// On a class: an RAII object that holds a lock for its lifetime.
#define TDIST_SCOPED_CAPABILITY TDIST_THREAD_ANNOTATION(scoped_lockable)
// On a member: read and written only with the lock held.
#define TDIST_GUARDED_BY(x) TDIST_THREAD_ANNOTATION(guarded_by(x))
// On a pointer member: what it points to is read and written only with the lock held.
#define TDIST_PT_GUARDED_BY(x) TDIST_THREAD_ANNOTATION(pt_guarded_by(x))
// On a function: the caller holds the lock(s), on entry and on return.
#define TDIST_REQUIRES(...) TDIST_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// On a function: it takes the lock(s) and returns holding them.
#define TDIST_ACQUIRE(...) TDIST_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
// On a function: it takes the lock when it returns the first argument (true or false).
#define TDIST_TRY_ACQUIRE(...) TDIST_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: the caller holds the lock(s); the function releases them.
#define TDIST_RELEASE(...) TDIST_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// On a function: the caller must not hold the lock(s) (the function takes them).
#define TDIST_EXCLUDES(...) TDIST_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: not checked (say why next to it).
#define TDIST_NO_THREAD_SAFETY_ANALYSIS TDIST_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace tdist {

class CondVar;

// std::mutex, known to the analysis as a lock.
class TDIST_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() TDIST_ACQUIRE() { mu_.lock(); }
  void unlock() TDIST_RELEASE() { mu_.unlock(); }
  bool try_lock() TDIST_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction (std::lock_guard). With std::adopt_lock it
// takes over a lock the caller holds already (e.g. got by try_lock).
class TDIST_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) TDIST_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  MutexLock(Mutex& mu, std::adopt_lock_t) TDIST_REQUIRES(mu) : mu_(mu) {}
  ~MutexLock() TDIST_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Holds `mu` from construction, like MutexLock, but may unlock and lock it again in
// between (std::unique_lock without deferred or adopted construction); releases it at
// destruction when held.
class TDIST_SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex& mu) TDIST_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~UniqueLock() TDIST_RELEASE() {
    if (held_) mu_.unlock();
  }
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

  void lock() TDIST_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  void unlock() TDIST_RELEASE() {
    held_ = false;
    mu_.unlock();
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// Releases `mu`, which the caller holds, from construction to destruction, and takes it
// again then (also when an exception leaves the scope).
class TDIST_SCOPED_CAPABILITY MutexUnlock {
 public:
  explicit MutexUnlock(Mutex& mu) TDIST_RELEASE(mu) : mu_(mu) { mu_.unlock(); }
  // Annotated as a release: the analysis ends the scope's effect here, which restores
  // the lock (the way clang models a scoped unlock).
  ~MutexUnlock() TDIST_RELEASE() { mu_.lock(); }
  MutexUnlock(const MutexUnlock&) = delete;
  MutexUnlock& operator=(const MutexUnlock&) = delete;

 private:
  Mutex& mu_;
};

// std::condition_variable for a Mutex. Every wait needs the Mutex held (by a MutexLock or
// a UniqueLock) and returns with it held; spurious wake-ups happen, as with the std type,
// so wait in a loop on the condition (written in the caller, where the analysis sees the
// lock: a predicate lambda would be checked without it).
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void wait(Mutex& mu) TDIST_REQUIRES(mu) {
    Adopted lock(mu);
    cv_.wait(lock.lock);
  }
  // False when `time` passed (the lock is held again either way).
  template <typename Clock, typename Duration>
  bool wait_until(Mutex& mu, const std::chrono::time_point<Clock, Duration>& time)
      TDIST_REQUIRES(mu) {
    Adopted lock(mu);
    return cv_.wait_until(lock.lock, time) == std::cv_status::no_timeout;
  }
  template <typename Rep, typename Period>
  bool wait_for(Mutex& mu, const std::chrono::duration<Rep, Period>& duration) TDIST_REQUIRES(mu) {
    Adopted lock(mu);
    return cv_.wait_for(lock.lock, duration) == std::cv_status::no_timeout;
  }

  void notify_one() noexcept { cv_.notify_one(); }
  void notify_all() noexcept { cv_.notify_all(); }

 private:
  // The caller's lock as the std::unique_lock that std::condition_variable wants; it stays
  // the caller's (held) when the wait returns or throws.
  struct Adopted {
    explicit Adopted(Mutex& mu) : lock(mu.mu_, std::adopt_lock) {}
    ~Adopted() { lock.release(); }
    std::unique_lock<std::mutex> lock;
  };

  std::condition_variable cv_;
};

}  // namespace tdist
