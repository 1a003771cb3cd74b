// FileLog: the shared file behind FileStore, an append-only log of records guarded by
// flock(2) (internal to src/store).
//
// Record layout, integers little endian:
//   op (1 byte) | key length (4 bytes) | value length (4 bytes) | key | value
// Writers append with one pwrite while holding the exclusive lock, so a reader sees whole
// records, plus at most a torn tail left by a writer that died mid-write. Readers stop at a
// torn tail; the next writer cuts it off before appending.
//
// Each FileLog opens its own file description, so flock excludes other FileLogs in this
// process as well as other processes. Not thread-safe: the owner serialises calls.
// Failures of the file system raise Error naming the path and errno.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tdist/store.h"

namespace tdist::store_internal {

enum class LogOp : uint8_t {
  kSet = 1,     // key = value
  kDelete = 2,  // key removed
  kAppend = 3,  // value appended to key's value (created when missing)
  kMeta = 4,    // an internal key (not a user key) = value
};

struct LogRecord {
  LogOp op;
  std::string key;
  Bytes value;
};

class FileLog {
 public:
  // Opens `path`, creating an empty log when it does not exist.
  explicit FileLog(std::string path);
  ~FileLog();
  FileLog(const FileLog&) = delete;
  FileLog& operator=(const FileLog&) = delete;

  const std::string& path() const { return path_; }

  // Holds flock(2) on the log for its lifetime: shared for reading, exclusive for writing.
  class Lock {
   public:
    Lock(FileLog& log, bool exclusive);
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    int fd_;
  };

  // True when the file holds bytes past the last record read (cheap; no lock needed).
  bool has_unread() const;

  // The whole records appended since the last call, in order. Needs a Lock held.
  std::vector<LogRecord> read_new();

  // Appends `records` with one write. Needs the exclusive Lock, and read_new() called under
  // it (the records read so far are all there is); a torn tail past them is cut off first.
  void append(const std::vector<LogRecord>& records);

  // True when `path` no longer names the open file (it was removed or replaced).
  bool detached() const;

  // Opens `path` afresh (creating it); reading restarts at the beginning.
  void reopen();

 private:
  void open_file();

  std::string path_;
  int fd_ = -1;
  uint64_t offset_ = 0;  // end of the last whole record read
};

}  // namespace tdist::store_internal
