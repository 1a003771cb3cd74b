// safetensors.h: one file of the format, written in one pass and read by byte ranges.
#include "safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "tdist/error.h"

namespace tdist::checkpoint::safetensors {
namespace {

using nlohmann::ordered_json;

constexpr uint64_t kMaxHeader = 100u << 20;  // the safetensors library's own limit

struct DtypeName {
  c10::ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {c10::kBool, "BOOL"}, {c10::kByte, "U8"},    {c10::kChar, "I8"},  {c10::kShort, "I16"},
    {c10::kInt, "I32"},   {c10::kLong, "I64"},   {c10::kHalf, "F16"}, {c10::kBFloat16, "BF16"},
    {c10::kFloat, "F32"}, {c10::kDouble, "F64"},
};

std::string errno_text() { return std::strerror(errno); }

// Writes all of [data, data + n) to fd.
void write_all(int fd, const std::string& path, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    TDIST_CHECK(w > 0, Error, "checkpoint: writing ", path, ": ", errno_text());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

std::vector<int64_t> int_list(const ordered_json& j, const std::string& path,
                              const std::string& what) {
  TDIST_CHECK(j.is_array(), InvalidArgument, "checkpoint: ", path, ": ", what,
              " is not a list of integers");
  std::vector<int64_t> out;
  for (const auto& v : j) {
    TDIST_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, InvalidArgument,
                "checkpoint: ", path, ": ", what, " is not a list of integers >= 0");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

}  // namespace

std::string dtype_name(c10::ScalarType t, const std::string& what) {
  for (const DtypeName& d : kDtypes) {
    if (d.type == t) return d.name;
  }
  TDIST_THROW(InvalidArgument, "checkpoint: '", what, "' has dtype ", c10::toString(t),
              ", which the safetensors format cannot hold");
}

bool dtype_from_name(const std::string& name, c10::ScalarType* out) {
  for (const DtypeName& d : kDtypes) {
    if (name == d.name) {
      *out = d.type;
      return true;
    }
  }
  return false;
}

Header read_header(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TDIST_CHECK(fd >= 0, InvalidArgument, "checkpoint: cannot open ", path, ": ", errno_text());
  Header h;
  std::string text;
  try {
    struct stat st {};
    TDIST_CHECK(::fstat(fd, &st) == 0, Error, "checkpoint: stat ", path, ": ", errno_text());
    h.file_size = static_cast<uint64_t>(st.st_size);
    TDIST_CHECK(h.file_size >= 8, InvalidArgument, "checkpoint: ", path, " is truncated (",
                h.file_size, " bytes, no header)");
    unsigned char len_bytes[8];
    read_range(fd, path, 0, 8, len_bytes);
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
    TDIST_CHECK(len <= kMaxHeader && 8 + len <= h.file_size, InvalidArgument, "checkpoint: ", path,
                " is truncated or not a safetensors file (header of ", len, " bytes in a file of ",
                h.file_size, ")");
    text.resize(len);
    read_range(fd, path, 8, 8 + len, text.data());
    h.data_begin = 8 + len;
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);

  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  TDIST_CHECK(j.is_object(), InvalidArgument, "checkpoint: ", path,
              " is not a safetensors file (its header is not a JSON object)");
  if (auto m = j.find("__metadata__"); m != j.end()) {
    TDIST_CHECK(m->is_object(), InvalidArgument, "checkpoint: ", path,
                ": __metadata__ is not an object");
    for (const auto& [k, v] : m->items()) {
      if (v.is_string()) h.metadata[k] = v.get<std::string>();
    }
  }
  ordered_json sharding = ordered_json::object();
  if (auto s = h.metadata.find("DCP_SHARDING_INFO"); s != h.metadata.end()) {
    sharding = ordered_json::parse(s->second, nullptr, false);
    TDIST_CHECK(sharding.is_object(), InvalidArgument, "checkpoint: ", path,
                ": DCP_SHARDING_INFO is not a JSON object");
  }
  const uint64_t data_size = h.file_size - h.data_begin;
  for (const auto& [name, info] : j.items()) {
    if (name == "__metadata__") continue;
    TDIST_CHECK(info.is_object() && info.contains("dtype") && info.contains("shape") &&
                    info.contains("data_offsets") && info["dtype"].is_string(),
                InvalidArgument, "checkpoint: ", path, ": the entry of '", name,
                "' lacks dtype, shape or data_offsets");
    Item item;
    item.name = name;
    const std::string dtype = info["dtype"].get<std::string>();
    TDIST_CHECK(dtype_from_name(dtype, &item.dtype), InvalidArgument, "checkpoint: ", path, ": '",
                name, "' has dtype ", dtype, ", which tdist does not load");
    item.shape = int_list(info["shape"], path, "the shape of '" + name + "'");
    const std::vector<int64_t> range = int_list(info["data_offsets"], path, "'" + name + "'");
    TDIST_CHECK(range.size() == 2 && range[0] <= range[1], InvalidArgument, "checkpoint: ", path,
                ": '", name, "' has invalid data_offsets");
    int64_t numel = 1;
    for (int64_t d : item.shape) numel *= d;
    const auto bytes = static_cast<uint64_t>(numel) * c10::elementSize(item.dtype);
    TDIST_CHECK(static_cast<uint64_t>(range[1] - range[0]) == bytes, InvalidArgument,
                "checkpoint: ", path, ": '", name, "' holds ", range[1] - range[0],
                " bytes where its shape and dtype need ", bytes);
    TDIST_CHECK(static_cast<uint64_t>(range[1]) <= data_size, InvalidArgument, "checkpoint: ", path,
                " is truncated: '", name, "' ends at byte ", h.data_begin + range[1],
                " of a file of ", h.file_size);
    item.begin = h.data_begin + static_cast<uint64_t>(range[0]);
    item.end = h.data_begin + static_cast<uint64_t>(range[1]);
    if (auto s = sharding.find(name); s != sharding.end()) {
      TDIST_CHECK(s->is_object() && s->contains("saved_offsets"), InvalidArgument,
                  "checkpoint: ", path, ": DCP_SHARDING_INFO of '", name, "' has no saved_offsets");
      item.offsets = int_list((*s)["saved_offsets"], path, "the saved_offsets of '" + name + "'");
      TDIST_CHECK(item.offsets.size() == item.shape.size(), InvalidArgument, "checkpoint: ", path,
                  ": '", name, "' has ", item.offsets.size(), " offsets for ", item.shape.size(),
                  " dimensions");
    } else {
      item.offsets.assign(item.shape.size(), 0);
    }
    h.items.push_back(std::move(item));
  }
  return h;
}

Layout layout(const std::vector<WriteItem>& items,
              const std::map<std::string, std::string>& extra) {
  ordered_json header = ordered_json::object();
  ordered_json sharding = ordered_json::object();
  Layout out;
  uint64_t offset = 0;
  for (const WriteItem& item : items) {
    const uint64_t bytes = item.data.numel() * item.data.element_size();
    header[item.name] = {{"dtype", dtype_name(item.data.scalar_type(), item.name)},
                         {"shape", item.data.sizes().vec()},
                         {"data_offsets", {offset, offset + bytes}}};
    sharding[item.name] = {{"saved_offsets", item.offsets}};
    out.begin.push_back(offset);
    offset += bytes;
  }
  ordered_json meta = {
      {"DCP_SHARDING_INFO", sharding.dump()}, {"DCP_VERSION", "1.0"}, {"format", "pt"}};
  for (const auto& [k, v] : extra) meta[k] = v;
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  out.head.resize(8);
  for (int i = 0; i < 8; ++i) out.head[i] = static_cast<char>(text.size() >> (8 * i));
  out.head += text;
  for (uint64_t& b : out.begin) b += out.head.size();
  out.size = out.head.size() + offset;
  return out;
}

uint64_t write_file(const std::string& path, const std::vector<WriteItem>& items,
                    const std::map<std::string, std::string>& extra) {
  for (const WriteItem& item : items) {
    TDIST_CHECK(item.data.device().is_cpu() && item.data.is_contiguous(), InvalidArgument,
                "checkpoint: '", item.name, "' must be a contiguous CPU tensor to be written");
  }
  const Layout l = layout(items, extra);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TDIST_CHECK(fd >= 0, Error, "checkpoint: cannot create ", path, ": ", errno_text());
  try {
    write_all(fd, path, l.head.data(), l.head.size());
    for (const WriteItem& item : items) {
      write_all(fd, path, item.data.data_ptr(), item.data.numel() * item.data.element_size());
    }
    TDIST_CHECK(::fsync(fd) == 0, Error, "checkpoint: fsync ", path, ": ", errno_text());
  } catch (...) {
    ::close(fd);
    throw;
  }
  TDIST_CHECK(::close(fd) == 0, Error, "checkpoint: closing ", path, ": ", errno_text());
  return l.size;
}

void write_image(const std::string& path, const char* image, uint64_t size) {
  // O_DIRECT: the disk reads the image itself (no copy into the page cache, no CPU taken
  // from training); whole blocks only, so the last one is written padded and the file cut
  // back to `size`. Where the filesystem refuses O_DIRECT (tmpfs), a plain write.
  const uint64_t padded = (size + kImageAlign - 1) / kImageAlign * kImageAlign;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
  const bool direct = fd >= 0;
  if (!direct) fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TDIST_CHECK(fd >= 0, Error, "checkpoint: cannot create ", path, ": ", errno_text());
  try {
    write_all(fd, path, image, direct ? padded : size);
    if (direct && padded != size) {
      TDIST_CHECK(::ftruncate(fd, static_cast<off_t>(size)) == 0, Error, "checkpoint: truncating ",
                  path, ": ", errno_text());
    }
    TDIST_CHECK(::fsync(fd) == 0, Error, "checkpoint: fsync ", path, ": ", errno_text());
  } catch (...) {
    ::close(fd);
    throw;
  }
  TDIST_CHECK(::close(fd) == 0, Error, "checkpoint: closing ", path, ": ", errno_text());
}

void read_range(int fd, const std::string& path, uint64_t begin, uint64_t end, void* dst) {
  char* p = static_cast<char*>(dst);
  while (begin < end) {
    const ssize_t r = ::pread(fd, p, std::min<uint64_t>(end - begin, uint64_t{1} << 30),
                              static_cast<off_t>(begin));
    if (r < 0 && errno == EINTR) continue;
    TDIST_CHECK(r >= 0, Error, "checkpoint: reading ", path, ": ", errno_text());
    TDIST_CHECK(r > 0, InvalidArgument, "checkpoint: ", path, " is truncated (ends before byte ",
                end, ")");
    p += r;
    begin += static_cast<uint64_t>(r);
  }
}

}  // namespace tdist::checkpoint::safetensors
