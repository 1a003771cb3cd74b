// FileLog: opening, locking, reading and appending FileStore's record log (see the header
// for the format and the torn-tail rule).
#include "store/file_store_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "tdist/error.h"
#include "tdist/logging.h"

namespace tdist::store_internal {
namespace {

constexpr size_t kHeaderSize = 1 + 4 + 4;

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

bool valid_op(uint8_t op) {
  return op >= static_cast<uint8_t>(LogOp::kSet) && op <= static_cast<uint8_t>(LogOp::kMeta);
}

uint64_t file_size(int fd, const std::string& path) {
  struct stat st {};
  TDIST_CHECK(::fstat(fd, &st) == 0, Error, "FileStore: fstat '", path,
              "' failed: ", std::strerror(errno));
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

FileLog::FileLog(std::string path) : path_(std::move(path)) {
  TDIST_CHECK(!path_.empty(), InvalidArgument, "FileStore: the path is empty");
  open_file();
}

FileLog::~FileLog() {
  if (fd_ >= 0) ::close(fd_);
}

void FileLog::open_file() {
  int fd = -1;
  do {
    fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  TDIST_CHECK(fd >= 0, Error, "FileStore: cannot open '", path_, "': ", std::strerror(errno));
  fd_ = fd;
  offset_ = 0;
}

void FileLog::reopen() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  open_file();
}

FileLog::Lock::Lock(FileLog& log, bool exclusive) : fd_(log.fd_) {
  int rc = 0;
  do {
    rc = ::flock(fd_, exclusive ? LOCK_EX : LOCK_SH);
  } while (rc != 0 && errno == EINTR);
  TDIST_CHECK(rc == 0, Error, "FileStore: flock '", log.path_, "' failed: ", std::strerror(errno));
}

FileLog::Lock::~Lock() { ::flock(fd_, LOCK_UN); }

bool FileLog::has_unread() const { return file_size(fd_, path_) != offset_; }

bool FileLog::detached() const {
  struct stat by_path {};
  struct stat by_fd {};
  if (::stat(path_.c_str(), &by_path) != 0) return true;
  if (::fstat(fd_, &by_fd) != 0) return true;
  return by_path.st_dev != by_fd.st_dev || by_path.st_ino != by_fd.st_ino;
}

std::vector<LogRecord> FileLog::read_new() {
  const uint64_t size = file_size(fd_, path_);
  TDIST_CHECK(size >= offset_, Error, "FileStore: '", path_, "' shrank to ", size,
              " bytes, below the ", offset_, " already read; was it truncated or replaced?");
  std::vector<LogRecord> records;
  if (size == offset_) return records;

  Bytes buf(size - offset_);
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n =
        ::pread(fd_, buf.data() + got, buf.size() - got, static_cast<off_t>(offset_ + got));
    if (n < 0 && errno == EINTR) continue;
    TDIST_CHECK(n >= 0, Error, "FileStore: read '", path_, "' failed: ", std::strerror(errno));
    if (n == 0) break;  // shrank meanwhile: parse what we have
    got += static_cast<size_t>(n);
  }

  size_t pos = 0;
  while (got - pos >= kHeaderSize) {
    const uint8_t* p = buf.data() + pos;
    if (!valid_op(p[0])) {
      TDIST_LOG(kWarn) << "FileStore: '" << path_ << "' has an unreadable record at byte "
                       << offset_ + pos << "; ignoring the rest as a torn tail";
      break;
    }
    const uint64_t key_len = get_u32(p + 1);
    const uint64_t value_len = get_u32(p + 5);
    if (got - pos - kHeaderSize < key_len + value_len) break;  // torn tail
    const uint8_t* key = p + kHeaderSize;
    const uint8_t* value = key + key_len;
    records.push_back(LogRecord{static_cast<LogOp>(p[0]), std::string(key, key + key_len),
                                Bytes(value, value + value_len)});
    pos += kHeaderSize + key_len + value_len;
  }
  offset_ += pos;
  return records;
}

void FileLog::append(const std::vector<LogRecord>& records) {
  constexpr uint64_t kMaxField = std::numeric_limits<uint32_t>::max();
  Bytes buf;
  for (const auto& r : records) {
    TDIST_CHECK(r.key.size() <= kMaxField && r.value.size() <= kMaxField, InvalidArgument,
                "FileStore: key or value too large (", r.key.size(), " and ", r.value.size(),
                " bytes; at most ", kMaxField, " each)");
    buf.push_back(static_cast<uint8_t>(r.op));
    put_u32(buf, static_cast<uint32_t>(r.key.size()));
    put_u32(buf, static_cast<uint32_t>(r.value.size()));
    buf.insert(buf.end(), r.key.begin(), r.key.end());
    buf.insert(buf.end(), r.value.begin(), r.value.end());
  }

  const uint64_t size = file_size(fd_, path_);
  if (size > offset_) {
    TDIST_LOG(kWarn) << "FileStore: '" << path_ << "': cutting off a torn tail of "
                     << size - offset_ << " bytes (a writer died mid-write)";
    TDIST_CHECK(::ftruncate(fd_, static_cast<off_t>(offset_)) == 0, Error, "FileStore: truncate '",
                path_, "' failed: ", std::strerror(errno));
  }

  size_t put = 0;
  while (put < buf.size()) {
    const ssize_t n =
        ::pwrite(fd_, buf.data() + put, buf.size() - put, static_cast<off_t>(offset_ + put));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      (void)!::ftruncate(fd_, static_cast<off_t>(offset_));  // leave no torn record behind
      TDIST_THROW(Error, "FileStore: write '", path_, "' failed: ", std::strerror(err));
    }
    put += static_cast<size_t>(n);
  }
  offset_ += buf.size();
}

}  // namespace tdist::store_internal
