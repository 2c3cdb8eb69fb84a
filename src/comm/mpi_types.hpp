// The one place where fsdp's element types and reductions become MPI datatypes and operators.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>

#include "fsdp/comm/reduce_op.hpp"
#include "fsdp/core/dtype.hpp"

namespace fsdp::mpi {

// 16-bit floats travel as MPI_UINT16_T: MPI has no bf16/fp16 types.
MPI_Datatype datatype_of(DType dtype);
// avg maps to sum (ProcessGroup divides afterwards). bf16 and fp16 get user-defined operators that
// reduce in float; they are created on first use and freed when MPI finalizes.
MPI_Op op_of(ReduceOp op, DType dtype);

// Throws fsdp::Error "fsdp: <operation> on rank <r>: <MPI's error text>" unless rc is MPI_SUCCESS.
void check(int rc, const char* operation, int rank = -1);

// inout[i] = in[i] + inout[i] for count elements (host memory), as MPI_SUM and the 16-bit
// operators of op_of add: the same bits as MPI's sum of two ranks' values.
void sum_into(const void* in, void* inout, std::size_t count, DType dtype);

// data[i] *= factor for count elements of a floating dtype (host memory).
void scale(void* data, std::size_t count, DType dtype, double factor);

}  // namespace fsdp::mpi
