#include "mpi_types.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "fsdp/core/error.hpp"
#include "fsdp/core/half_conversion.hpp"

namespace fsdp::mpi {
namespace {

// The conversions inline (fsdp/core/half_conversion.hpp), so that the loops below vectorize
// (src/CMakeLists.txt compiles this file with the vectorizer's dynamic cost model): MPI calls
// these operators on every element a 16-bit reduction moves.
template <class Half, ReduceOp kOp>
void reduce_half(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const Half*>(in);
  auto* b = static_cast<Half*>(inout);
  const int n = *len;
  for (int i = 0; i < n; ++i) {
    const float x = half::widen(a[i]);
    const float y = half::widen(b[i]);
    float r;
    if constexpr (kOp == ReduceOp::max) {
      r = std::max(x, y);
    } else if constexpr (kOp == ReduceOp::min) {
      r = std::min(x, y);
    } else {
      r = x + y;
    }
    b[i] = half::narrow(r, Half{});
  }
}

// Frees the user-defined operators when MPI_Finalize destroys MPI_COMM_SELF's attributes.
int free_ops_at_finalize(MPI_Comm, int, void* attribute, void*);

struct HalfOps {
  MPI_Op ops[2][3];  // [bf16, fp16][sum, max, min]

  HalfOps() {
    create(ops[0][0], &reduce_half<bfloat16, ReduceOp::sum>);
    create(ops[0][1], &reduce_half<bfloat16, ReduceOp::max>);
    create(ops[0][2], &reduce_half<bfloat16, ReduceOp::min>);
    create(ops[1][0], &reduce_half<float16, ReduceOp::sum>);
    create(ops[1][1], &reduce_half<float16, ReduceOp::max>);
    create(ops[1][2], &reduce_half<float16, ReduceOp::min>);
    int keyval = MPI_KEYVAL_INVALID;
    check(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &free_ops_at_finalize, &keyval, nullptr),
          "MPI_Comm_create_keyval");
    check(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, this), "MPI_Comm_set_attr");
    // The attribute keeps the key alive until MPI_Finalize deletes it; the key itself is ours to
    // release now (LeakSanitizer found it leaked once libmpi.so was no longer suppressed).
    check(MPI_Comm_free_keyval(&keyval), "MPI_Comm_free_keyval");
  }
  static void create(MPI_Op& op, MPI_User_function* function) {
    check(MPI_Op_create(function, /*commute=*/1, &op), "MPI_Op_create");
  }
};

int free_ops_at_finalize(MPI_Comm, int, void* attribute, void*) {
  auto* half_ops = static_cast<HalfOps*>(attribute);
  for (auto& row : half_ops->ops) {
    for (MPI_Op& op : row) {
      MPI_Op_free(&op);
    }
  }
  return MPI_SUCCESS;
}

template <class T>
void scale_typed(void* data, std::size_t count, double factor) {
  T* values = static_cast<T*>(data);
  for (std::size_t i = 0; i < count; ++i) {
    if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) {
      values[i] = half::narrow(static_cast<float>(half::widen(values[i]) * factor), T{});
    } else {
      values[i] = static_cast<T>(values[i] * factor);
    }
  }
}

}  // namespace

MPI_Datatype datatype_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::bf16:
    case DType::f16:
      return MPI_UINT16_T;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
  }
  throw Error("invalid DType value " + std::to_string(static_cast<int>(dtype)));
}

MPI_Op op_of(ReduceOp op, DType dtype) {
  const int column = op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0;
  if (is_16_bit(dtype)) {
    static HalfOps half_ops;  // thread-safe one-time creation, after MPI_Init
    return half_ops.ops[dtype == DType::bf16 ? 0 : 1][column];
  }
  return column == 1 ? MPI_MAX : column == 2 ? MPI_MIN : MPI_SUM;
}

void check(int rc, const char* operation, int rank) {
  if (rc == MPI_SUCCESS) {
    return;
  }
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) {
    std::snprintf(text, sizeof text, "MPI error code %d", rc);
  }
  std::string where = rank >= 0 ? " on rank " + std::to_string(rank) : std::string();
  throw Error(ErrorKind::communication, std::string(operation) + where + " failed: " + text);
}

namespace {

template <class T>
void sum_typed(const void* in, void* inout, std::size_t count) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (std::size_t i = 0; i < count; ++i) {
    if constexpr (std::is_integral_v<T>) {  // wraps, as MPI's C does, where C++ would overflow
      using U = std::make_unsigned_t<T>;
      b[i] = static_cast<T>(static_cast<U>(a[i]) + static_cast<U>(b[i]));
    } else {
      b[i] = a[i] + b[i];
    }
  }
}

// The 16-bit operators' own function, in pieces whose length fits its int.
template <class Half>
void sum_half(const void* in, void* inout, std::size_t count) {
  constexpr std::size_t kMostPerCall = 1 << 30;
  for (std::size_t done = 0; done < count; done += kMostPerCall) {
    int n = static_cast<int>(std::min(kMostPerCall, count - done));
    reduce_half<Half, ReduceOp::sum>(const_cast<Half*>(static_cast<const Half*>(in)) + done,
                                     static_cast<Half*>(inout) + done, &n, nullptr);
  }
}

}  // namespace

void sum_into(const void* in, void* inout, std::size_t count, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return sum_typed<float>(in, inout, count);
    case DType::f64:
      return sum_typed<double>(in, inout, count);
    case DType::bf16:
      return sum_half<bfloat16>(in, inout, count);
    case DType::f16:
      return sum_half<float16>(in, inout, count);
    case DType::i32:
      return sum_typed<std::int32_t>(in, inout, count);
    case DType::i64:
      return sum_typed<std::int64_t>(in, inout, count);
  }
  throw Error("invalid DType value " + std::to_string(static_cast<int>(dtype)));
}

void scale(void* data, std::size_t count, DType dtype, double factor) {
  switch (dtype) {
    case DType::f32:
      return scale_typed<float>(data, count, factor);
    case DType::f64:
      return scale_typed<double>(data, count, factor);
    case DType::bf16:
      return scale_typed<bfloat16>(data, count, factor);
    case DType::f16:
      return scale_typed<float16>(data, count, factor);
    case DType::i32:
    case DType::i64:
      break;
  }
  throw Error(std::string("ReduceOp::avg needs a floating dtype, got ") + name_of(dtype) +
              "; use ReduceOp::sum and divide yourself");
}

}  // namespace fsdp::mpi
