// What the DDP test suites (ddp_test.cc, join_test.cc) share: the name of each CommOverlap
// parameter.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tdist/torch/ddp.h"

namespace tdist::torch {

inline std::string overlap_name(const ::testing::TestParamInfo<CommOverlap>& param) {
  return param.param == CommOverlap::kDuringBackward ? "DuringBackward" : "AfterBackward";
}

}  // namespace tdist::torch
