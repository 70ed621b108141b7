// scatter_nd's CPU kernels: torch_dml_ops::scatter_nd, scatter_nd_out and scatter_nd_ (schemas in
// registration.cpp), on torch's stable ABI.
//
// Two passes.  The rows pass reads every index tuple, wraps (signed index dtypes) and range-checks
// each coordinate and keeps the tuple's row number (the input viewed as [rows, slice]).  The apply
// pass partitions the DESTINATION rows among threads; each thread scans all tuples in index order
// and applies those landing in its rows, so every row is written by one thread, in index order:
// the last duplicate wins ("none", whatever the deterministic flag says), rows never mix, the
// reductions accumulate in index order, and the result does not depend on the thread count.
// A "none" scatter into a copy (functional, out=) of rows of 64 bytes or more writes each
// destination row once instead: each part maps its rows to their last tuple, then copies runs of
// untouched rows from the source and the mapped rows from the updates (overwrite_once).
//
// Arithmetic is the portable path's (torch's CPU kernels) bit for bit: integers wrap around,
// max/min are scatter_reduce_'s amax/amin with include_self (a NaN update wins, a NaN already
// there stays, ties keep what is there; unsigned types compare unsigned), bool add/max are
// logical or and mul/min logical and.  float16 / bfloat16 "add" and "mul" accumulate each
// destination element in float, in index order, and round once (torch's CPU index_add_ and
// scatter_reduce_ "prod"), whatever the number of updates, threads or backend; max/min compare
// in float and keep the winner's bits.
//
// Targets: a contiguous out= or in-place target is written directly; a strided one (a permuted
// KV cache, a slice) through apply_strided, which moves the rows the tuples address and no
// others; one with the negative bit set receives a contiguous result through copy_ (which
// writes through the negation); negative-bit inputs are materialized first (resolved).  Every
// written target has its version counter bumped (mark_written).
//
// Memory safety: before anything is read, every call checks every metadata rule of the Python
// layer at the permissive level (torch_dml_ops/_checks.py, same order and messages: CPU strided
// tensors, reduction, dtypes, layout, the updates' shape; a DirectML level's limits are Python's
// alone, checks.h), that each tensor's storage holds what it
// addresses (check_storage) and the out= or in-place target (check_out: shape, dtype, no overlap).
// The kernels then read contiguous indices [n_tuples, k] and updates [n_tuples, slice]; a row
// number is formed only from coordinates wrap_check has put inside their dimension, so every
// write lies in the destination's [rows, slice] (a strided one's rows through its strides).
// The rows pass checks every tuple before the first write to anything the caller owns, so a
// failing call modifies nothing.  check_indices=False skips an out-of-range tuple (row -1)
// instead of raising, as on every backend.
#include "checks.h"
#include "scatter_nd_rows.h"

