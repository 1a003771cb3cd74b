// Job records (job_record.h).
#include "diag/job_record.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist::diag {

namespace {

constexpr char kPrefix[] = "job-";

std::string folder_path() {
  const std::string runtime = env_string("XDG_RUNTIME_DIR");
  struct stat st {};
  if (runtime.starts_with('/') && ::stat(runtime.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return runtime + "/tdist";
  }
  return "/tmp/tdist-" + std::to_string(::getuid());
}

// Refuses a folder that is not a real directory of this user that only the user may write.
void check_own(const std::string& folder) {
  struct stat st {};
  TDIST_CHECK(::lstat(folder.c_str(), &st) == 0, Error, "job records: cannot stat ", folder, ": ",
              std::strerror(errno));
  TDIST_CHECK(S_ISDIR(st.st_mode) && st.st_uid == ::getuid() && (st.st_mode & 022) == 0, Error,
              "job records: ", folder,
              " is not a folder of this user that only the user may write; remove it");
}

bool alive(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

JobRecord parse(long pid, std::istream& in) {
  JobRecord r;
  r.pid = pid;
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq);
    const std::string value = line.substr(eq + 1);
    if (key == "endpoint") r.endpoint = value;
    if (key == "run_id") r.run_id = value;
    if (key == "token") r.token = value;
  }
  return r;
}

}  // namespace

std::string job_record_folder() {
  const std::string folder = folder_path();
  if (::mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) {
    TDIST_THROW(Error, "job records: cannot create ", folder, ": ", std::strerror(errno));
  }
  check_own(folder);
  return folder;
}

std::string write_job_record(const JobRecord& record) {
  const std::string folder = job_record_folder();
  const std::string path = folder + "/" + kPrefix + std::to_string(::getpid());
  const std::string temporary = path + ".new";
  std::ostringstream text;
  text << "endpoint=" << record.endpoint << "\nrun_id=" << record.run_id << "\n";
  if (!record.token.empty()) text << "token=" << record.token << "\n";
  const std::string body = text.str();
  ::unlink(temporary.c_str());
  const int fd =
      ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  TDIST_CHECK(fd >= 0, Error, "job records: cannot create ", temporary, ": ", std::strerror(errno));
  const bool written = ::write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
  const bool closed = ::close(fd) == 0;
  if (!written || !closed || ::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    TDIST_THROW(Error, "job records: cannot write ", path, ": ", std::strerror(error));
  }
  return path;
}

void remove_job_record(const std::string& path) {
  if (!path.empty()) ::unlink(path.c_str());
}

std::vector<JobRecord> live_job_records() {
  const std::string folder = folder_path();
  struct stat st {};
  if (::lstat(folder.c_str(), &st) != 0 && errno == ENOENT) return {};
  check_own(folder);
  std::vector<JobRecord> records;
  DIR* dir = ::opendir(folder.c_str());
  TDIST_CHECK(dir != nullptr, Error, "job records: cannot read ", folder, ": ",
              std::strerror(errno));
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (!name.starts_with(kPrefix)) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + std::strlen(kPrefix), &end, 10);
    if (end == name.c_str() + std::strlen(kPrefix) || *end != '\0') continue;  // ".new"
    const std::string path = folder + "/" + name;
    if (!alive(pid)) {
      ::unlink(path.c_str());
      continue;
    }
    std::ifstream in(path);
    if (in) records.push_back(parse(pid, in));
  }
  ::closedir(dir);
  std::sort(records.begin(), records.end(),
            [](const JobRecord& a, const JobRecord& b) { return a.pid < b.pid; });
  return records;
}

}  // namespace tdist::diag
