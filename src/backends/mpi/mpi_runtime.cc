// The MPI runtime under the mpi backend (mpi_runtime.h).
#include "backends/mpi/mpi_runtime.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "core/reduce_kernels.h"
#include "net/address.h"
#include "net/fd.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/settings.h"

namespace tdist::backends::mpi {
namespace {

// Handles made once after MPI_Init and never freed: MPI_Finalize releases them.
struct Handles {
  MPI_Datatype f16 = MPI_DATATYPE_NULL;
  MPI_Datatype bf16 = MPI_DATATYPE_NULL;
  MPI_Op sum = MPI_OP_NULL;
  MPI_Op prod = MPI_OP_NULL;
  MPI_Op min = MPI_OP_NULL;
  MPI_Op max = MPI_OP_NULL;
};

const Handles& handles();

DType dtype_of(MPI_Datatype type) {
  if (type == MPI_FLOAT) return DType::kF32;
  if (type == MPI_DOUBLE) return DType::kF64;
  if (type == handles().f16) return DType::kF16;
  if (type == handles().bf16) return DType::kBF16;
  if (type == MPI_INT8_T) return DType::kI8;
  if (type == MPI_UINT8_T) return DType::kU8;
  // Only datatype()'s types reach the kernel ops; an exception cannot cross MPI's C code.
  std::fputs("tdist mpi: a kernel reduction got an unknown MPI datatype\n", stderr);
  std::abort();
}

// MPI calls the function with inout = in op inout; every tdist op commutes.
template <ReduceOpKind kKind>
void kernel_op(void* in, void* inout, int* len, MPI_Datatype* type) {
  core::reduce_into(inout, in, static_cast<size_t>(*len), dtype_of(*type), ReduceOp(kKind));
}

MPI_Datatype two_byte_type() {
  MPI_Datatype t = MPI_DATATYPE_NULL;
  check(MPI_Type_contiguous(2, MPI_BYTE, &t), "MPI_Type_contiguous");
  check(MPI_Type_commit(&t), "MPI_Type_commit");
  return t;
}

MPI_Op kernel(MPI_User_function* fn) {
  MPI_Op op = MPI_OP_NULL;
  check(MPI_Op_create(fn, /*commute=*/1, &op), "MPI_Op_create");
  return op;
}

const Handles& handles() {
  static const Handles h = [] {
    Handles out;
    out.f16 = two_byte_type();
    out.bf16 = two_byte_type();
    out.sum = kernel(&kernel_op<ReduceOpKind::kSum>);
    out.prod = kernel(&kernel_op<ReduceOpKind::kProd>);
    out.min = kernel(&kernel_op<ReduceOpKind::kMin>);
    out.max = kernel(&kernel_op<ReduceOpKind::kMax>);
    return out;
  }();
  return h;
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) MPI_Finalize();
}

struct CommGuard {
  MPI_Comm comm = MPI_COMM_NULL;
  ~CommGuard() {
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

}  // namespace

void ensure_initialized() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  TDIST_CHECK(finalized == 0, Error, "mpi backend: MPI was already finalized in this process");
  if (initialized == 0) {
    int provided = MPI_THREAD_SINGLE;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
    // tdist owns this MPI: its errors are returned, never fatal.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    TDIST_LOG(kDebug) << "mpi backend: initialised MPI (thread level " << provided << ")";
  }
  int level = MPI_THREAD_SINGLE;
  check(MPI_Query_thread(&level), "MPI_Query_thread");
  TDIST_CHECK(level >= MPI_THREAD_MULTIPLE, Error, "mpi backend: MPI runs at thread level ", level,
              " but needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
              "); initialise it with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...), or let "
              "tdist do it, with an MPI built with thread support");
  handles();
}

bool under_mpi_launcher() {
  if (!env_string("OMPI_COMM_WORLD_SIZE").empty()) return true;
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

void throw_mpi_error(int rc, const char* call) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) {
    length = std::snprintf(text, sizeof(text), "MPI error code %d", rc);
  }
  const std::string message = detail::str_cat(call, " failed: ", std::string(text, length));
  int error_class = rc;
  MPI_Error_class(rc, &error_class);
  switch (error_class) {
    case MPI_ERR_ARG:
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_OP:
    case MPI_ERR_RANK:
    case MPI_ERR_ROOT:
    case MPI_ERR_TAG:
    case MPI_ERR_COMM:
    case MPI_ERR_GROUP:
      TDIST_THROW(InvalidArgument, message);
    case MPI_ERR_TRUNCATE:
      TDIST_THROW(DesyncError, message, " (ranks disagree on a message size)");
    default:
      TDIST_THROW(PeerError, message);
  }
}

