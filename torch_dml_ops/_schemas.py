"""The operator schemas of the ``torch_dml_ops`` namespace, written once.

Plain data, no imports: ``setup.py`` reads this file (without importing the package or torch) and
generates the C++ list ``registration.cpp`` defines the ops from (``STABLE_TORCH_LIBRARY``, so
that a C++ program linking the extension gets them too); ``_library`` compares the built
extension's schemas with these at load (a stale build is refused) and defines the ops from them
where the extension is not built.
"""

_GATHER = ("Tensor input, Tensor indices, int batch_dims=0, int? input_dimension_count=None, "
           "int? indices_dimension_count=None, str feature_level='permissive', "
           "bool check_indices=True")
_SCATTER = ("Tensor indices, Tensor updates, str reduction='none', "
            "int? input_dimension_count=None, int? indices_dimension_count=None, "
            "str feature_level='permissive', bool check_indices=True, bool deterministic=False")

#: The ops of the namespace, by name.
SCHEMAS = {
    # gather_nd: functional; out= (no autograd, like torch's out= ops); its backward, a
    # scatter-add of the output gradient into zeros of the input's shape.
    "gather_nd": f"gather_nd({_GATHER}) -> Tensor",
    "gather_nd_out": f"gather_nd_out({_GATHER}, *, Tensor(a!) out) -> ()",
    # index_sizes: the k indexed input dims' sizes; the batch and trailing ones are grad's (no
    # global shape, so it shards under DTensor).
    "gather_nd_backward": ("gather_nd_backward(Tensor grad, Tensor indices, "
                           "SymInt[] index_sizes, int batch_dims, int? input_dimension_count, "
                           "int? indices_dimension_count) -> Tensor"),
    # scatter_nd: functional, out=, in place (skips the copy: KV-cache updates).
    "scatter_nd": f"scatter_nd(Tensor input, {_SCATTER}) -> Tensor",
    "scatter_nd_out": f"scatter_nd_out(Tensor input, {_SCATTER}, *, Tensor(a!) out) -> ()",
    "scatter_nd_": f"scatter_nd_(Tensor(a!) input, {_SCATTER}) -> ()",
    # top_k1: index_dtype None means int64 (a ScalarType default does not survive AOTInductor's
    # serialization).
    "top_k1": ("top_k1(Tensor input, int k, int axis=-1, str direction='decreasing', "
               "ScalarType? index_dtype=None, str feature_level='permissive') -> "
               "(Tensor values, Tensor indices)"),
}

#: Ops only the C++ extension defines and implements: the SIMD level its CPU kernels run (for the
#: benchmark's machine line and the tests of each path).
EXTENSION_SCHEMAS = {
    "_cpu_isa": "_cpu_isa() -> str",
}
