// One parameter of a fully_shard unit (internal): its layout when sharded on dim 0 across
// `world` ranks (FSDP2's: rows [r*c, (r+1)*c) on rank r, c = ceil(rows/world), shards
// padded to c rows in the unit's flat buffers), its shard (a view of the unit's flat shard
// buffer, which the module's parameter points to while sharded), and its gathered whole
// tensor, whose memory is freed while sharded without replacing the tensor: autograd keeps
// views of it from forward, which see the data again when backward gathers it anew.
// Thread-safety: none; the unit serializes.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tdist::torch {

class ShardParam {
 public:
  // `param`: the module's tensor, whole, with its name relative to the unit's module.
  ShardParam(std::string name, ::torch::Tensor param, int rank, int world);

  const std::string& name() const { return name_; }
  ::torch::Tensor& param() { return param_; }
  const ::torch::Tensor& param() const { return param_; }
  bool requires_grad() const { return requires_grad_; }
  const std::vector<int64_t>& global_shape() const { return shape_; }
  c10::ScalarType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }            // dim 0 (1 for a scalar)
  int64_t row_numel() const { return row_numel_; }  // elements per row
  int64_t chunk_rows() const { return chunk_; }     // rows per rank, padded
  int64_t padded_numel() const { return chunk_ * row_numel_; }
  int64_t first_row(int rank) const;
  int64_t rows_of(int rank) const;  // this rank's real rows (0 .. chunk)

  // Cuts this rank's rows from the whole parameter into `slot` (padded_numel() elements of
  // the unit's flat shard buffer, zero-filled), and makes the parameter that shard.
  void shard_into(const ::torch::Tensor& slot);
  // The shard (this rank's rows, shaped), a view of the flat shard buffer.
  const ::torch::Tensor& shard() const { return shard_; }
  // Whether the parameter still is the shard this unit made (not replaced or resized).
  bool holds_shard() const;

  // Gathered: allocates the whole tensor (in `dtype`) if needed and copies it from the
  // all_gather output of the unit, `gathered` = [world, S] with this parameter's padded
  // shards at column `offset`; then the parameter is the whole tensor.
  void unshard_from(const ::torch::Tensor& gathered, int64_t offset, c10::ScalarType dtype);
  // The parameter becomes the shard again and the whole tensor's memory is freed.
  void reshard();
  bool is_sharded() const { return sharded_; }
  int64_t full_bytes() const;  // held now by the whole tensor

  // Writes `grad` (whole, any floating dtype; undefined: zeros) into the reduce-scatter
  // input `input` = [world, S] at column `offset`, in input's dtype, padding with zeros.
  void scatter_grad_into(const ::torch::Tensor& grad, const ::torch::Tensor& input,
                         int64_t offset) const;

 private:
  std::string name_;
  ::torch::Tensor param_;
  bool requires_grad_;
  std::vector<int64_t> shape_;
  c10::ScalarType dtype_;
  int rank_, world_;
  int64_t rows_, row_numel_, chunk_;
  ::torch::Tensor shard_;
  ::torch::Tensor full_padded_;  // [world * chunk, ...]; memory freed while sharded
  ::torch::Tensor full_;         // its first rows_ rows, shaped as the parameter
  bool sharded_ = false;
};

}  // namespace tdist::torch