MPI_Datatype datatype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kF16:
      return handles().f16;
    case DType::kBF16:
      return handles().bf16;
    case DType::kI8:
      return MPI_INT8_T;
    case DType::kU8:
    case DType::kBool:
      return MPI_UINT8_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
  }
  TDIST_THROW(InvalidArgument, "mpi backend: unknown dtype ", static_cast<int>(dtype));
}

MPI_Op reduce_op(DType dtype, ReduceOpKind op) {
  const Handles& h = handles();
  if (dtype == DType::kBool) {
    switch (op) {
      case ReduceOpKind::kProd:
      case ReduceOpKind::kMin:
      case ReduceOpKind::kBand:
        return MPI_LAND;
      case ReduceOpKind::kBxor:
        return MPI_LXOR;
      default:  // sum, max, bor
        return MPI_LOR;
    }
  }
  // OpenMPI 4.1's AVX op component saturates 8-bit sums (127 + 1 = 127) where C and
  // tdist wrap, so 8-bit arithmetic goes through the kernels too.
  const bool kernels =
      dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kI8 || dtype == DType::kU8;
  switch (op) {
    case ReduceOpKind::kSum:
    case ReduceOpKind::kAvg:
    case ReduceOpKind::kPremulSum:
      return kernels ? h.sum : MPI_SUM;
    case ReduceOpKind::kProd:
      return kernels ? h.prod : MPI_PROD;
    case ReduceOpKind::kMin:
      return kernels || is_floating(dtype) ? h.min : MPI_MIN;
    case ReduceOpKind::kMax:
      return kernels || is_floating(dtype) ? h.max : MPI_MAX;
    case ReduceOpKind::kBand:
      return MPI_BAND;
    case ReduceOpKind::kBor:
      return MPI_BOR;
    case ReduceOpKind::kBxor:
      return MPI_BXOR;
  }
  TDIST_THROW(InvalidArgument, "mpi backend: unknown reduce op ", static_cast<int>(op));
}

std::string agree_on_address(const std::function<uint16_t()>& host_port) {
  ensure_initialized();
  // A private communicator: the program's own traffic on MPI_COMM_WORLD never matches ours.
  CommGuard world;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &world.comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(world.comm, MPI_ERRORS_RETURN);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(world.comm, &rank);
  MPI_Comm_size(world.comm, &size);
  CommGuard node;
  check(MPI_Comm_split_type(world.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node.comm),
        "MPI_Comm_split_type");
  int node_size = 0;
  MPI_Comm_size(node.comm, &node_size);

  std::string text;
  if (rank == 0) {
    try {
      const uint16_t port = host_port();
      std::string host = "127.0.0.1";
      if (node_size != size) {
        char name[HOST_NAME_MAX + 1] = {};
        TDIST_CHECK(::gethostname(name, sizeof(name) - 1) == 0, Error,
                    "gethostname failed: ", net::errno_text(errno));
        host = name;
      }
      text = net::format_host_port(host, port);
    } catch (const std::exception& e) {
      text = std::string("!") + e.what();  // '!' never starts a host
    }
  }
  int length = static_cast<int>(text.size());
  check(MPI_Bcast(&length, 1, MPI_INT, 0, world.comm), "MPI_Bcast");
  text.resize(static_cast<size_t>(length));
  check(MPI_Bcast(text.data(), length, MPI_CHAR, 0, world.comm), "MPI_Bcast");
  TDIST_CHECK(!text.empty() && text[0] != '!', Error,
              "MPI rank 0 could not host the rendezvous store: ", text.substr(1));
  return text;
}

}  // namespace tdist::backends::mpi
