// What zero.cc and zero_state.cc share (internal): the checks of the optimizers the
// factory makes, and the agreement that turns one rank's problem into InvalidArgument on
// every rank.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/torch/zero.h"

namespace tdist::torch::zero_detail {

// An exception's text without LibTorch's backtrace.
std::string error_text(const std::exception& e);

// Collective: every rank's `mine` ("" when it has no problem) is gathered; when any rank
// has one, every rank throws InvalidArgument naming the first such rank and its text.
void agree_on_problems(ProcessGroup& group, const std::string& mine);

// What is wrong with an optimizer the factory made for `params`, or "": null, not one
// group, or not exactly `params` in that order.
std::string optimizer_problem(const ::torch::optim::Optimizer* optimizer,
                              const std::vector<::torch::Tensor>& params);

// factory(params), checked (InvalidArgument, on this rank only, when it does not fit).
std::unique_ptr<::torch::optim::Optimizer> make_checked(const OptimizerFactory& factory,
                                                        const std::vector<::torch::Tensor>& params);

}  // namespace tdist::torch::zero_detail