#include <array>
#include <cmath>
#include <iterator>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace tdo {
namespace {

constexpr const char* kOp = "scatter_nd";
constexpr const char* kInplaceOp = "scatter_nd_";
constexpr const char* kOutName = "OutputTensor (out)";
constexpr const char* kTargetName = "InputTensor (the in-place target)";
// kGrain (common.h) for the row scan of rows of at most 16 bytes, where every part reads all
// n row numbers: a split pays only once the writes miss the cache (M23 in docs/benchmarks.md,
// "Measured choices").
constexpr int64_t kGrainShortRows = int64_t(1) << 15;
// How far ahead (in tuples) destination rows are prefetched for small slices.
constexpr int kBlock = 32;
// Up to this many tuples, the row numbers live on the stack (no heap allocation on a small call).
constexpr int64_t kStackRows = 256;

// The reductions, in the order of kReductionNames (generated from _data.REDUCTIONS).
enum Reduction { kNone = 0, kAdd, kMul, kMax, kMin };
constexpr bool same(const char* a, const char* b) {
  return *a == *b && (*a == 0 || same(a + 1, b + 1));
}
static_assert(std::size(kReductionNames) == 5 && same(kReductionNames[kNone], "none") &&
                  same(kReductionNames[kAdd], "add") && same(kReductionNames[kMul], "mul") &&
                  same(kReductionNames[kMax], "max") && same(kReductionNames[kMin], "min"),
              "_data.REDUCTIONS and enum Reduction disagree");

// ------------------------------------------------------------------------------------------
// Small helpers
// ------------------------------------------------------------------------------------------

bool cpu_strided(const Tensor& t) {
  return t.is_cpu() && is_strided(t);
}

// [start, end) byte addresses a strided tensor of `es`-byte elements may touch (empty without
// elements), as check_out computes them.
std::pair<uintptr_t, uintptr_t> byte_span(const Tensor& t, int64_t es) {
  const int64_t numel = t.numel();
  if (numel == 0) return {0, 0};
  int64_t extent = numel;
  if (!t.is_contiguous()) {
    extent = 1;
    auto sizes = t.sizes();
    auto strides = t.strides();
    for (size_t d = 0; d < sizes.size(); d++) extent += (sizes[d] - 1) * strides[d];
  }
  auto start = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {start, start + static_cast<uintptr_t>(extent * es)};
}

int32_t raw_dtype(const Tensor& t) {
  int32_t dtype = 0;
  TDO_SHIM_CHECK(aoti_torch_get_dtype(t.get(), &dtype));
  return dtype;
}

Tensor as_contiguous(const Tensor& t) {
  return t.is_contiguous() ? t : torch::stable::contiguous(t);
}

// A 1-D uint8 CPU tensor over `bytes` bytes at `data`.
Tensor byte_view(const void* data, int64_t bytes) {
  const int64_t stride = 1;
  return blob(const_cast<void*>(data), IntRef(&bytes, 1), IntRef(&stride, 1),
              aoti_torch_dtype_uint8());
}

// The source copied into a functional or out= result: by torch's own copy kernel from 1 MiB
// (glibc's memcpy of a large buffer, whose non-temporal stores meet fresh pages, was slower: M28
// in docs/benchmarks.md, "Measured choices"), through byte views of the two buffers, so that the
// caller's out= has its version counter bumped once (mark_written) and nothing is recorded for
// autograd; below 1 MiB by memcpy, split among threads in parts of at least kCopyGrain bytes
// (torch's own copies split at 32768 elements: 128 KiB of float32), with no dispatcher call.
constexpr int64_t kTorchCopyBytes = int64_t(1) << 20;
constexpr int64_t kCopyGrain = int64_t(1) << 17;
void copy_init(char* dst, const char* src, int64_t bytes) {
  if (bytes >= kTorchCopyBytes) {
    Tensor d = byte_view(dst, bytes);
    torch::stable::copy_(d, byte_view(src, bytes));
    return;
  }
  parallel_parts(bytes, parts_for(bytes, kCopyGrain), [&](int64_t b, int64_t e, int) {
    std::memcpy(dst + b, src + b, static_cast<size_t>(e - b));
  });
}

// ------------------------------------------------------------------------------------------
// Checks (the Python layer's check_scatter_nd, in its order)
// ------------------------------------------------------------------------------------------

// What the kernels need of a call: the data dtype (element size es) and the index kind; the
// input as [rows, slice] with rows = prod(index_sizes), the indices as [n_tuples, k].  rows
// (slice_len) is exact when the input (the updates) has elements; only then is it used.
struct Plan {
  ScalarType dtype = ScalarType::Float;
  int64_t es = 4;
  int kind = kI64;
  int64_t r = 0;  // the natural form's rank (the input's own, or its DimensionCount's)
  int64_t k = 1, n_tuples = 0, rows = 0, slice_len = 0;
  Dims index_sizes;
};

void plan_from_layout(const GatherLayout& lay, Plan& p) {
  p.r = static_cast<int64_t>(lay.natural_input_shape.size());
  p.k = lay.k;
  p.n_tuples = lay.n_tuples;
  p.rows = lay.rows;
  p.slice_len = lay.slice_len;
  p.index_sizes.assign(lay.index_sizes.data(), lay.index_sizes.data() + lay.index_sizes.size());
}

// The natural form's layout without heap allocation, when every layout rule holds and the
// updates have the shape it gives (false otherwise: the full checks then raise the error).
// Products in unsigned arithmetic: an empty tensor's other sizes may overflow them (harmlessly:
// such a product is never used).
bool fast_plan(IntRef is, IntRef xs, IntRef us, Plan& p) {
  const int64_t r = static_cast<int64_t>(is.size()), q = static_cast<int64_t>(xs.size());
  if (r < 1 || q < 1) return false;
  const int64_t k = xs[q - 1];  // 0: every tuple addresses the whole input (one row)
  if (k < 0 || k > r || static_cast<int64_t>(us.size()) != q - 1 + r - k) return false;
  for (int64_t d = 0; d < q - 1; d++)
    if (us[d] != xs[d]) return false;
  for (int64_t d = k; d < r; d++)
    if (us[q - 1 + d - k] != is[d]) return false;
  uint64_t n = 1, rows = 1, slice = 1;
  for (int64_t d = 0; d < q - 1; d++) n *= static_cast<uint64_t>(xs[d]);
  for (int64_t d = 0; d < k; d++) rows *= static_cast<uint64_t>(is[d]);
  for (int64_t d = k; d < r; d++) slice *= static_cast<uint64_t>(is[d]);
  p.r = r;
  p.k = k;
  p.n_tuples = static_cast<int64_t>(n);
  p.rows = static_cast<int64_t>(rows);
  p.slice_len = static_cast<int64_t>(slice);
  p.index_sizes.assign(is.data(), is.data() + k);
  return true;
}

int parse_reduction(std::string_view reduction) {
  for (int i = 0; i < static_cast<int>(std::size(kReductionNames)); i++)
    if (reduction == kReductionNames[i]) return i;
  return -1;
}

// Every metadata rule of DML_SCATTER_ND, in the order of the Python layer's check_scatter_nd (the
// CPU/strided test stands where its same-device test stands); fills p, returns the reduction.
// The common call (the natural form) allocates nothing.
Reduction check_scatter(const char* op, const Tensor& input, const Tensor& indices,
                        const Tensor& updates, std::string_view reduction,
                        std::optional<int64_t> input_dimension_count,
                        std::optional<int64_t> indices_dimension_count, Plan& p) {
  if (!(cpu_strided(input) && cpu_strided(indices) && cpu_strided(updates) &&
        input.get_device_index() == indices.get_device_index() &&
        input.get_device_index() == updates.get_device_index()))
    check_cpu_strided(op, {{"InputTensor", &input}, {"IndicesTensor", &indices},
                           {"UpdatesTensor", &updates}});
  const int red = parse_reduction(reduction);
  if (red < 0) {
    std::string choices;
    for (const char* name : kReductionNames)
      choices += cat(choices.empty() ? "" : ", ", py_repr(name));
    value_error(fill(msg::reduction_choice,
                     {{"op", op}, {"choices", choices}, {"reduction", py_repr(reduction)}}));
  }
  const ScalarType dtype = input.scalar_type();
  check_data_dtype(op, "InputTensor", dtype);
  // spec DML_SCATTER_ND.md "Tensor constraints": Input, Output and Updates share one DataType.
  if (raw_dtype(updates) != raw_dtype(input))
    value_error(fill(msg::updates_dtype, {{"op", op}, {"dtype", dtype_name(updates.scalar_type())},
                                          {"input_dtype", dtype_name(dtype)}}));
  const ScalarType index_dtype = indices.scalar_type();
  check_index_dtype(op, "IndicesTensor", index_dtype);
  p.dtype = dtype;
  p.es = static_cast<int64_t>(input.element_size());
  p.kind = index_kind(index_dtype);
  const bool dml = input_dimension_count.has_value() || indices_dimension_count.has_value();
  if (!dml && fast_plan(input.sizes(), indices.sizes(), updates.sizes(), p))
    return static_cast<Reduction>(red);
  // ONNX ScatterND: the index tuples may be empty (k = 0, each update is the whole input).
  const GatherLayout lay = gather_layout(op, shape_of(input), shape_of(indices), 0,
                                         input_dimension_count, indices_dimension_count,
                                         "UpdatesTensor", 0);
  if (lay.dml_form && updates.dim() != input.dim())
    value_error(fill(msg::dml_rank_equal, {{"op", op}, {"name", "UpdatesTensor"},
                                           {"first", "InputTensor"}, {"rank", input.dim()},
                                           {"got", updates.dim()}}));
  // spec DML_SCATTER_ND.md UpdatesTensor: Sizes = indices' leading segment + input's trailing
  // segment (spec README 1: the segment after the indexed dimensions), right-aligned.
  if (shape_of(updates) != lay.out_shape) {
    const Shape& nx = lay.natural_indices_shape;
    const Shape& ni = lay.natural_input_shape;
    value_error(fill(msg::updates_shape,
                     {{"op", op}, {"want", py_tuple(lay.out_shape)},
                      {"leading", py_tuple(Shape(nx.begin(), nx.end() - 1))},
                      {"trailing", py_tuple(Shape(ni.begin() + lay.k, ni.end()))},
                      {"got", py_tuple(updates.sizes())}}));
  }
  plan_from_layout(lay, p);
  return static_cast<Reduction>(red);
}

// Whether check_out would accept `target` (contiguous, CPU, of the input's shape and dtype,
// overlapping none of `indices`, `updates` and `input` when given) without building its
// arguments: the common call allocates nothing.  False sends the call through check_out itself,
// which raises or accepts.
bool target_ok(const Tensor& target, const Plan& p, const Tensor* input, const Tensor& indices,
               const Tensor& updates) {
  if (!target.is_contiguous()) return false;
  if (input && (!cpu_strided(target) || raw_dtype(target) != raw_dtype(*input) ||
                !same_sizes(target, *input)))
    return false;
  const auto span = byte_span(target, p.es);
  if (span.first == span.second) return true;
  auto overlaps = [&span](const Tensor& t, int64_t es) {
    auto [s, e] = byte_span(t, es);
    return s < span.second && span.first < e;
  };
  const int64_t index_es = p.kind == kI32 || p.kind == kU32 ? 4 : 8;
  return !overlaps(indices, index_es) && !overlaps(updates, p.es) &&
         !(input && overlaps(*input, p.es));
}

// ------------------------------------------------------------------------------------------
// Apply pass
// ------------------------------------------------------------------------------------------

// dst[rows[t]] (op)= upd[t] for t in index order; every rows[t] is in [0, n_rows), or -1 for a
// tuple that check_indices=False skips.  init: when set, dst's rows are first a copy of it (the
// functional scatter and out=; each part copies the rows it owns).
struct Apply {
  char* dst = nullptr;
  const char* init = nullptr;
  const char* upd = nullptr;
  const int64_t* rows = nullptr;
  int64_t n = 0, n_rows = 0, row_bytes = 0, slice_len = 0;
};

// Rows [lo, hi) of one part: every tuple landing there, in index order (run_scan has copied init).
// RB > 0: rows of that constant size (memcpy becomes one load and store), prefetched a block of
// tuples ahead for writing.  Sink (RB <= 16): f may as well be applied to a zeroed scratch row
// (it only stores, or it reads and writes one element), so a tuple of another part's row can go
// there instead of taking a branch (select_ptr).
template <int64_t RB, bool Sink, class F>
void scan_part(const Apply& a, int64_t lo, int64_t hi, const F& f) {
  const int64_t rb = RB > 0 ? RB : a.row_bytes;
  char* const dst = a.dst;
  const char* const upd = a.upd;
  const int64_t* const rows = a.rows;
  const int64_t n = a.n;
  if (Sink && RB > 0 && RB <= 16 && (lo > 0 || hi < a.n_rows)) {
    // Short rows, split among parts: every row is written, those of other parts into a sink
    // (select_ptr), and only this part's are prefetched.
    alignas(16) char sink[16] = {};
    const uint64_t span = static_cast<uint64_t>(hi - lo);
    for (int64_t t = 0; t < n; t++) {
      if (t + kBlock < n) {
        const int64_t p = rows[t + kBlock];
        __builtin_prefetch(static_cast<uint64_t>(p - lo) < span ? dst + p * rb : sink, 1);
      }
      const int64_t r = rows[t];  // (-1: skipped)
      f(select_ptr(static_cast<uint64_t>(r - lo) < span,
                   reinterpret_cast<uintptr_t>(dst) + static_cast<uintptr_t>(r * rb), sink),
        upd + t * rb);
    }
    return;
  }
  for (int64_t t = 0; t < n; t++) {
    if (RB > 0 && RB <= 64 && t + kBlock < n) {
      const int64_t p = rows[t + kBlock];
      if (p >= lo && p < hi) __builtin_prefetch(dst + p * rb, 1);
    }
    const int64_t r = rows[t];
    if (r >= lo && r < hi) f(dst + r * rb, upd + t * rb);
  }
}

// Whether the apply pass's parts, each of which scans every tuple, may be more than one: only
// where the writes, not the scan, are the work: a destination the cache does not hold
// (kSplitDestBytes), rows of kSplitRowBytes or more, or rows of a cache line or more that most
// tuples find cold (at most one tuple for every two rows).  Short rows into a smaller
// destination are slower split in two than in one part (M31 in docs/benchmarks.md, "Measured
// choices").
constexpr int64_t kSplitDestBytes = int64_t(16) << 20;
constexpr int64_t kSplitRowBytes = 1024;
bool split_pays(const Apply& a) {
  return a.row_bytes >= kSplitRowBytes || a.n_rows * a.row_bytes >= kSplitDestBytes ||
         (a.row_bytes >= 64 && 2 * a.n <= a.n_rows);
}

// The number of parts of an apply pass over a.n_rows destination rows with `work` items of
// `grain` each: one where the split does not pay, else at most one part a row.
int dest_parts(const Apply& a, int64_t work, int64_t grain) {
  if (!split_pays(a)) return 1;
  return static_cast<int>(std::min<int64_t>(parts_for(work, grain), a.n_rows));
}

// The destination rows split among parts: every part scans all n row numbers, so more parts pay
// only with enough writes, into a destination the cache does not hold.
template <int64_t RB = 0, bool Sink = false, class F>
void run_scan(const Apply& a, const F& f) {
  // init first, in a pass of its own: folded into each part's scan it was slower (M27 in
  // docs/benchmarks.md, "Measured choices")
  if (a.init) copy_init(a.dst, a.init, a.n_rows * a.row_bytes);
  const int64_t work = a.n * (1 + a.row_bytes / 64);
  const int64_t grain = a.row_bytes <= 16 ? kGrainShortRows : kGrain;
  const int parts = dest_parts(a, work, grain);
  parallel_parts(a.n_rows, parts,
                 [&](int64_t lo, int64_t hi, int) { scan_part<RB, Sink>(a, lo, hi, f); });
}

// The overwrite into a copy (functional scatter, out=) of rows of at least this many bytes:
// each destination row is written once, from its last tuple's update or from the source
// (overwrite_once).  Its map holds 4 bytes a row, at most 1/16 of the destination.
constexpr int64_t kOnceRowBytes = 64;

// dst = init with every addressed row replaced by its last tuple's update, writing each row once:
// a map of the winning tuple per destination row (the last in index order), then one sequential
// pass that copies runs of untouched rows from init and the winners from the updates.  The copy
// then overwritten (copy, then scatter) moved the overwritten rows twice.  Each part maps and
// writes its own rows; the map is allocated before the first write.
void overwrite_once(const Apply& a) {
  // (then a scratch slot per part, a cache line apart, for the other parts' tuples)
  const int64_t slots = a.n_rows + 16 * kMaxThreads;
  std::unique_ptr<int32_t[]> map(new (std::nothrow) int32_t[static_cast<size_t>(slots)]);
  if (!map) runtime_error(kOp, ": cannot allocate ", 4 * slots, " bytes of row winners");
  const int64_t rb = a.row_bytes;
  const int parts = dest_parts(a, a.n + a.n_rows * (1 + rb / 64), kGrain);
  parallel_parts(a.n_rows, parts, [&](int64_t lo, int64_t hi, int part) {
    int32_t* const win = map.get();
    int32_t* const scratch = win + a.n_rows + 16 * part;
    std::fill(win + lo, win + hi, int32_t(-1));
    const uint64_t span = static_cast<uint64_t>(hi - lo);
    for (int64_t t = 0; t < a.n; t++) {
      const int64_t r = a.rows[t];   // -1 (skipped) falls outside every part
      *select_ptr(static_cast<uint64_t>(r - lo) < span,
                  reinterpret_cast<uintptr_t>(win) + static_cast<uintptr_t>(r * 4), scratch) =
          static_cast<int32_t>(t);
    }
    int64_t run = lo;                // the first row of the current run of untouched rows
    for (int64_t r = lo; r < hi; r++) {
      const int32_t t = win[r];
      if (t < 0) continue;
      if (r > run)
        std::memcpy(a.dst + run * rb, a.init + run * rb, static_cast<size_t>((r - run) * rb));
      std::memcpy(a.dst + r * rb, a.upd + t * rb, static_cast<size_t>(rb));
      run = r + 1;
    }
    if (hi > run)
      std::memcpy(a.dst + run * rb, a.init + run * rb, static_cast<size_t>((hi - run) * rb));
  });
}

void overwrite(const Apply& a) {
  if (a.init && a.row_bytes >= kOnceRowBytes && a.n <= INT32_MAX) return overwrite_once(a);
  switch (a.row_bytes) {
    case 1: return run_scan<1, true>(a, [](char* d, const char* s) { std::memcpy(d, s, 1); });
    case 2: return run_scan<2, true>(a, [](char* d, const char* s) { std::memcpy(d, s, 2); });
    case 4: return run_scan<4, true>(a, [](char* d, const char* s) { std::memcpy(d, s, 4); });
    case 8: return run_scan<8, true>(a, [](char* d, const char* s) { std::memcpy(d, s, 8); });
    case 16: return run_scan<16, true>(a, [](char* d, const char* s) { std::memcpy(d, s, 16); });
    default: {
      const size_t rb = static_cast<size_t>(a.row_bytes);
      return run_scan(a, [rb](char* d, const char* s) { std::memcpy(d, s, rb); });
    }
  }
}

// Runs op(x, y) -> new x over the elements of each updated row.
template <class T, class Op>
void reduce_rows(const Apply& a, const Op& op) {
  if (a.slice_len == 1)  // element rows: branch-free over the parts' rows (the sink)
    return run_scan<sizeof(T), true>(a, [op](char* d, const char* s) {
      T x, y;
      std::memcpy(&x, d, sizeof(T));
      std::memcpy(&y, s, sizeof(T));
      x = op(x, y);
      std::memcpy(d, &x, sizeof(T));
    });
  run_scan(a, [len = a.slice_len, op](char* d, const char* s) {
    // a local count: with -fno-strict-aliasing a captured one could alias x[i] and would be
    // reloaded after every store, which keeps the loop from vectorizing
    const int64_t n = len;
    T* x = reinterpret_cast<T*>(d);
    const T* y = reinterpret_cast<const T*>(s);
    for (int64_t i = 0; i < n; i++) x[i] = op(x[i], y[i]);
  });
}

// Integers wrap around, in unsigned arithmetic (no undefined behaviour; unsigned int for the
// narrow types, whose products would otherwise promote to signed int); unsigned types compare
// unsigned.
template <class T>
void apply_int(const Apply& a, Reduction red) {
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  switch (red) {
    case kAdd: return reduce_rows<T>(a, [](T x, T y) { return static_cast<T>(U(x) + U(y)); });
    case kMul: return reduce_rows<T>(a, [](T x, T y) { return static_cast<T>(U(x) * U(y)); });
    case kMax: return reduce_rows<T>(a, [](T x, T y) { return x < y ? y : x; });
    default: return reduce_rows<T>(a, [](T x, T y) { return y < x ? y : x; });
  }
}

// float16 / bfloat16 bits <-> float, as torch converts them.
struct HalfConv {
  static float to(uint16_t h) { return torch::headeronly::detail::fp16_ieee_to_fp32_value(h); }
  static uint16_t from(float f) { return torch::headeronly::detail::fp16_ieee_from_fp32_value(f); }
};
struct BF16Conv {
  static float to(uint16_t h) { return torch::headeronly::detail::f32_from_bits(h); }
  static uint16_t from(float f) { return torch::headeronly::detail::round_to_nearest_even(f); }
};

struct NoConv {
  template <class T>
  static T to(T x) {
    return x;
  }
};

// Elements per row from which torch's scatter_reduce_ takes its vectorized path (the portable
// path meets its other conditions), where an equal value (+0.0 against -0.0) replaces what is
// there; below it, what is there stays.
constexpr int64_t kVectorSlice = 16;

// Whether max (min) of floating values takes the update y over x, as torch's scatter_reduce_
// amax (amin) with include_self: a NaN update wins, a NaN already there stays, ties as above.
// Branch-free (bitwise operators, no early return), so that the row loops vectorize.
template <bool kMax, bool kTiesTakeUpdate, class V>
inline bool take_update(V x, V y) {
  const bool better = kTiesTakeUpdate ? (kMax ? !(y < x) : !(x < y)) : (kMax ? x < y : y < x);
  return std::isnan(y) | (!std::isnan(x) & better);
}

// max/min of T (float16 / bfloat16 bits are compared as floats through C); the winner's bits
// are kept.
template <class T, bool kMax, class C = NoConv>
void extremum(const Apply& a) {
  if (a.slice_len >= kVectorSlice)
    return reduce_rows<T>(
        a, [](T x, T y) { return take_update<kMax, true>(C::to(x), C::to(y)) ? y : x; });
  reduce_rows<T>(a, [](T x, T y) { return take_update<kMax, false>(C::to(x), C::to(y)) ? y : x; });
}

template <class T>
void apply_float(const Apply& a, Reduction red) {
  switch (red) {
    case kAdd: return reduce_rows<T>(a, [](T x, T y) { return x + y; });
    case kMul: return reduce_rows<T>(a, [](T x, T y) { return x * y; });
    case kMax: return extremum<T, true>(a);
    default: return extremum<T, false>(a);
  }
}

// bool: add/max are logical or, mul/min logical and (canonical 0/1 bytes out).
void apply_bool(const Apply& a, Reduction red) {
  if (red == kAdd || red == kMax)
    return reduce_rows<uint8_t>(a, [](uint8_t x, uint8_t y) -> uint8_t { return (x | y) != 0; });
  return reduce_rows<uint8_t>(a, [](uint8_t x, uint8_t y) -> uint8_t { return x && y; });
}

// Rows of float16 / bfloat16 bits to float and back, element by element through C: loops the
// compiler vectorizes (restrict pointers, local counts) where C's conversion is plain integer
// arithmetic, as bfloat16's is.
template <class C>
struct RowConv {
  static void load(float* __restrict acc, const uint16_t* __restrict d, int64_t n) {
    for (int64_t i = 0; i < n; i++) acc[i] = C::to(d[i]);
  }
  template <bool kMulOp>
  static void combine(float* __restrict acc, const uint16_t* __restrict s, int64_t n) {
    if (kMulOp)
      for (int64_t i = 0; i < n; i++) acc[i] *= C::to(s[i]);
    else
      for (int64_t i = 0; i < n; i++) acc[i] += C::to(s[i]);
  }
  static void store(uint16_t* __restrict d, const float* __restrict acc, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = C::from(acc[i]);
  }
};

#if defined(__x86_64__) && defined(__GNUC__)
// float16 and bfloat16 rows 8 elements at a time on AVX2 CPUs (all of which have F16C), the
// tails and a CPU without AVX2 through RowConv (M26 in docs/benchmarks.md, "Measured
// choices": torch's portable float16 conversions are bit arithmetic the compiler does not
// vectorize).  Bit for bit the scalar conversions: F16C's float16 -> float is exact and quiets a
// NaN as HalfConv does, bfloat16 is BF16Conv's integer arithmetic (a shift up; round to nearest
// even, a NaN to 0x7FC0), and a float16 block with a NaN to round back goes through HalfConv
// (the hardware keeps more of a NaN's payload).
struct Wide16 {  // float16: F16C
  using Scalar = HalfConv;
  __attribute__((target("avx2,f16c"))) static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // false: the block holds a NaN (the caller rounds it element by element)
  __attribute__((target("avx2,f16c"))) static bool store8(uint16_t* p, __m256 v) {
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) return false;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return true;
  }
};
struct WideBF16 {  // bfloat16: AVX2 integer arithmetic
  using Scalar = BF16Conv;
  __attribute__((target("avx2,f16c"))) static __m256 load8(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  __attribute__((target("avx2,f16c"))) static bool store8(uint16_t* p, __m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
    return true;
  }
};

template <class W>
__attribute__((target("avx2,f16c"))) void wide_load(float* __restrict acc,
                                                   const uint16_t* __restrict d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, W::load8(d + i));
  RowConv<typename W::Scalar>::load(acc + i, d + i, n - i);
}

