// top_k1: DirectML TopK1 (a stable top-k) on the CPU, the CPU kernel of torch_dml_ops::top_k1.
//
// Order: every value maps to an order-preserving unsigned key (larger key = better, in both
// directions: "increasing" inverts the key), and every element to a composite (key, MAXIDX -
// index), so that the lower index wins among equal keys and all composites of a row are
// distinct: any selection or sort on composites is stable.  Dtypes of 32 bits or fewer use a
// 32-bit key in a uint64 composite when the row is shorter than 2**32; 64-bit dtypes, and rows of
// 2**32 elements or more of any dtype, a 64-bit key in an unsigned __int128 composite (so every
// row length works).  Unsigned integers (uint64 included) are their own keys: values of 2**63
// and above are the largest.  Floats: -0.0 is +0.0, every NaN is one key above +inf (NaN
// greatest, all NaNs equal), then the sign-flip trick.  Signed integers: the sign bit flipped.
// bool: its byte.  Values are copied back from the input at the selected index, so their bits are
// exact (NaN payloads, -0.0).
//
// Per row (or row segment), the k best so far are kept sorted (k <= kSortedMaxK; a candidate is
// inserted in place, for k <= kNetMaxK by a branch-free min/max network, vector min/max on x86)
// or in an unordered buffer cut back to the k best when full; once k are
// held, the k-th best key + 1 is the floor (the scan is in index order, so a later equal key
// never beats it), and only elements at or above it are candidates.
// - Until the floor is known: a block of KB at a time, seen as L interleaved groups (element j
//   in group j % L) with their maxima; the k-th largest group maximum bounds the k-th best (k
//   groups hold a key that large), and vector compares give the bit masks of the candidates
//   (kChunk at a time, with the bound as it has risen).
// - float32 and int32 (scan_native) compare in their own order (one max per element; a block
//   holding a NaN, which float compares do not order, takes the key pass; "increasing" is the
//   pass on -x or ~x), and once the floor is known, the rest of the row is one filtering pass
//   (nat_next: vector compares against the floor, 64 elements at a time; NaNs are always
//   candidates, their key decides).  Only candidates get a key.  For k > kNetMaxK, a span of
//   several blocks that fits in cache (at most kTwoPassMax) first reads every block's group
//   maxima and every word's (64 elements') maximum; the k-th largest group maximum bounds the
//   whole span, and the second pass compares only the words whose maximum reaches the bound
//   (or the floor, once higher): it offers about k candidates instead of ~k ln(n / k), and
//   reads about k words instead of the span.  A span of one block with k >= len / 32 takes
//   the same bound from groups of four.  Short rows prefetch the row kPrefetchRows on during
//   their candidate passes.
//   Other dtypes compute every key (block_keys) and filter blocks by their maximum.
// - float32 and int32 rows of a call that has many (k <= kNetMaxK), guessed pass
//   (guessed_rows): each thread's rows take a threshold guessed from an earlier row's group
//   maxima; one read gives the elements that reach it and this row's maxima, and when at least
//   k reach it, a network of their composites gives the k best; when fewer (or too many) do,
//   a second read takes the row's own k-th largest group maximum as the threshold, and the
//   passes above take the row only when too many reach that too: few candidates a row, none
//   of them a branch, faster than those passes (M14 in docs/benchmarks.md, "Measured
//   choices").  Rows run in pairs, their networks at once (each hides the other's latency).
//   Rows of few distinct values (many elements equal to any threshold) take the tie pass: the
//   elements above the threshold, and only the first k equal to it (the later ones lose every
//   tie to them), faster on such rows than the guessed pass and its fallbacks (M14).
// On random data a row of 1024 with k = 8 has ~11 candidates.  The k winners are sorted at the
// end (k == n: one sort).  k == 1 is a block-wise max, then its first index by a vector
// compare.  The vector loops are compiled portable, for AVX2 and for AVX-512 and picked at run
// time (cpu_isa).  Rows are spread over torch's threads (cost rule: kStepGrain in element-steps);
// rows fewer than the threads are split into segments whose candidates are merged.
//
// Memory safety: every rule of the Python check (_checks.check_top_k1) is enforced first, with
// its messages; then the input must be a dense CPU tensor whose storage holds every byte it
// addresses, its negative bit is materialized, and the kernel reads a contiguous [rows, n] array
// (the input itself, or a contiguous copy with the axis moved last).  Every index the kernel
// forms is an element position s + j < n of the row it scans, and the outputs are fresh
// contiguous [outer, k, inner] tensors written at (r / inner, j < k, r % inner) for row r <
// outer * inner.  Work buffers (per parallel part, by its stable part number, and the split rows'
// candidates) are allocated before the parallel loops start; a failed allocation raises a
// RuntimeError and nothing has been written.
//
// The parts, each included by the next (one translation unit): top_k1_base.h (constants, the
// AVX-512 helpers), top_k1_keys.h (keys and their candidate masks), top_k1_native.h (the
// native-order pass), top_k1_nets.h (composites, networks, selection and sort), top_k1_plan.h
// (struct TopK: the per-row plan and its passes); this file holds the entry point.
#include "top_k1_plan.h"

