// Error context for backends (error_context.h).
#include "diag/error_context.h"

#include "tdist/error.h"

namespace tdist::diag {

std::string describe(int rank, int size, const std::string& backend, const std::string& op,
                     uint64_t seq) {
  return detail::str_cat("rank ", rank, "/", size, " (", backend, ") ", op, " #", seq);
}

std::exception_ptr add_context(std::exception_ptr error, const std::string& prefix) {
  auto wrap = [&](const std::exception& e) {
    std::string what = e.what();
    return what.rfind(prefix, 0) == 0 ? what : prefix + what;
  };
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    return std::make_exception_ptr(InvalidArgument(wrap(e)));
  } catch (const TimeoutError& e) {
    return std::make_exception_ptr(TimeoutError(wrap(e)));
  } catch (const PeerError& e) {
    return std::make_exception_ptr(PeerError(wrap(e)));
  } catch (const DesyncError& e) {
    return std::make_exception_ptr(DesyncError(wrap(e)));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(Error(wrap(e)));
  } catch (...) {
    return std::make_exception_ptr(Error(prefix + "unknown exception"));
  }
}

}  // namespace tdist::diag