template <class W, bool kMulOp>
__attribute__((target("avx2,f16c"))) void wide_combine(float* __restrict acc,
                                                      const uint16_t* __restrict s, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(acc + i), y = W::load8(s + i);
    _mm256_storeu_ps(acc + i, kMulOp ? _mm256_mul_ps(x, y) : _mm256_add_ps(x, y));
  }
  RowConv<typename W::Scalar>::template combine<kMulOp>(acc + i, s + i, n - i);
}

template <class W>
__attribute__((target("avx2,f16c"))) void wide_store(uint16_t* __restrict d,
                                                    const float* __restrict acc, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    if (!W::store8(d + i, _mm256_loadu_ps(acc + i)))
      RowConv<typename W::Scalar>::store(d + i, acc + i, 8);
  RowConv<typename W::Scalar>::store(d + i, acc + i, n - i);
}

// (cpu_isa: TORCH_DML_OPS_CPU_ISA=scalar caps it, so the tests run the scalar conversions)
bool has_wide_rows() {
  static const bool yes = cpu_isa() >= Isa::Avx2 && __builtin_cpu_supports("f16c");
  return yes;
}

// The row functions apply_in_float calls: the wide ones where the CPU has them.
template <class C, class W>
struct WideRows {
  static void load(float* acc, const uint16_t* d, int64_t n) {
    has_wide_rows() ? wide_load<W>(acc, d, n) : RowConv<C>::load(acc, d, n);
  }
  template <bool kMulOp>
  static void combine(float* acc, const uint16_t* s, int64_t n) {
    has_wide_rows() ? wide_combine<W, kMulOp>(acc, s, n)
                    : RowConv<C>::template combine<kMulOp>(acc, s, n);
  }
  static void store(uint16_t* d, const float* acc, int64_t n) {
    has_wide_rows() ? wide_store<W>(d, acc, n) : RowConv<C>::store(d, acc, n);
  }
};
template <class C>
struct Rows : RowConv<C> {};
template <>
struct Rows<HalfConv> : WideRows<HalfConv, Wide16> {};
template <>
struct Rows<BF16Conv> : WideRows<BF16Conv, WideBF16> {};
#else
template <class C>
struct Rows : RowConv<C> {};
#endif

