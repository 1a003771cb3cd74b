// ProcessGroup's common part (process_group.h).
#include "tdist/process_group.h"

#include <utility>

#include "tdist/error.h"

namespace tdist {

ProcessGroup::ProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                           std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout) {
  TDIST_CHECK(store_ != nullptr, InvalidArgument, "ProcessGroup: the store is null");
  TDIST_CHECK(size_ >= 1, InvalidArgument, "ProcessGroup: size ", size_, " is below 1");
  TDIST_CHECK(rank_ >= 0 && rank_ < size_, InvalidArgument, "ProcessGroup: rank ", rank_,
              " is outside 0..", size_ - 1);
  TDIST_CHECK(timeout_.count() >= 0, InvalidArgument, "ProcessGroup: timeout ", timeout_.count(),
              " ms is negative");
}

ProcessGroup::~ProcessGroup() = default;

}  // namespace tdist