namespace tdo {
namespace {

template <class KT>
void run_top_k1(const Tensor& x, int64_t rows, int64_t n, int64_t inner, int64_t k,
                bool largest, KeyFn<KT> kf, Tensor& values, Tensor& indices,
                ScalarType index_dtype) {
  TopK<KT> c;
  c.x = static_cast<const char*>(x.const_data_ptr());
  c.esize = static_cast<int64_t>(x.element_size());
  c.n = n;
  c.inner = inner;
  c.k = k;
  c.cap = std::max(4 * k, k + 64);
  c.mf = mask_fn<KT>();
  c.ins = half_net(k) ? insert_fn<kNetMaxK / 2>() : insert_fn<kNetMaxK>();
  const Nets nets = half_net(k) ? net_fns<kNetMaxK / 2>() : net_fns<kNetMaxK>();
  c.net = nets.one;
  c.net2 = nets.two;
  c.kf = kf;
  c.mask = largest ? KT(0) : static_cast<KT>(~KT(0));
  const ScalarType dt = x.scalar_type();
  if (sizeof(KT) == 4 && (dt == ScalarType::Float || dt == ScalarType::Int)) {
    c.native = x.scalar_type();
    c.nat_f = largest ? nat_fns<float, false>() : nat_fns<float, true>();
    c.nat_i = largest ? nat_fns<int32_t, false>() : nat_fns<int32_t, true>();
    if (!c.nat_f.lanes) c.native = ScalarType::Undefined;
  }
  c.out_v = static_cast<char*>(values.mutable_data_ptr());
  c.out_i = indices.mutable_data_ptr();
  c.index_dtype = index_dtype;
  c.run(rows);
}

// input.movedim(src, dst) (ops.h has no movedim).
Tensor movedim(const Tensor& t, int64_t src, int64_t dst) {
  std::array<StableIValue, 3> stack{torch::stable::detail::from(t),
                                    torch::stable::detail::from(src),
                                    torch::stable::detail::from(dst)};
  TDO_SHIM_CHECK(
      torch_call_dispatcher("aten::movedim", "int", stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<Tensor>(stack[0]);
}

// The Python layer's _check_top_k1 at the permissive level (a DirectML level's limits are
// Python's alone, checks.h), rule for rule and message for message; returns the axis,
// made non-negative.
int64_t check_args(const Tensor& input, int64_t k, int64_t axis, const std::string& direction,
                   ScalarType index_dtype) {
  constexpr const char* op = "top_k1";
  if (direction != kDirectionNames[0] && direction != kDirectionNames[1])
    value_error(fill(msg::direction_choice,
                     {{"op", op}, {"direction", py_repr(direction)},
                      {"choices", cat(py_repr(kDirectionNames[0]), " or ",
                                      py_repr(kDirectionNames[1]))}}));
  check_data_dtype(op, "InputTensor", input.scalar_type());
  int64_t top;  // the largest index the index dtype holds
  switch (index_dtype) {
    case ScalarType::Long: top = INT64_MAX; break;
    case ScalarType::Int: top = INT32_MAX; break;
    case ScalarType::UInt32: top = UINT32_MAX; break;
    default:
      value_error(fill(msg::topk_index_dtype,
                       {{"op", op}, {"supported", dtype_list(kTopkIndexDtypes)},
                        {"index_dtype", dtype_name(index_dtype)}}));
  }
  const Shape shape = shape_of(input);
  const int64_t r = static_cast<int64_t>(shape.size());
  if (r < 1) value_error(fill(msg::input_rank, {{"op", op}, {"shape", py_tuple(shape)}}));
  if (!(-r <= axis && axis < r))
    index_error(fill(msg::topk_axis,
                     {{"op", op}, {"axis", axis}, {"rank", r}, {"lo", -r}, {"hi", r - 1}}));
  const int64_t ax = axis < 0 ? axis + r : axis;
  const int64_t n = shape[ax];
  if (n == 0)
    value_error(fill(msg::topk_empty_axis,
                     {{"op", op}, {"axis", ax}, {"shape", py_tuple(shape)}, {"k", k}}));
  if (!(1 <= k && k <= n))
    value_error(fill(msg::topk_k, {{"op", op}, {"n", n}, {"axis", ax}, {"k", k}}));
  // Every index along the axis must be representable in the OutputIndexTensor's type.
  if (n - 1 > top)
    value_error(fill(msg::topk_index_limit,
                     {{"op", op}, {"n", n}, {"axis", ax}, {"index_dtype", dtype_name(index_dtype)},
                      {"top", top}, {"limit", static_cast<uint64_t>(top) + 1}}));
  return ax;
}

}  // namespace

// The stable top-k of `input` along `axis`: (values, indices), contiguous, input's shape with k
// along the axis; index_dtype None means int64.
std::tuple<Tensor, Tensor> top_k1(Tensor input, int64_t k, int64_t axis, StrArg direction,
                                  std::optional<ScalarType> index_dtype,
                                  StrArg /*feature_level*/) {
  constexpr const char* op = "top_k1";
  const ScalarType idt = index_dtype.value_or(ScalarType::Long);
  const int64_t ax = check_args(input, k, axis, direction.value, idt);
  check_cpu_strided(op, {{"InputTensor", &input}});
  check_storage(op, "InputTensor", input);
  Tensor x = resolved(input);

  Shape out_shape = shape_of(x);
  const int64_t n = out_shape[ax];
  const int64_t inner = prod(out_shape, ax + 1);
  out_shape[ax] = k;
  const ScalarType dtype = x.scalar_type();
  Tensor values = new_output(x, out_shape, dtype);
  Tensor indices = new_output(x, out_shape, idt);
  if (values.numel() == 0) return {values, indices};
  // The kernel reads rows contiguous along the axis: anything else is first copied with the
  // axis moved last (torch's transposing copy beats strided reads along the axis).
  if (inner != 1 || !x.is_contiguous()) x = torch::stable::contiguous(movedim(x, ax, -1));
  const int64_t rows = x.numel() / n;
  const bool largest = direction.value == kDirectionNames[0];  // "decreasing"
  if (x.element_size() == 8 || n >= kNarrowRowLimit)
    run_top_k1<uint64_t>(x, rows, n, inner, k, largest, key64_for(dtype), values,
                         indices, idt);
  else
    run_top_k1<uint32_t>(x, rows, n, inner, k, largest, key32_for(dtype), values,
                         indices, idt);
  return {values, indices};
}

}  // namespace tdo

STABLE_TORCH_LIBRARY_IMPL(torch_dml_ops, CPU, m) { m.impl("top_k1", TORCH_BOX(&tdo::top_k1)); }
