// The safetensors file format (https://huggingface.co/docs/safetensors), as PyTorch's DCP
// writes it per rank (torch/distributed/checkpoint/_hf_utils.py): an 8-byte little-endian
// header length, a JSON header {"<name>": {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {...}} padded with spaces to a multiple of 8 bytes, then the tensors' bytes
// back to back. DCP's metadata: "DCP_SHARDING_INFO" (JSON text {"<name>": {"saved_offsets":
// [...]}}: where the tensor sits in its global tensor), "DCP_VERSION" "1.0", "format" "pt".
#pragma once

#include <c10/core/ScalarType.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tdist::checkpoint::safetensors {

// "F32" for kFloat ...; InvalidArgument naming `what` for a dtype the format has not.
std::string dtype_name(c10::ScalarType t, const std::string& what);
// kFloat for "F32" ...; false for a name tdist does not map.
bool dtype_from_name(const std::string& name, c10::ScalarType* out);

// One tensor of a file: its local shape, its offsets in the global tensor, and where its
// bytes are in the file (absolute).
struct Item {
  std::string name;
  c10::ScalarType dtype = c10::kFloat;
  std::vector<int64_t> shape;
  std::vector<int64_t> offsets;  // zeros when the file has no DCP_SHARDING_INFO
  uint64_t begin = 0, end = 0;   // absolute byte offsets in the file
};

struct Header {
  std::vector<Item> items;
  std::map<std::string, std::string> metadata;  // "__metadata__"
  uint64_t data_begin = 0;
  uint64_t file_size = 0;
};

// Reads and checks `path`'s header: valid JSON, known dtypes, each tensor's byte count
// matching its shape, and every byte range inside the file (a truncated file fails here).
// InvalidArgument naming the file (and the tensor) otherwise.
Header read_header(const std::string& path);

// A file of `items` (each data a tensor of the item's dtype and shape; only its metadata is
// read here), with DCP's metadata plus `extra`: `head` is the file's first bytes (length
// and header), begin[i] where item i's bytes start, size the file's size.
struct WriteItem {
  std::string name;
  ::torch::Tensor data;
  std::vector<int64_t> offsets;
};
struct Layout {
  std::string head;
  std::vector<uint64_t> begin;
  uint64_t size = 0;
};
Layout layout(const std::vector<WriteItem>& items,
              const std::map<std::string, std::string>& extra = {});

// Writes the file of `items` (contiguous CPU tensors) from their memory and fsyncs it;
// returns its size. Error (errno's text) naming the file on failure.
uint64_t write_file(const std::string& path, const std::vector<WriteItem>& items,
                    const std::map<std::string, std::string>& extra = {});

// Writes `size` bytes of a whole file's image (the head, then the items at their begin) and
// fsyncs it. `image` must be kImageAlign-aligned with room for `size` rounded up to it: the
// write bypasses the page cache (O_DIRECT) where the filesystem allows.
inline constexpr uint64_t kImageAlign = 4096;
void write_image(const std::string& path, const char* image, uint64_t size);

// Reads bytes [begin, end) of an open file into dst (pread until done); Error naming
// `path` on a short read or an I/O error.
void read_range(int fd, const std::string& path, uint64_t begin, uint64_t end, void* dst);

}  // namespace tdist::checkpoint::safetensors
