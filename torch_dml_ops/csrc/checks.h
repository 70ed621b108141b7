// The C++ kernels' own checks: every rule a kernel needs to run safely (devices, dtypes it
// can run, shapes, layouts, storage, overlap, index values), with the Python layer's messages
// (torch_dml_ops/_checks.py), so that a kernel called from C++ or through torch.ops with any
// arguments raises a clear error and never reads or writes out of bounds.  The DirectML
// feature levels' limits (dtypes, DimensionCounts, batch_dims, reductions, index types per
// level) are policy, not safety: they live in Python alone (_checks), which runs them before a
// kernel is reached (the public functions, the Autograd kernels of torch.ops, the fake kernels
// when compiling or exporting); the kernels ignore feature_level.  The rules' tables and
// messages come from torch_dml_ops/_data.py (tdo_data.inc: msg::*, filled by fill()).
#pragma once

#include <initializer_list>

#include "common.h"

namespace tdo {

// ------------------------------------------------------------------------------------------
// Dtypes
// ------------------------------------------------------------------------------------------

// "int64, int32": the dtypes as the messages list them.
std::string dtype_list(const ScalarType* begin, const ScalarType* end);
template <size_t N>
std::string dtype_list(const ScalarType (&dtypes)[N]) {
  return dtype_list(dtypes, dtypes + N);
}

// A data / index dtype the kernels run (the permissive level's tables), else a ValueError.
void check_data_dtype(const char* op, const char* tensor_name, ScalarType dtype);
void check_index_dtype(const char* op, const char* tensor_name, ScalarType dtype);

// ------------------------------------------------------------------------------------------
// Tensors
// ------------------------------------------------------------------------------------------

struct Named {
  const char* name;
  const Tensor* t;
};

// Every tensor is a dense (strided) CPU tensor: the first is compared with the rest and a
// mismatch reads as the Python layer's "all tensors must be on the same device".
void check_cpu_strided(const char* op, const std::vector<Named>& tensors);
// The tensor's storage holds every byte it addresses (RuntimeError otherwise).
void check_storage(const char* op, const char* role, const Tensor& t);
// check_storage for each (role, tensor) pair (no allocation: the small calls' path).
inline void check_storages(const char* op, std::initializer_list<Named> tensors) {
  for (const Named& n : tensors) check_storage(op, n.name, *n.t);
}
// t with a set negative bit materialized (the kernels read raw memory).
Tensor resolved(const Tensor& t);
// A preallocated out= tensor or an in-place target: exact shape and dtype, CPU, writable
// (no inference tensor outside inference mode, no internal overlap), no overlap with `inputs`.
void check_out(const char* op, const Tensor& out, const Shape& shape, ScalarType dtype,
               const std::vector<Named>& inputs, const char* name = "OutputTensor (out)");
// The negative bit of a written tensor: the kernels write raw memory.
// A boxed aten query returning a bool (aten::is_neg, aten::is_inference), through the dispatcher.
bool call_bool(const char* name, const Tensor& t);
// Whether t is a negative view (its values the negation of its memory's); false when empty.
bool is_neg(const Tensor& t);
// Record a write into t (the caller's out= or in-place target) on its version counter, before
// the first write, as torch's in-place and out= ops do (autograd detects stale saved tensors by
// it): t.set_(t), a no-op on t's metadata, through torch's own ADInplaceOrView kernel.  False
// when torch refuses: an inference tensor outside inference mode.
bool try_mark_written(const Tensor& t);
// try_mark_written, and where torch refuses, the Python layer's error for an inference tensor
// outside inference mode (`name` is the target's role); nothing has been written then.  neg: t
// is a negative view, whose is_inference() query reads false (torch refuses it only as an
// inference tensor, so the error is that one).
void mark_written(const char* op, const char* name, const Tensor& t, bool neg = false);
// src copied into t's memory through t's strides (and through its negation when neg: t is a
// negative view), by torch's copy_ into an alias of t with a version counter of its own, so
// that the copy records nothing on t's: the caller records the one write (mark_written), as a
// torch op records one per call.
void copy_unrecorded(const Tensor& t, const Tensor& src, bool neg = false);
// A CPU tensor over memory it does not own (`data`, with these sizes and element strides), of
// dtype `dtype` (a shim dtype code): torch's from_blob, with a version counter of its own.
Tensor blob(void* data, IntRef sizes, IntRef strides, int32_t dtype, int32_t device_index = 0);

// ------------------------------------------------------------------------------------------
// gather_nd / scatter_nd layout (torch_dml_ops/_forms.py)
// ------------------------------------------------------------------------------------------

struct GatherLayout {
  bool dml_form = false;
  Shape natural_input_shape, natural_indices_shape, out_shape, natural_out_shape;
  int64_t batch_dims = 0, k = 0;
  // Derived: input viewed as [batch, *index_sizes, *slice], indices as [batch, per_batch, k].
  Shape index_sizes;
  int64_t batch = 1, slice_len = 1, n_tuples = 1, rows = 1, per_batch = 0;
  // Where the indexed sizes came from when not from an input tensor (gather_nd_backward:
  // "index_sizes"), else null.
  const char* sizes_from = nullptr;
  // "InputTensor dimension d" for each indexed dimension, numbered as the caller's tensor
  // ("index_sizes[j]" when sizes_from says so).
  std::string dim_name(int64_t j, int64_t input_rank) const;
};

// min_tuple_size: the smallest index tuple (gather_nd 1; scatter_nd 0, a tuple of size 0
// addressing the whole input, as in ONNX ScatterND).
GatherLayout gather_layout(const char* op, const Shape& input_shape, const Shape& indices_shape,
                           int64_t batch_dims, std::optional<int64_t> input_dimension_count,
                           std::optional<int64_t> indices_dimension_count,
                           const char* result_name = "OutputTensor", int64_t min_tuple_size = 1);

// gather_nd_backward's call (torch_dml_ops/_forms.py backward_layout): the forward input's
// shape, grad's batch and trailing dims around the k `index_sizes`, and its layout; grad's
// shape is checked against it.
GatherLayout backward_layout(const Shape& grad_shape, const Shape& indices_shape,
                             const Shape& index_sizes, int64_t batch_dims,
                             std::optional<int64_t> input_dimension_count,
                             std::optional<int64_t> indices_dimension_count, Shape& input_shape);

// IndexError for the coordinate at row-major position `flat` of `indices` (contiguous,
// index kind `kind`), the Python layer's raise_index_error message.
[[noreturn]] void raise_index_error(const char* op, const void* indices, int kind, int64_t flat,
                                    const Shape& index_tensor_shape, const GatherLayout& lay,
                                    int64_t input_rank);

}  // namespace tdo
