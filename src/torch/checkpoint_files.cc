// checkpoint_files.h: names, the index, and the filesystem steps of a commit.
#include "checkpoint_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tdist/error.h"

namespace tdist::checkpoint::files {
namespace {

using nlohmann::ordered_json;

std::string errno_text() { return std::strerror(errno); }

std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> step_of(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step-") != 0) return std::nullopt;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string rank_file(int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%05d-model-00001-of-00001.safetensors", rank + 1);
  return buf;
}

std::map<int64_t, std::string> complete(const std::string& dir) {
  std::map<int64_t, std::string> out;
  if (!exists(dir)) return out;
  for (const std::string& name : list_dir(dir)) {
    const auto step = step_of(name);
    if (step && exists(dir + "/" + name + "/" + kIndex)) out[*step] = dir + "/" + name;
  }
  return out;
}

std::string to_json(const Index& index) {
  ordered_json files = ordered_json::object();
  for (const auto& [name, bytes] : index.files) files[name] = bytes;
  ordered_json tensors = ordered_json::object();
  for (const auto& [name, t] : index.tensors) {
    tensors[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"replicated", t.replicated}};
  }
  ordered_json values = ordered_json::object();
  for (const auto& [name, v] : index.values) {
    std::visit([&, n = name](const auto& x) { values[n] = x; }, v);
  }
  ordered_json j = {{"format", kFormat},         {"version", kVersion}, {"step", index.step},
                    {"world_size", index.world}, {"files", files},      {"tensors", tensors},
                    {"values", values}};
  return j.dump(1) + "\n";
}

Index parse_index(const std::string& text, const std::string& path) {
  const ordered_json j = ordered_json::parse(text, nullptr, false);
  TDIST_CHECK(j.is_object() && j.value("format", "") == kFormat, InvalidArgument,
              "checkpoint: ", path, " is not a tdist checkpoint index");
  TDIST_CHECK(j.value("version", 0) == kVersion, InvalidArgument, "checkpoint: ", path,
              " is of format version ", j.value("version", 0), "; this tdist reads version ",
              kVersion);
  Index index;
  try {
    index.step = j.at("step").get<int64_t>();
    index.world = j.at("world_size").get<int>();
    for (const auto& [name, bytes] : j.at("files").items()) index.files[name] = bytes;
    for (const auto& [name, t] : j.at("tensors").items()) {
      index.tensors[name] = {t.at("dtype").get<std::string>(),
                             t.at("shape").get<std::vector<int64_t>>(),
                             t.at("replicated").get<bool>()};
    }
    for (const auto& [name, v] : j.at("values").items()) {
      if (v.is_number_integer()) {
        index.values.emplace_back(name, v.get<int64_t>());
      } else if (v.is_number()) {
        index.values.emplace_back(name, v.get<double>());
      } else {
        index.values.emplace_back(name, v.get<std::string>());
      }
    }
  } catch (const nlohmann::json::exception& e) {
    TDIST_THROW(InvalidArgument, "checkpoint: ", path, " is a damaged index: ", e.what());
  }
  return index;
}

void make_dirs(const std::string& dir) {
  std::string path;
  std::istringstream parts(dir);
  if (!dir.empty() && dir[0] == '/') path = "/";
  for (std::string part; std::getline(parts, part, '/');) {
    if (part.empty()) continue;
    path += part;
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      TDIST_THROW(Error, "checkpoint: cannot create ", path, ": ", errno_text());
    }
    path += "/";
  }
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TDIST_CHECK(fd >= 0, Error, "checkpoint: cannot open ", path, ": ", errno_text());
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  TDIST_CHECK(rc == 0, Error, "checkpoint: fsync ", path, ": ", std::strerror(err));
}

void write_synced(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TDIST_CHECK(fd >= 0, Error, "checkpoint: cannot create ", path, ": ", errno_text());
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      TDIST_THROW(Error, "checkpoint: writing ", path, ": ", std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  TDIST_CHECK(rc == 0, Error, "checkpoint: fsync ", path, ": ", std::strerror(err));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TDIST_CHECK(in, InvalidArgument, "checkpoint: cannot read ", path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    for (const std::string& name : list_dir(path)) remove_tree(path + "/" + name);
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

void commit_rename(const std::string& from, const std::string& to) {
  if (exists(to)) {
    TDIST_CHECK(::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0,
                Error, "checkpoint: cannot replace ", to, " by ", from, ": ", errno_text());
    fsync_path(parent_of(to));
    remove_tree(from);  // now the replaced checkpoint
    return;
  }
  TDIST_CHECK(::rename(from.c_str(), to.c_str()) == 0, Error, "checkpoint: cannot rename ", from,
              " to ", to, ": ", errno_text());
  fsync_path(parent_of(to));
}

std::vector<std::string> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  TDIST_CHECK(d != nullptr, InvalidArgument, "checkpoint: cannot list ", dir, ": ", errno_text());
  std::vector<std::string> out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  return out;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace tdist::checkpoint::files
