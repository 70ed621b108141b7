// The operator schemas of torch_dml_ops, defined once, in C++, on torch's stable ABI.
//
// Loading this library (torch_dml_ops/_C.abi3.so, through torch.ops.load_library in Python, or
// linked into a C++ program) defines the ops; the CPU kernels are registered by gather_nd.cpp,
// scatter_nd.cpp and top_k1.cpp.  Python adds the portable kernel (CompositeExplicitAutograd,
// every other device), the Triton kernels (CUDA), fake kernels, autograd and vmap rules.
#include "checks.h"

namespace {

// The library's tables and constants, compared with the Python ones at import
// (torch_dml_ops/_tables.py).
std::string tables() { return tdo::tables(); }

// The SIMD level the CPU kernels run ("avx512", "avx2" or "scalar": tdo::cpu_isa, which
// TORCH_DML_OPS_CPU_ISA caps), for the benchmark's machine line and the tests of each path.
std::string cpu_isa() { return tdo::isa_name(tdo::cpu_isa()); }

}  // namespace

#define TDO_GATHER_ARGS                                                                      \
  "Tensor input, Tensor indices, int batch_dims=0, int? input_dimension_count=None, "        \
  "int? indices_dimension_count=None, str feature_level='permissive', bool check_indices=True"
#define TDO_SCATTER_ARGS                                                                     \
  "Tensor indices, Tensor updates, str reduction='none', int? input_dimension_count=None, "  \
  "int? indices_dimension_count=None, str feature_level='permissive', "                      \
  "bool check_indices=True, bool deterministic=False"

STABLE_TORCH_LIBRARY(torch_dml_ops, m) {
  // gather_nd: functional, out= (no autograd, like torch's out= ops), and its backward (a
  // scatter-add of the output gradient into zeros of the input's shape; index_sizes are the k
  // indexed input dims' sizes, the batch and trailing ones are grad's: no global shape, so it
  // shards under DTensor).
  m.def("gather_nd(" TDO_GATHER_ARGS ") -> Tensor");
  m.def("gather_nd_out(" TDO_GATHER_ARGS ", *, Tensor(a!) out) -> ()");
  m.def("gather_nd_backward(Tensor grad, Tensor indices, SymInt[] index_sizes, int batch_dims, "
        "int? input_dimension_count, int? indices_dimension_count) -> Tensor");
  // scatter_nd: functional, out=, in place.
  m.def("scatter_nd(Tensor input, " TDO_SCATTER_ARGS ") -> Tensor");
  m.def("scatter_nd_out(Tensor input, " TDO_SCATTER_ARGS ", *, Tensor(a!) out) -> ()");
  m.def("scatter_nd_(Tensor(a!) input, " TDO_SCATTER_ARGS ") -> ()");
  // top_k1: index_dtype None means int64 (a ScalarType default does not survive AOTInductor's
  // serialization).
  m.def("top_k1(Tensor input, int k, int axis=-1, str direction='decreasing', "
        "ScalarType? index_dtype=None, str feature_level='permissive') -> "
        "(Tensor values, Tensor indices)");
  m.def("_tables() -> str");
  m.def("_cpu_isa() -> str");
}

STABLE_TORCH_LIBRARY_IMPL(torch_dml_ops, CompositeExplicitAutograd, m) {
  m.impl("_tables", TORCH_BOX(&tables));
  m.impl("_cpu_isa", TORCH_BOX(&cpu_isa));
}