// float16 / bfloat16 accumulated in float and rounded once per element (index_add_ and
// scatter_reduce_ "prod" on the CPU): the tuples are grouped by row (a sort of (row, tuple), so
// each row's updates stay in index order), each group summed (multiplied) into a float copy of
// its row, which is then rounded back.  Rows no tuple addresses are not rewritten.
template <class C, bool kMulOp>
void apply_in_float(const Apply& a) {
  const int64_t n = a.n, len = a.slice_len;
  const int parts =
      static_cast<int>(std::min<int64_t>(parts_for(n * (1 + a.row_bytes / 64), kGrain), n));
  // allocated before the first write (an allocation failure leaves dst untouched)
  std::vector<std::pair<int64_t, int64_t>> order(static_cast<size_t>(n));
  std::vector<float> scratch(static_cast<size_t>(parts * len));
  for (int64_t t = 0; t < n; t++) order[t] = {a.rows[t], t};
  std::sort(order.begin(), order.end());
  if (a.init) copy_init(a.dst, a.init, a.n_rows * a.row_bytes);
  // the tuples check_indices=False skips (row -1) sort first: leave them out
  order.erase(order.begin(), std::lower_bound(order.begin(), order.end(),
                                              std::pair<int64_t, int64_t>(0, 0)));
  const int64_t m = static_cast<int64_t>(order.size());
  uint16_t* dst = reinterpret_cast<uint16_t*>(a.dst);
  const uint16_t* upd = reinterpret_cast<const uint16_t*>(a.upd);
  // A part takes the groups that start in its range.
  parallel_parts(m, std::min<int>(parts, static_cast<int>(std::max<int64_t>(m, 1))),
                 [&](int64_t b, int64_t e, int part) {
    // locals and restrict pointers: with -fno-strict-aliasing a float store could otherwise
    // alias a captured count, which is then reloaded every element and keeps the loops scalar
    const int64_t n_el = len;
    while (b > 0 && b < m && order[b].first == order[b - 1].first) b++;
    while (e > 0 && e < m && order[e].first == order[e - 1].first) e++;
    float* __restrict acc = scratch.data() + part * n_el;
    for (int64_t p = b; p < e;) {
      const int64_t row = order[p].first;
      uint16_t* __restrict d = dst + row * n_el;
      Rows<C>::load(acc, d, n_el);
      for (; p < e && order[p].first == row; p++)
        Rows<C>::template combine<kMulOp>(acc, upd + order[p].second * n_el, n_el);
      Rows<C>::store(d, acc, n_el);
    }
  });
}

