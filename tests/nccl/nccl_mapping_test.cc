// What the nccl backend decides without a GPU (nccl_runtime.h): tdist's dtypes and reduce
// ops as NCCL's (bool as uint8; its sum/max as OR and prod/min as AND; no bitwise ops),
// which memory may be a buffer, and the exceptions CUDA and NCCL status codes become. The
// device a process picks: tests/core/device_choice_test.cc.
#include <gtest/gtest.h>

#include <string>

#include "backends/nccl/nccl_runtime.h"
#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist::backends::nccl {
namespace {


TEST(NcclMappingTest, EveryDtypeHasAnNcclTypeOfItsSize) {
  EXPECT_EQ(nccl_datatype(DType::kF32), ncclFloat32);
  EXPECT_EQ(nccl_datatype(DType::kF64), ncclFloat64);
  EXPECT_EQ(nccl_datatype(DType::kF16), ncclFloat16);
  EXPECT_EQ(nccl_datatype(DType::kBF16), ncclBfloat16);
  EXPECT_EQ(nccl_datatype(DType::kI8), ncclInt8);
  EXPECT_EQ(nccl_datatype(DType::kU8), ncclUint8);
  EXPECT_EQ(nccl_datatype(DType::kI32), ncclInt32);
  EXPECT_EQ(nccl_datatype(DType::kI64), ncclInt64);
  EXPECT_EQ(nccl_datatype(DType::kBool), ncclUint8);
  EXPECT_THROW(nccl_datatype(static_cast<DType>(200)), InvalidArgument);
}

TEST(NcclMappingTest, ArithmeticOpsMapToNcclsOwn) {
  for (DType t : kAllDTypes) {
    if (t == DType::kBool) continue;
    EXPECT_EQ(nccl_reduce_op("all_reduce", ReduceOpKind::kSum, t), ncclSum);
    EXPECT_EQ(nccl_reduce_op("all_reduce", ReduceOpKind::kProd, t), ncclProd);
    EXPECT_EQ(nccl_reduce_op("all_reduce", ReduceOpKind::kMin, t), ncclMin);
    EXPECT_EQ(nccl_reduce_op("all_reduce", ReduceOpKind::kMax, t), ncclMax);
    EXPECT_EQ(nccl_reduce_op("all_reduce", ReduceOpKind::kAvg, t), ncclAvg);
  }
}

TEST(NcclMappingTest, BoolSumAndMaxAreOrProdAndMinAreAnd) {
  EXPECT_EQ(nccl_reduce_op("all_reduce", ReduceOpKind::kSum, DType::kBool), ncclMax);
  EXPECT_EQ(nccl_reduce_op("all_reduce", ReduceOpKind::kMax, DType::kBool), ncclMax);
  EXPECT_EQ(nccl_reduce_op("all_reduce", ReduceOpKind::kProd, DType::kBool), ncclMin);
  EXPECT_EQ(nccl_reduce_op("all_reduce", ReduceOpKind::kMin, DType::kBool), ncclMin);
}

TEST(NcclMappingTest, BitwiseOpsAreInvalidArgumentNamingTheOp) {
  for (ReduceOpKind op : {ReduceOpKind::kBand, ReduceOpKind::kBor, ReduceOpKind::kBxor}) {
    for (DType t : {DType::kI32, DType::kU8, DType::kBool}) {
      try {
        nccl_reduce_op("reduce_scatter", op, t);
        FAIL() << reduce_op_name(op) << " mapped to an NCCL op";
      } catch (const InvalidArgument& e) {
        const std::string text = e.what();
        EXPECT_EQ(text.rfind("reduce_scatter: reduce op " + std::string(reduce_op_name(op)), 0), 0u)
            << text;
        EXPECT_NE(text.find("NCCL has no bitwise reductions"), std::string::npos) << text;
      }
    }
  }
}

TEST(NcclMappingTest, TheDeviceSettingIsDeclared) {
  const Setting& s = find_setting("TDIST_NCCL_DEVICE");
  EXPECT_EQ(s.default_value, "-1");
  EXPECT_NE(s.description.find("LOCAL_RANK"), std::string_view::npos);
}

TEST(NcclMappingTest, OnlyDeviceMemoryOfTheGroupsDeviceOrManagedMemoryIsABuffer) {
  EXPECT_EQ(buffer_problem(cudaMemoryTypeDevice, 1, 1), "");
  EXPECT_EQ(buffer_problem(cudaMemoryTypeManaged, 0, 1), "");
  EXPECT_EQ(buffer_problem(cudaMemoryTypeDevice, 0, 1),
            "device memory of CUDA device 0, not of the group's device 1");
  EXPECT_NE(buffer_problem(cudaMemoryTypeHost, 0, 0).find("pinned host memory"), std::string::npos);
  EXPECT_NE(buffer_problem(cudaMemoryTypeUnregistered, 0, 0).find("host memory"),
            std::string::npos);
}

TEST(NcclMappingTest, StatusCodesBecomeTdistExceptions) {
  EXPECT_NO_THROW(check_cuda(cudaSuccess, "x"));
  try {
    check_cuda(cudaErrorNoDevice, "nccl: cudaSetDevice");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nccl: cudaSetDevice: "), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cudaErrorNoDevice"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_nccl(ncclSuccess, "x"));
  EXPECT_NO_THROW(check_nccl(ncclInProgress, "x"));
  EXPECT_THROW(check_nccl(ncclInvalidArgument, "ncclAllReduce"), InvalidArgument);
  EXPECT_THROW(check_nccl(ncclInvalidUsage, "ncclAllReduce"), InvalidArgument);
  EXPECT_THROW(check_nccl(ncclRemoteError, "ncclAllReduce"), PeerError);
  EXPECT_THROW(check_nccl(ncclSystemError, "ncclAllReduce"), PeerError);
  EXPECT_THROW(check_nccl(ncclUnhandledCudaError, "ncclAllReduce"), PeerError);
}

TEST(NcclMappingTest, TheNcclLibraryReportsItsVersion) {
  EXPECT_EQ(nccl_runtime_version().rfind(std::to_string(NCCL_MAJOR) + ".", 0), 0u)
      << nccl_runtime_version();
}

}  // namespace
}  // namespace tdist::backends::nccl
