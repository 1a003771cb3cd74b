// The argument checks and staging every tensor collective starts with (collectives.cc,
// coalesced.cc), one set of messages for all: internal to tdist_torch.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include "tdist/dtype.h"
#include "tdist/process_group.h"
#include "tensor_work.h"

namespace tdist::torch::checks {

// `t` is defined, on the CPU (or CUDA where LibTorch has it), dense and of a tdist dtype:
// its DType; InvalidArgument naming `op` and `what` otherwise.
DType check_tensor(const char* op, const std::string& what, const ::torch::Tensor& t);

// `t` must have `ref`'s dtype, and its shape when `same_shape`.
void check_like(const char* op, const std::string& what, const ::torch::Tensor& t,
                const char* ref_name, const ::torch::Tensor& ref, bool same_shape);

// One tensor per rank of `pg`, each checked against `ref` as check_like does.
void check_list(const char* op, const char* what, const std::vector<::torch::Tensor>& list,
                const ProcessGroup& pg, const char* ref_name, const ::torch::Tensor& ref,
                bool same_shape);

inline size_t count_of(const ::torch::Tensor& t) { return static_cast<size_t>(t.numel()); }

// The call's Staging over `ones` and every tensor of `lists` (tensor_work.h).
Staging staging(const char* op, const ProcessGroup& pg,
                std::initializer_list<const ::torch::Tensor*> ones,
                std::initializer_list<const std::vector<::torch::Tensor>*> lists = {});

}  // namespace tdist::torch::checks