// float16 / bfloat16: add and mul accumulate in float, rounded once per element.
template <class C>
void apply_half(const Apply& a, Reduction red) {
  switch (red) {
    case kAdd: return apply_in_float<C, false>(a);
    case kMul: return apply_in_float<C, true>(a);
    case kMax: return extremum<uint16_t, true, C>(a);
    default: return extremum<uint16_t, false, C>(a);
  }
}

void apply(const Apply& a, ScalarType dtype, Reduction red) {
  if (red == kNone) return overwrite(a);
  switch (dtype) {
    case ScalarType::Float: return apply_float<float>(a, red);
    case ScalarType::Double: return apply_float<double>(a, red);
    case ScalarType::Half: return apply_half<HalfConv>(a, red);
    case ScalarType::BFloat16: return apply_half<BF16Conv>(a, red);
    case ScalarType::Long: return apply_int<int64_t>(a, red);
    case ScalarType::Int: return apply_int<int32_t>(a, red);
    case ScalarType::Short: return apply_int<int16_t>(a, red);
    case ScalarType::Char: return apply_int<int8_t>(a, red);
    case ScalarType::Byte: return apply_int<uint8_t>(a, red);
    case ScalarType::UInt16: return apply_int<uint16_t>(a, red);
    case ScalarType::UInt32: return apply_int<uint32_t>(a, red);
    case ScalarType::UInt64: return apply_int<uint64_t>(a, red);
    default: return apply_bool(a, red);  // Bool (check_data_dtype admits nothing else)
  }
}

// ------------------------------------------------------------------------------------------
// A strided target
// ------------------------------------------------------------------------------------------

// The apply pass into a target of any layout (an in-place target or out= that is a view:
// transformers' KV cache permuted to [positions, batch, heads, dim], a slice, a transpose),
// moving the rows the tuples address and nothing else: those rows, each once, are read through
// the target's strides into a compact buffer (in row order), the apply pass runs there with the
// tuples renumbered (so every row sees its updates in index order, as in a contiguous target),
// and the rows are written back.  The contiguous work copy written back whole it replaces cost
// the whole target per call.  source (out=): copied into the target first (copy_ writes through
// its strides), once the buffers are allocated.  `a` holds the updates and row numbers; its dst,
// init and n_rows are this function's.
void apply_strided(Apply a, const Plan& p, Reduction red, Tensor& dst,
                   const Tensor* source) {
  const int64_t n = a.n, rb = a.row_bytes;
  // allocated before the first write (an allocation failure leaves the target untouched)
  std::vector<int64_t> uniq;
  uniq.reserve(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; t++)
    if (a.rows[t] >= 0) uniq.push_back(a.rows[t]);
  std::sort(uniq.begin(), uniq.end());
  uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
  const int64_t m = static_cast<int64_t>(uniq.size());
  std::vector<int64_t> local(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; t++) {
    const int64_t r = a.rows[t];
    local[t] = r < 0 ? -1 : std::lower_bound(uniq.begin(), uniq.end(), r) - uniq.begin();
  }
  const size_t work_bytes = static_cast<size_t>(std::max<int64_t>(m * rb, 1));
  std::unique_ptr<char[]> work(new (std::nothrow) char[work_bytes]);
  if (!work) runtime_error(kOp, ": cannot allocate ", m * rb, " bytes of addressed rows");
  // The natural form's dimensions are dst's last p.r (leading size-1 dimensions a DimensionCount
  // adds or drops address nothing): index dimensions, then the slice.
  auto sizes = dst.sizes();
  auto strides = dst.strides();
  const int64_t nd = static_cast<int64_t>(sizes.size()), pad = nd - p.r;
  StridedSlice slice;
  slice.init(sizes, strides, std::max<int64_t>(pad + p.k, 0), nd, p.es);
  Dims row_steps;  // bytes per coordinate of each index dimension
  row_steps.resize(static_cast<size_t>(p.k));
  for (int64_t j = 0; j < p.k; j++) row_steps[j] = pad + j >= 0 ? strides[pad + j] * p.es : 0;
  if (source) copy_unrecorded(dst, *source);
  char* const base = static_cast<char*>(dst.data_ptr());
  // row number -> the byte offset of its slice (coordinates in row-major order of index_sizes)
  auto row_offset = [&](int64_t row) {
    int64_t off = 0;
    for (int64_t j = p.k; j-- > 0;) {
      const int64_t size = p.index_sizes[j];
      off += (row % size) * row_steps[j];
      row /= size;
    }
    return off;
  };
  const int parts = parts_for(m * (1 + rb / 64), kGrain);
  parallel_parts(m, parts, [&](int64_t lo, int64_t hi, int) {
    for (int64_t i = lo; i < hi; i++) slice.read(work.get() + i * rb, base + row_offset(uniq[i]));
  });
  a.dst = work.get();
  a.init = nullptr;
  a.rows = local.data();
  a.n_rows = m;
  apply(a, p.dtype, red);
  parallel_parts(m, parts, [&](int64_t lo, int64_t hi, int) {
    for (int64_t i = lo; i < hi; i++) slice.write(base + row_offset(uniq[i]), work.get() + i * rb);
  });
}

// ------------------------------------------------------------------------------------------
// One scatter
// ------------------------------------------------------------------------------------------

// What an IndexError message needs of the call: the caller's op name and tensors' shapes.
struct Call {
  const char* op;
  const Tensor& input;
  const Tensor& indices;
  std::optional<int64_t> input_dimension_count, indices_dimension_count;
};

[[noreturn]] void raise_bad_index(const Call& call, const Tensor& idx, int kind, int64_t flat) {
  const GatherLayout lay = gather_layout(call.op, shape_of(call.input), shape_of(call.indices), 0,
                                         call.input_dimension_count,
                                         call.indices_dimension_count, "UpdatesTensor", 0);
  raise_index_error(call.op, idx.data_ptr(), kind, flat, shape_of(call.indices), lay,
                    call.input.dim());
}

// Scatters checked, resolved `indices` and `updates` into `dst` (the input's shape and dtype;
// contiguous, or any layout through apply_strided), which first receives `source` when given
// (else it already holds the input).  Every
// tuple is checked before the first write to dst.  target_name: dst is the caller's tensor
// (out= or the in-place target), marked written (mark_written) once every tuple is checked.
void scatter(const Call& call, const Plan& p, Reduction red, Tensor& dst, const Tensor* source,
             const Tensor& indices, const Tensor& updates, bool check,
             const char* target_name = nullptr) {
  const int64_t n = p.n_tuples;
  if (n == 0) {
    if (target_name) mark_written(call.op, target_name, dst);
    if (source && dst.numel() > 0) {
      if (source->is_contiguous() && dst.is_contiguous())
        copy_init(static_cast<char*>(dst.data_ptr()),
                  static_cast<const char*>(source->data_ptr()), dst.numel() * p.es);
      else
        copy_unrecorded(dst, *source);
    }
    return;
  }
  // Nothing moves when the input is empty: every tuple is still checked (an empty indexed
  // dimension makes every tuple bad), with zero strides, so no row number is formed.
  const bool moves = dst.numel() > 0;
  const Tensor idx = as_contiguous(indices);
  RowsPass rp;
  rp.idx = idx.data_ptr();
  rp.kind = p.kind;
  rp.k = p.k;
  rp.sizes = p.index_sizes.data();
  Dims strides;
  strides.resize(static_cast<size_t>(p.k));
  for (int64_t j = p.k, s = 1; j-- > 0;) {
    strides[j] = moves ? s : 0;
    s *= moves ? p.index_sizes[j] : 1;
  }
  rp.strides = strides.data();
  // The row numbers of the rows pass are kept for the apply pass (recomputing them from the
  // tuples is slower: M24 in docs/benchmarks.md, "Measured choices"; into a fresh result, which
  // could be written before the tuples are checked, too: M30).
  int64_t stack_rows[kStackRows];
  std::unique_ptr<int64_t[]> heap_rows;
  if (moves) {
    if (n <= kStackRows) {
      rp.rows = stack_rows;
    } else {
      heap_rows.reset(new (std::nothrow) int64_t[static_cast<size_t>(n)]);
      if (!heap_rows) runtime_error(call.op, ": cannot allocate ", 8 * n, " bytes of row numbers");
      rp.rows = heap_rows.get();
    }
  }
  if (const int64_t bad = run_rows(rp, n); bad != kNoError) {
    if (check) raise_bad_index(call, idx, rp.kind, bad);
    if (moves) run_rows_skipping(rp, n);  // check_indices=False: the bad tuples are skipped
  }
  if (target_name) mark_written(call.op, target_name, dst);
  if (!moves) return;
  Apply a;
  const Tensor upd = as_contiguous(updates);
  a.upd = static_cast<const char*>(upd.data_ptr());
  a.rows = rp.rows;
  a.n = n;
  a.slice_len = p.slice_len;
  a.row_bytes = p.slice_len * p.es;
  if (!dst.is_contiguous()) return apply_strided(a, p, red, dst, source);
  a.dst = static_cast<char*>(dst.data_ptr());
  if (source) {
    if (source->is_contiguous())
      a.init = static_cast<const char*>(source->data_ptr());
    else
      copy_unrecorded(dst, *source);
  }
  a.n_rows = p.rows;
  apply(a, p.dtype, red);
}

// ------------------------------------------------------------------------------------------
// Entry points
// ------------------------------------------------------------------------------------------

// check_indices: the CPU kernel always checks every index before the first write (no value of
// the flag can make it write out of bounds); the flag says whether an out-of-range tuple is an
// IndexError (true) or skipped (false).  deterministic: the last duplicate in index order always
// wins.
Tensor scatter_nd(Tensor input, Tensor indices, Tensor updates, StrArg reduction,
                  std::optional<int64_t> input_dimension_count,
                  std::optional<int64_t> indices_dimension_count, StrArg /*feature_level*/,
                  bool check_indices, [[maybe_unused]] bool deterministic) {
  Plan p;
  const Reduction red = check_scatter(kOp, input, indices, updates, reduction.value,
                                      input_dimension_count, indices_dimension_count, p);
  check_storages(kOp,
                 {{"InputTensor", &input}, {"IndicesTensor", &indices},
                  {"UpdatesTensor", &updates}});
  const Tensor x = resolved(input);
  Tensor out = empty_contiguous(x, x.sizes());
  scatter({kOp, input, indices, input_dimension_count, indices_dimension_count}, p, red, out, &x,
          resolved(indices), resolved(updates), check_indices);
  return out;
}

void scatter_nd_out(Tensor input, Tensor indices, Tensor updates, StrArg reduction,
                    std::optional<int64_t> input_dimension_count,
                    std::optional<int64_t> indices_dimension_count, StrArg /*feature_level*/,
                    bool check_indices, [[maybe_unused]] bool deterministic,
                    Tensor out) {
  Plan p;
  const Reduction red = check_scatter(kOp, input, indices, updates, reduction.value,
                                      input_dimension_count, indices_dimension_count, p);
  if (!target_ok(out, p, &input, indices, updates))
    check_out(kOp, out, shape_of(input), p.dtype,
              {{"InputTensor", &input}, {"IndicesTensor", &indices}, {"UpdatesTensor", &updates}},
              kOutName);
  check_storages(kOp,
                 {{"InputTensor", &input}, {"IndicesTensor", &indices},
                  {"UpdatesTensor", &updates}, {kOutName, &out}});
  const Tensor x = resolved(input), i = resolved(indices), u = resolved(updates);
  const Call call{kOp, input, indices, input_dimension_count, indices_dimension_count};
  const bool neg = is_neg(out);
  if (!neg) {  // any layout (a strided out= through apply_strided)
    scatter(call, p, red, out, &x, i, u, check_indices, kOutName);
    return;
  }
  // A fresh result, then copied through the negation.
  Tensor fresh = empty_contiguous(x, x.sizes());
  scatter(call, p, red, fresh, &x, i, u, check_indices);
  mark_written(kOp, kOutName, out, true);
  copy_unrecorded(out, fresh, true);
}

void scatter_nd_(Tensor input, Tensor indices, Tensor updates, StrArg reduction,
                 std::optional<int64_t> input_dimension_count,
                 std::optional<int64_t> indices_dimension_count, StrArg /*feature_level*/,
                 bool check_indices, [[maybe_unused]] bool deterministic) {
  Plan p;
  const Reduction red = check_scatter(kInplaceOp, input, indices, updates, reduction.value,
                                      input_dimension_count, indices_dimension_count, p);
  if (!target_ok(input, p, nullptr, indices, updates))
    check_out(kInplaceOp, input, shape_of(input), p.dtype,
              {{"IndicesTensor", &indices}, {"UpdatesTensor", &updates}}, kTargetName);
  check_storages(kInplaceOp,
                 {{"InputTensor", &input}, {"IndicesTensor", &indices},
                  {"UpdatesTensor", &updates}});
  const Tensor i = resolved(indices), u = resolved(updates);
  const Call call{kInplaceOp, input, indices, input_dimension_count, indices_dimension_count};
  if (is_neg(input)) {
    // The values the target shows, scattered into a fresh tensor, written back through the
    // negation.
    const Tensor base = resolved(input);
    Tensor fresh = empty_contiguous(base, base.sizes());
    scatter(call, p, red, fresh, &base, i, u, check_indices);
    mark_written(kInplaceOp, kTargetName, input, true);
    copy_unrecorded(input, fresh, true);
    return;
  }
  // any layout: a strided target through apply_strided (its addressed rows only)
  scatter(call, p, red, input, nullptr, i, u, check_indices, kTargetName);
}

}  // namespace
}  // namespace tdo

STABLE_TORCH_LIBRARY_IMPL(torch_dml_ops, CPU, m) {
  m.impl("scatter_nd", TORCH_BOX(&tdo::scatter_nd));
  m.impl("scatter_nd_out", TORCH_BOX(&tdo::scatter_nd_out));
  m.impl("scatter_nd_", TORCH_BOX(&tdo::scatter_nd_));
}
