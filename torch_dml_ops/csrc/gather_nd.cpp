// gather_nd's CPU kernels: torch_dml_ops::gather_nd, gather_nd_out and gather_nd_backward
// (schemas in registration.cpp), on torch's stable ABI.
//
// The gather moves raw bytes: each index tuple is read, wrapped (signed index dtypes) and
// range-checked in the same loop that copies its slice, with the next rows prefetched, AVX2 row
// copies and streaming stores for outputs far beyond the caches.  The input is always read
// through its strides, never copied: with row kernels when its batch dimensions and its slice
// dimensions each collapse into one strided dimension (any narrow, slice or transpose of the
// indexed dimensions), else slice by slice through a StridedSlice (common.h: a permuted KV cache,
// a slice of a transposed tensor), so a call moves what its tuples address.  A small call
// (natural form, up to kInlineDims dimensions) allocates nothing but its output.
//
// The backward (a scatter-add into zeros) partitions the destination rows among threads, each
// scanning every tuple in index order, so duplicates accumulate in index order whatever the
// thread count, with the arithmetic of torch's CPU index_add_ on the portable path: integers
// wrap around, bool adds are ORs, and float16 / bfloat16 are summed in float and rounded once,
// except with int32 indices, where index_add_ rounds after every add (see the Add* structs).
//
// Memory safety: before anything is read, every call checks every metadata rule of the Python
// layer at the permissive level (torch_dml_ops/_checks.py, same order and messages: CPU strided
// tensors, dtypes, layout; a DirectML level's limits are Python's alone, checks.h), that each tensor's storage holds what it addresses (check_storage) and, for
// out=, the target (check_out: shape, dtype, no overlap; writable).  An index coordinate is used
// only after wrap_check has put it inside its dimension (always, whatever check_indices says), so
// every read lies inside the checked extent of its tensor, and every write inside a fresh output
// or the checked out=.  A caller's out= is written only after a check-only pass over all the
// indices, so a failing call modifies nothing.  check_indices=False turns an out-of-range tuple
// into a zero slice instead of an IndexError, as on every backend.
#include "checks.h"

#include <array>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TDO_X86_AVX2 1
#endif

#define TDO_INLINE inline __attribute__((always_inline))

namespace tdo {
namespace {

constexpr const char* kOp = "gather_nd";
constexpr const char* kBackwardOp = "gather_nd_backward";
// How far ahead (in tuples) source rows are prefetched for small slices.
constexpr int kBlock = 32;
// Outputs at least this large are written with streaming stores (well beyond the last-level
// cache, they are not read back soon), on CPUs where they pay (streaming_pays).
constexpr int64_t kStreamMinBytes = int64_t(16) << 20;

// Whether streaming stores beat plain ones for a large output: on the Intel Xeon measured they
// did, on the AMD EPYC (Zen 4) at no size (M10 in docs/benchmarks.md, "Measured choices").
bool streaming_pays() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool amd = __builtin_cpu_is("amd");
  return !amd;
#else
  return false;  // stream_row is a plain copy there
#endif
}

// ------------------------------------------------------------------------------------------
// Small helpers
// ------------------------------------------------------------------------------------------

bool cpu_strided(const Tensor& t) {
  return t.is_cpu() && is_strided(t);
}

// Dims [b, e) of a strided tensor as one dimension of `size` elements `stride` apart, when they
// collapse into one (size-1 dimensions are skipped); false otherwise.
bool collapse(IntRef sizes, IntRef strides, int64_t b, int64_t e, int64_t& size,
              int64_t& stride) {
  size = 1;
  stride = 1;
  for (int64_t d = e; d-- > b;) {
    if (sizes[d] == 1) continue;
    if (size == 1) {
      stride = strides[d];
    } else if (strides[d] != stride * size) {
      return false;
    }
    size *= sizes[d];
  }
  return true;
}

// ------------------------------------------------------------------------------------------
// Layout of a call
// ------------------------------------------------------------------------------------------

// What the kernels need of a call's layout (GatherLayout's, in the natural form): the input as
// [batch, *index_sizes, *slice] (its last `r` dimensions), the indices as [n_tuples, k].
struct Plan {
  int64_t r = 0, batch_dims = 0, k = 0;
  int64_t batch = 1, slice_len = 1, n_tuples = 0, per_batch = 0, rows = 0;
  Dims index_sizes, out_shape;
};

void plan_from_layout(const GatherLayout& lay, Plan& p) {
  p.r = static_cast<int64_t>(lay.natural_input_shape.size());
  p.batch_dims = lay.batch_dims;
  p.k = lay.k;
  p.batch = lay.batch;
  p.slice_len = lay.slice_len;
  p.n_tuples = lay.n_tuples;
  p.per_batch = lay.per_batch;
  p.rows = lay.rows;
  p.index_sizes.assign(lay.index_sizes.data(), lay.index_sizes.data() + lay.index_sizes.size());
  p.out_shape.assign(lay.out_shape.data(), lay.out_shape.data() + lay.out_shape.size());
}

// The natural form's layout without heap allocation, when every rule of gather_layout holds
// (false otherwise: gather_layout then raises the error).
bool fast_plan(IntRef is, IntRef xs, int64_t batch_dims, Plan& p) {
  const int64_t r = static_cast<int64_t>(is.size()), q = static_cast<int64_t>(xs.size());
  if (r < 1 || q < 1 || batch_dims < 0 || batch_dims >= std::min(q, r)) return false;
  const int64_t k = xs[q - 1];
  if (k < 1 || k > r - batch_dims) return false;
  for (int64_t d = 0; d < batch_dims; d++)
    if (xs[d] != is[d]) return false;
  p.r = r;
  p.batch_dims = batch_dims;
  p.k = k;
  p.batch = 1;
  for (int64_t d = 0; d < batch_dims; d++) p.batch *= is[d];
  p.index_sizes.assign(is.data() + batch_dims, is.data() + batch_dims + k);
  p.rows = p.batch;
  for (int64_t j = 0; j < k; j++) p.rows *= p.index_sizes[j];
  p.slice_len = 1;
  for (int64_t d = batch_dims + k; d < r; d++) p.slice_len *= is[d];
  p.n_tuples = 1;
  for (int64_t d = 0; d < q - 1; d++) p.n_tuples *= xs[d];
  p.per_batch = p.batch ? p.n_tuples / p.batch : 0;
  p.out_shape.resize(static_cast<size_t>(q - 1 + r - batch_dims - k));
  size_t o = 0;
  for (int64_t d = 0; d < q - 1; d++) p.out_shape[o++] = xs[d];
  for (int64_t d = batch_dims + k; d < r; d++) p.out_shape[o++] = is[d];
  return true;
}

// Every metadata rule of gather_nd, in the order of the Python layer's check_gather_nd (the
// CPU/strided test stands where its same-device test stands); fills p.  The common call (the
// natural form) allocates nothing.
void check_gather(const Tensor& input, const Tensor& indices, int64_t batch_dims,
                  std::optional<int64_t> input_dimension_count,
                  std::optional<int64_t> indices_dimension_count, Plan& p) {
  if (!(cpu_strided(input) && cpu_strided(indices) &&
        input.get_device_index() == indices.get_device_index()))
    check_cpu_strided(kOp, {{"InputTensor", &input}, {"IndicesTensor", &indices}});
  check_data_dtype(kOp, "InputTensor", input.scalar_type());
  check_index_dtype(kOp, "IndicesTensor", indices.scalar_type());
  const bool dml = input_dimension_count.has_value() || indices_dimension_count.has_value();
  if (!dml && fast_plan(input.sizes(), indices.sizes(), batch_dims, p)) return;
  plan_from_layout(gather_layout(kOp, shape_of(input), shape_of(indices), batch_dims,
                                 input_dimension_count, indices_dimension_count),
                   p);
}

// ------------------------------------------------------------------------------------------
// Index tuples -> offsets
// ------------------------------------------------------------------------------------------

// The offset of tuple t: base + sum_j wrap(idx[t * k + j]) * strides[j], or -1 with bad_col set
// to the first out-of-range column (a bad coordinate is never used).  k >= 1.
template <int Kind>
TDO_INLINE int64_t tuple_offset(const void* idx, int64_t t, int64_t k, const int64_t* sizes,
                                const int64_t* strides, int64_t base, int64_t& bad_col) {
  constexpr bool kSigned = Kind == kI32 || Kind == kI64;
  const int64_t first = t * k;
  int64_t v = wrap_check(load_index(idx, Kind, first), sizes[0], kSigned);
  if (v < 0) {
    bad_col = 0;
    return -1;
  }
  int64_t off = base + v * strides[0];
  for (int64_t j = 1; j < k; j++) {
    v = wrap_check(load_index(idx, Kind, first + j), sizes[j], kSigned);
    if (v < 0) {
      bad_col = j;
      return -1;
    }
    off += v * strides[j];
  }
  return off;
}

// ------------------------------------------------------------------------------------------
// Gather
// ------------------------------------------------------------------------------------------

// Tuple t (of batch t / per_batch) reads the slice at byte offset
// batch * batch_stride + sum_j index_j * strides[j] of src: slice_len elements of es bytes,
// slice_stride bytes apart (dense: one row of row_bytes bytes), written to out + t * row_bytes.
struct Gather {
  char* out = nullptr;
  const char* src = nullptr;
  const void* idx = nullptr;
  int kind = kI64;
  bool copy = false;  // false: check the indices only (reads nothing else)
  bool dense = true;
  bool stream = false;
  int64_t k = 1, per_batch = 1, batch_stride = 0, row_bytes = 0, slice_len = 0, es = 1,
          slice_stride = 0;
  const int64_t* sizes = nullptr;
  Dims strides;
  // Any other layout (read_geometry false): each slice read through `slice`, each batch's base
  // offset from batch_offs when the batch dimensions do not collapse either.
  const StridedSlice* slice = nullptr;
  const int64_t* batch_offs = nullptr;
};

// Fills g's read geometry for `input` (its last p.r dimensions: [batch, index dims, slice]);
// false when its batch or slice dimensions do not collapse into one strided dimension each
// (general_geometry then describes it).
bool read_geometry(const Tensor& input, const Plan& p, Gather& g) {
  auto sizes = input.sizes();
  auto strides = input.strides();
  const int64_t pad = static_cast<int64_t>(sizes.size()) - p.r;
  const int64_t first_slice = pad + p.batch_dims + p.k;
  int64_t batch = 0, batch_stride = 0, slice = 0, slice_stride = 0;
  if (!collapse(sizes, strides, pad, pad + p.batch_dims, batch, batch_stride) ||
      !collapse(sizes, strides, first_slice, pad + p.r, slice, slice_stride))
    return false;
  g.es = static_cast<int64_t>(input.element_size());
  g.batch_stride = batch_stride * g.es;
  g.strides.resize(static_cast<size_t>(p.k));
  for (int64_t j = 0; j < p.k; j++) g.strides[j] = strides[pad + p.batch_dims + j] * g.es;
  g.dense = slice <= 1 || slice_stride == 1;
  g.slice_stride = slice_stride * g.es;
  return true;
}

// What the general kernel needs of a layout read_geometry refused: the slice as runs, and each
// batch's base offset (bytes) when the batch dimensions do not collapse (g.batch_stride when
// they do): a slice's runs and a table of p.batch offsets (p.batch <= p.n_tuples) are built,
// never a copy of the input.
struct GeneralGeometry {
  StridedSlice slice, batches;
  std::vector<int64_t> batch_offs;
};

void general_geometry(const Tensor& input, const Plan& p, Gather& g, GeneralGeometry& geo) {
  auto sizes = input.sizes();
  auto strides = input.strides();
  const int64_t pad = static_cast<int64_t>(sizes.size()) - p.r;
  const int64_t first_slice = pad + p.batch_dims + p.k;
  g.es = static_cast<int64_t>(input.element_size());
  g.strides.resize(static_cast<size_t>(p.k));
  for (int64_t j = 0; j < p.k; j++) g.strides[j] = strides[pad + p.batch_dims + j] * g.es;
  geo.slice.init(sizes, strides, first_slice, pad + p.r, g.es);
  g.slice = &geo.slice;
  g.dense = false;
  int64_t batch = 0, batch_stride = 0;
  g.batch_stride = 0;
  if (collapse(sizes, strides, pad, pad + p.batch_dims, batch, batch_stride)) {
    g.batch_stride = batch_stride * g.es;
    return;
  }
  geo.batches.init(sizes, strides, pad, pad + p.batch_dims, g.es);
  geo.batch_offs.resize(static_cast<size_t>(p.batch));
  const int64_t len = geo.batches.run_len(), step = geo.batches.run_step();
  geo.batches.each_run([&](int64_t r, int64_t off) {
    for (int64_t i = 0; i < len; i++)
      geo.batch_offs[static_cast<size_t>(r * len + i)] = off + i * step;
  });
  g.batch_offs = geo.batch_offs.data();
}

// Rows of a constant size (check only when RB is 0): a block of tuples is resolved first,
// prefetching each source row, so that the block's cache misses are in flight together while
// the copies wait for the first ones.
template <int Kind, int64_t RB>
void gather_rows(const Gather& g, int64_t begin, int64_t end, std::atomic<int64_t>& first_bad) {
  const int64_t pb = g.per_batch;
  int64_t b = begin / pb, r = begin % pb;  // batch and position in it, advanced per tuple
  int64_t offs[kBlock];
  for (int64_t t0 = begin; t0 < end; t0 += kBlock) {
    const int64_t n = std::min<int64_t>(end - t0, kBlock);
    for (int64_t i = 0; i < n; i++) {
      int64_t bad_col = 0;
      const int64_t off = tuple_offset<Kind>(g.idx, t0 + i, g.k, g.sizes, g.strides.data(),
                                             b * g.batch_stride, bad_col);
      if (off < 0) {
        // every later tuple of this range has a larger position: stop here
        record_error(first_bad, (t0 + i) * g.k + bad_col);
        return;
      }
      offs[i] = off;
      if (RB > 0 && RB <= 64) __builtin_prefetch(g.src + off);
      if (++r == pb) {
        r = 0;
        b++;
      }
    }
    if (RB > 0)
      for (int64_t i = 0; i < n; i++) std::memcpy(g.out + (t0 + i) * RB, g.src + offs[i], RB);
  }
}

// Copy one long row with non-temporal stores (dst 16-byte aligned, rb a multiple of 16): a large
// output is not read back soon, and streaming stores skip reading its lines into the cache first
// (a third of the memory traffic of a plain copy).
void stream_row(char* dst, const char* src, int64_t rb) {
#ifdef __SSE2__
  for (int64_t o = 0; o < rb; o += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + o),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + o)));
#else
  std::memcpy(dst, src, static_cast<size_t>(rb));
#endif
}

// Copy one row of a generic length: four loads, then four stores, so that a load is never
// queued behind a store to the same 4 KiB offset (the gathered rows and the output rows are
// equally aligned); AVX2 where the CPU has it (M29 in docs/benchmarks.md, "Measured choices").
#ifdef TDO_X86_AVX2
__attribute__((target("avx2"))) void copy_row_avx2(char* dst, const char* src, int64_t rb) {
  int64_t o = 0;
  for (; o + 128 <= rb; o += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + o));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + o + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + o + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + o + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + o), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + o + 32), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + o + 64), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + o + 96), d);
  }
  if (o < rb) std::memcpy(dst + o, src + o, static_cast<size_t>(rb - o));
}
#endif

void copy_row_sse(char* dst, const char* src, int64_t rb) {
  int64_t o = 0;
#ifdef __SSE2__
  for (; o + 64 <= rb; o += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + o));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + o + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + o + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + o + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + o), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + o + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + o + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + o + 48), d);
  }
#endif
  if (o < rb) std::memcpy(dst + o, src + o, static_cast<size_t>(rb - o));
}

using RowCopy = void (*)(char* dst, const char* src, int64_t rb);

RowCopy row_copy() {
#ifdef TDO_X86_AVX2
  static const RowCopy fn = cpu_isa() >= Isa::Avx2 ? copy_row_avx2 : copy_row_sse;
  return fn;
#else
  return copy_row_sse;
#endif
}

// Rows of a generic length.  Tuples are resolved (and checked) kAhead before their row is
// copied, and the resolved row's first lines prefetched then: the random jump to a new row is
// what the hardware prefetcher cannot guess, and one row of lead is too short to hide a miss;
// four is enough (M11 in docs/benchmarks.md, "Measured choices").
constexpr int64_t kAhead = 4;  // a power of 2
// Bytes of a resolved row prefetched (the hardware prefetcher follows on from there).
constexpr int64_t kPrefetchRowBytes = 256;

template <int Kind, bool Stream>
void gather_rows_any(const Gather& g, int64_t begin, int64_t end,
                     std::atomic<int64_t>& first_bad) {
  const RowCopy copy = Stream ? stream_row : row_copy();
  const int64_t rb = g.row_bytes, pb = g.per_batch;
  const int64_t fetch = std::min(rb, kPrefetchRowBytes);
  char* const out = g.out;
  const char* const src = g.src;
  const int64_t* const strides = g.strides.data();
  int64_t b = begin / pb, r = begin % pb;
  int64_t ring[kAhead];  // the offsets of tuples t - kAhead .. t - 1, at t % kAhead
  int64_t t = begin;
  for (; t < end; t++) {
    int64_t bad_col = 0;
    const int64_t next =
        tuple_offset<Kind>(g.idx, t, g.k, g.sizes, strides, b * g.batch_stride, bad_col);
    if (next < 0) {
      record_error(first_bad, t * g.k + bad_col);
      break;
    }
    for (int64_t o = 0; o < fetch; o += 64) __builtin_prefetch(src + next + o);
    int64_t& slot = ring[t & (kAhead - 1)];
    if (t - begin >= kAhead) copy(out + (t - kAhead) * rb, src + slot, rb);
    slot = next;
    if (++r == pb) {
      r = 0;
      b++;
    }
  }
  if (t == end)
    for (int64_t u = std::max(begin, end - kAhead); u < end; u++)
      copy(out + u * rb, src + ring[u & (kAhead - 1)], rb);
#ifdef __SSE2__
  if (Stream) _mm_sfence();  // streaming stores visible before the caller reads them
#endif
}

// A slice whose elements are not adjacent (a transposed input): element by element.
template <int Kind, int ES>
void gather_strided(const Gather& g, int64_t begin, int64_t end,
                    std::atomic<int64_t>& first_bad) {
  const int64_t pb = g.per_batch, n = g.slice_len, ss = g.slice_stride;
  int64_t b = begin / pb, r = begin % pb;
  for (int64_t t = begin; t < end; t++) {
    int64_t bad_col = 0;
    const int64_t off = tuple_offset<Kind>(g.idx, t, g.k, g.sizes, g.strides.data(),
                                           b * g.batch_stride, bad_col);
    if (off < 0) {
      record_error(first_bad, t * g.k + bad_col);
      return;
    }
    char* dst = g.out + t * g.row_bytes;
    const char* src = g.src + off;
    for (int64_t e = 0; e < n; e++) std::memcpy(dst + e * ES, src + e * ss, ES);
    if (++r == pb) {
      r = 0;
      b++;
    }
  }
}

// The byte offset of batch b's first element.
TDO_INLINE int64_t batch_base(const Gather& g, int64_t b) {
  return g.batch_offs ? g.batch_offs[b] : b * g.batch_stride;
}

// Any other layout: each slice through its runs (general_geometry).
template <int Kind>
void gather_general(const Gather& g, int64_t begin, int64_t end,
                    std::atomic<int64_t>& first_bad) {
  const int64_t pb = g.per_batch;
  for (int64_t t = begin; t < end; t++) {
    const int64_t b = t / pb;
    int64_t bad_col = 0;
    const int64_t off =
        tuple_offset<Kind>(g.idx, t, g.k, g.sizes, g.strides.data(),
                           batch_base(g, b), bad_col);
    if (off < 0) {
      record_error(first_bad, t * g.k + bad_col);
      return;
    }
    g.slice->read(g.out + t * g.row_bytes, g.src + off);
  }
}

template <int Kind>
void gather_part(const Gather& g, int64_t begin, int64_t end, std::atomic<int64_t>& first_bad) {
  if (!g.copy) return gather_rows<Kind, 0>(g, begin, end, first_bad);
  if (g.slice) return gather_general<Kind>(g, begin, end, first_bad);
  if (!g.dense) {
    switch (g.es) {
      case 1: return gather_strided<Kind, 1>(g, begin, end, first_bad);
      case 2: return gather_strided<Kind, 2>(g, begin, end, first_bad);
      case 4: return gather_strided<Kind, 4>(g, begin, end, first_bad);
      default: return gather_strided<Kind, 8>(g, begin, end, first_bad);
    }
  }
  switch (g.row_bytes) {  // a constant size: memcpy becomes one load and store
    case 1: return gather_rows<Kind, 1>(g, begin, end, first_bad);
    case 2: return gather_rows<Kind, 2>(g, begin, end, first_bad);
    case 4: return gather_rows<Kind, 4>(g, begin, end, first_bad);
    case 8: return gather_rows<Kind, 8>(g, begin, end, first_bad);
    case 16: return gather_rows<Kind, 16>(g, begin, end, first_bad);
    default:
      if (g.stream && g.row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(g.out) % 16 == 0)
        return gather_rows_any<Kind, true>(g, begin, end, first_bad);
      return gather_rows_any<Kind, false>(g, begin, end, first_bad);
  }
}

// Runs g over tuples [0, n) (copy, or check only); the smallest flat position of a bad index
// coordinate, or kNoError.
int64_t run_gather(const Gather& g, int64_t n) {
  std::atomic<int64_t> first_bad{kNoError};
  const int64_t grain = std::max<int64_t>(1, kGrain / (1 + g.row_bytes / 64));
  const int parts = n < 2 * grain ? 1 : parts_for(n, grain);
  parallel_parts(n, parts, [&](int64_t begin, int64_t end, int) {
    with_index_kind(g.kind, [&](auto kind) {
      gather_part<decltype(kind)::value>(g, begin, end, first_bad);
    });
  });
  return first_bad.load();
}

// check_indices=False, once a pass has found an out-of-range tuple (the fast passes stop at it):
// every tuple again, a bad one giving a zero slice (as on every backend), the others copied.
template <int Kind>
void gather_skipping(const Gather& g, int64_t begin, int64_t end) {
  const int64_t rb = g.row_bytes;
  for (int64_t t = begin; t < end; t++) {
    const int64_t b = t / g.per_batch;
    int64_t bad_col = 0;
    const int64_t off =
        tuple_offset<Kind>(g.idx, t, g.k, g.sizes, g.strides.data(),
                           batch_base(g, b), bad_col);
    char* dst = g.out + t * rb;
    if (off < 0) {
      std::memset(dst, 0, static_cast<size_t>(rb));
    } else if (g.slice) {
      g.slice->read(dst, g.src + off);
    } else if (g.dense) {
      std::memcpy(dst, g.src + off, static_cast<size_t>(rb));
    } else {
      for (int64_t e = 0; e < g.slice_len; e++)
        std::memcpy(dst + e * g.es, g.src + off + e * g.slice_stride, static_cast<size_t>(g.es));
    }
  }
}

void run_gather_skipping(const Gather& g, int64_t n) {
  const int64_t grain = std::max<int64_t>(1, kGrain / (1 + g.row_bytes / 64));
  const int parts = n < 2 * grain ? 1 : parts_for(n, grain);
  parallel_parts(n, parts, [&](int64_t begin, int64_t end, int) {
    with_index_kind(g.kind, [&](auto kind) {
      gather_skipping<decltype(kind)::value>(g, begin, end);
    });
  });
}

// What an IndexError message needs of the call.
struct Call {
  const Tensor& input;
  int64_t batch_dims;
  std::optional<int64_t> input_dimension_count, indices_dimension_count;
};

[[noreturn]] void raise_bad_index(const Call& call, const Tensor& indices, int kind,
                                  int64_t flat) {
  GatherLayout lay = gather_layout(kOp, shape_of(call.input), shape_of(indices), call.batch_dims,
                                   call.input_dimension_count, call.indices_dimension_count);
  raise_index_error(kOp, indices.data_ptr(), kind, flat, shape_of(indices), lay,
                    call.input.dim());
}

// gather_nd of checked, resolved tensors into dst (contiguous, p.out_shape, of input's dtype).
// When dst is the caller's out= (`target`), every index is checked before the first write, and
// the write is recorded on target's version counter in between.  check: an out-of-range tuple
// is an IndexError; else it gives a zero slice (a pass that finds one is followed by
// gather_skipping: no cost without one).
void gather_into(char* dst, const Tensor& input, const Tensor& indices, const Plan& p,
                 const Tensor* target, const Call& call, bool check) {
  auto mark = [&] {
    if (target) mark_written(kOp, "OutputTensor (out)", *target);
  };
  if (p.n_tuples == 0) return mark();
  const Tensor idx = indices.is_contiguous() ? indices : torch::stable::contiguous(indices);
  Gather g;
  g.idx = idx.data_ptr();
  g.kind = index_kind(idx.scalar_type());
  g.k = p.k;
  g.sizes = p.index_sizes.data();
  g.per_batch = p.per_batch;
  g.slice_len = p.slice_len;
  // Nothing to read when the input is empty (every tuple is then out of range) or the slices
  // are: the check pass alone.
  const bool moves = p.slice_len > 0 && input.numel() > 0;
  GeneralGeometry geo;
  if (moves && !read_geometry(input, p, g)) general_geometry(input, p, g, geo);
  if (!moves) {  // offsets are computed but never used
    g.strides.resize(static_cast<size_t>(p.k));
    for (int64_t j = 0; j < p.k; j++) g.strides[j] = 0;
  }
  g.row_bytes = p.slice_len * static_cast<int64_t>(input.element_size());
  g.src = static_cast<const char*>(input.data_ptr());
  bool skipping = false;
  if (target || !moves) {
    if (int64_t bad = run_gather(g, p.n_tuples); bad != kNoError) {
      if (check) raise_bad_index(call, idx, g.kind, bad);
      skipping = true;
    }
  }
  mark();
  g.out = dst;
  if (!moves) {
    // an empty input with slices: every tuple is out of range, every slice zero
    if (skipping && g.row_bytes > 0)
      std::memset(dst, 0, static_cast<size_t>(p.n_tuples * g.row_bytes));
    return;
  }
  if (skipping) return run_gather_skipping(g, p.n_tuples);
  g.copy = true;
  g.stream = g.dense && p.n_tuples * g.row_bytes >= kStreamMinBytes && streaming_pays();
  if (int64_t bad = run_gather(g, p.n_tuples); bad != kNoError) {
    if (check) raise_bad_index(call, idx, g.kind, bad);
    run_gather_skipping(g, p.n_tuples);
  }
}

// ------------------------------------------------------------------------------------------
// Backward: a scatter-add into zeros, torch's CPU index_add_ arithmetic
// ------------------------------------------------------------------------------------------

// Accumulation of one dtype: rows of T are added into rows of D (the output itself, or a float
// buffer for float16 / bfloat16 when torch accumulates those in float), then finish() writes the
// D rows into the T output.
template <class T>
struct AddSame {
  using D = T;
  static void add(D* d, const T* s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] += s[i];
  }
};
// Integers wrap around (in unsigned arithmetic: no undefined behaviour).
template <class T>
struct AddWrap {
  using D = T;
  using U = std::make_unsigned_t<T>;
  static void add(D* d, const T* s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
      d[i] = static_cast<T>(static_cast<U>(static_cast<U>(d[i]) + static_cast<U>(s[i])));
  }
};
struct AddBool {
  using D = uint8_t;
  static void add(D* d, const uint8_t* s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = (d[i] | s[i]) != 0;
  }
};

float half_to_float(uint16_t h) { return torch::headeronly::detail::fp16_ieee_to_fp32_value(h); }
uint16_t float_to_half(float f) { return torch::headeronly::detail::fp16_ieee_from_fp32_value(f); }
float bf16_to_float(uint16_t h) { return torch::headeronly::detail::f32_from_bits(h); }
uint16_t float_to_bf16(float f) { return torch::headeronly::detail::round_to_nearest_even(f); }

// float16 / bfloat16 rounded after every add (index_add_'s add kernel, int32 indices).
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
struct AddRounded {
  using D = uint16_t;
  static void add(D* d, const uint16_t* s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = FromF(ToF(d[i]) + ToF(s[i]));
  }
};
// float16 / bfloat16 summed in float, rounded once (index_add_'s scatter_add path, int64
// indices).
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
struct AddInFloat {
  using D = float;
  static void add(D* d, const uint16_t* s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] += ToF(s[i]);
  }
  static void finish(uint16_t* out, const float* acc, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = FromF(acc[i]);
  }
};

// float16 on x86 CPUs with F16C: the conversion instructions, 8 lanes at a time (as torch's own
// vectorized kernels convert; the same values as the conversions above, NaN payloads kept).
#ifdef TDO_X86_AVX2
__attribute__((target("avx2,f16c"))) void half_add_rounded_f16c(uint16_t* d, const uint16_t* s,
                                                                int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; i++)
    d[i] = _cvtss_sh(_cvtsh_ss(d[i]) + _cvtsh_ss(s[i]), _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("avx2,f16c"))) void half_add_in_float_f16c(float* d, const uint16_t* s,
                                                                 int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_ps(d + i, _mm256_add_ps(_mm256_loadu_ps(d + i), b));
  }
  for (; i < n; i++) d[i] += _cvtsh_ss(s[i]);
}

__attribute__((target("avx2,f16c"))) void half_finish_f16c(uint16_t* out, const float* acc,
                                                           int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(acc + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) out[i] = _cvtss_sh(acc[i], _MM_FROUND_TO_NEAREST_INT);
}
#endif

struct HalfOps {
  void (*add_rounded)(uint16_t*, const uint16_t*, int64_t);
  void (*add_in_float)(float*, const uint16_t*, int64_t);
  void (*finish)(uint16_t*, const float*, int64_t);
};

const HalfOps& half_ops() {
  using R = AddRounded<half_to_float, float_to_half>;
  using F = AddInFloat<half_to_float, float_to_half>;
#ifdef TDO_X86_AVX2
  static const HalfOps ops =
      cpu_isa() >= Isa::Avx2  // AVX2 here implies F16C (cpu_isa)
          ? HalfOps{half_add_rounded_f16c, half_add_in_float_f16c, half_finish_f16c}
          : HalfOps{R::add, F::add, F::finish};
#else
  static const HalfOps ops{R::add, F::add, F::finish};
#endif
  return ops;
}

struct HalfRounded {
  using D = uint16_t;
  static void add(D* d, const uint16_t* s, int64_t n) { half_ops().add_rounded(d, s, n); }
};
struct HalfInFloat {
  using D = float;
  static void add(D* d, const uint16_t* s, int64_t n) { half_ops().add_in_float(d, s, n); }
  static void finish(uint16_t* out, const float* acc, int64_t n) { half_ops().finish(out, acc, n); }
};

template <class A, class = void>
struct HasFinish : std::false_type {};
template <class A>
struct HasFinish<A, std::void_t<decltype(&A::finish)>> : std::true_type {};

// Tuple t (of batch t / per_batch) adds grad row t to output row
// batch * rows_per_batch + sum_j index_j * row_strides[j]; rows of slice_len elements.
struct Backward {
  char* out = nullptr;
  void* acc = nullptr;  // the float buffer of AddInFloat
  const char* grad = nullptr;
  const void* idx = nullptr;
  int kind = kI64;
  int64_t k = 1, n_tuples = 0, per_batch = 1, rows_per_batch = 0, rows = 0, slice_len = 0;
  const int64_t* sizes = nullptr;
  Dims row_strides;
};

// Output rows [row_begin, row_end): zeroed, then every tuple landing there added in index order
// (every part scans all tuples, so each row sees its duplicates in index order whatever the
// number of parts); stops at the first bad tuple.
template <int Kind, class T, class A>
void backward_rows(const Backward& w, int64_t row_begin, int64_t row_end,
                   std::atomic<int64_t>& first_bad) {
  using D = typename A::D;
  const int64_t n = w.slice_len;
  D* dst = static_cast<D*>(HasFinish<A>::value ? w.acc : static_cast<void*>(w.out));
  std::memset(dst + row_begin * n, 0, static_cast<size_t>((row_end - row_begin) * n) * sizeof(D));
  const T* grad = reinterpret_cast<const T*>(w.grad);
  // Short rows (up to 4 elements) split among parts: the other parts' adds go to a zeroed
  // scratch row instead of behind a branch (select_ptr).
  const bool sink_adds = n <= 4 && (row_begin > 0 || row_end < w.rows);
  D sink[4] = {};
  const uint64_t span = static_cast<uint64_t>(row_end - row_begin);
  int64_t b = 0, r = 0;
  for (int64_t t = 0; t < w.n_tuples; t++) {
    int64_t bad_col = 0;
    const int64_t row = tuple_offset<Kind>(w.idx, t, w.k, w.sizes, w.row_strides.data(),
                                           b * w.rows_per_batch, bad_col);
    if (row < 0) {
      record_error(first_bad, t * w.k + bad_col);
      return;
    }
    if (sink_adds) {
      D* const d = select_ptr(static_cast<uint64_t>(row - row_begin) < span,
                              reinterpret_cast<uintptr_t>(dst + row * n), sink);
      if (n == 1)  // (a constant count: the add inlines to one element)
        A::add(d, grad + t, 1);
      else
        A::add(d, grad + t * n, n);
    } else if (row >= row_begin && row < row_end) {
      A::add(dst + row * n, grad + t * n, n);
    }
    if (++r == w.per_batch) {
      r = 0;
      b++;
    }
  }
  if constexpr (HasFinish<A>::value)
    A::finish(reinterpret_cast<T*>(w.out) + row_begin * n, dst + row_begin * n,
              (row_end - row_begin) * n);
}

template <class T, class A>
int64_t run_backward(const Backward& w) {
  std::atomic<int64_t> first_bad{kNoError};
  // Threads pay only with enough adds and zeroing: each part scans every tuple.
  const int64_t row_bytes = w.slice_len * static_cast<int64_t>(sizeof(T));
  const int64_t work = w.n_tuples * (row_bytes / 64) + w.rows * row_bytes / 64;
  const int parts =
      static_cast<int>(std::min<int64_t>(work < 2 * kGrain ? 1 : parts_for(work, kGrain), w.rows));
  parallel_parts(w.rows, parts, [&](int64_t begin, int64_t end, int) {
    with_index_kind(w.kind, [&](auto kind) {
      backward_rows<decltype(kind)::value, T, A>(w, begin, end, first_bad);
    });
  });
  return first_bad.load();
}

// The smallest flat position of a bad index coordinate, or kNoError: the check alone (nothing to
// add: empty slices).
int64_t check_tuples(const Backward& w) {
  auto scan = [&](auto kind) {
    constexpr int K = decltype(kind)::value;
    int64_t b = 0, r = 0;
    for (int64_t t = 0; t < w.n_tuples; t++) {
      int64_t bad_col = 0;
      if (tuple_offset<K>(w.idx, t, w.k, w.sizes, w.row_strides.data(), b * w.rows_per_batch,
                          bad_col) < 0)
        return t * w.k + bad_col;
      if (++r == w.per_batch) {
        r = 0;
        b++;
      }
    }
    return kNoError;
  };
  return with_index_kind(w.kind, scan);
}

// ------------------------------------------------------------------------------------------
// Entry points
// ------------------------------------------------------------------------------------------

// check_indices: the CPU kernel always checks every coordinate before using it (the check is
// fused into the copy), so no value of it can make a kernel read out of bounds; it only says
// whether an out-of-range tuple is an IndexError (true) or a zero slice (false).
Tensor gather_nd(Tensor input, Tensor indices, int64_t batch_dims,
                 std::optional<int64_t> input_dimension_count,
                 std::optional<int64_t> indices_dimension_count, StrArg /*feature_level*/,
                 bool check_indices) {
  Plan p;
  check_gather(input, indices, batch_dims, input_dimension_count, indices_dimension_count, p);
  check_storages(kOp, {{"InputTensor", &input}, {"IndicesTensor", &indices}});
  const Tensor x = resolved(input), i = resolved(indices);
  Tensor out = empty_contiguous(x, p.out_shape);
  gather_into(static_cast<char*>(out.data_ptr()), x, i, p, nullptr,
              {input, batch_dims, input_dimension_count, indices_dimension_count}, check_indices);
  return out;
}

void gather_nd_out(Tensor input, Tensor indices, int64_t batch_dims,
                   std::optional<int64_t> input_dimension_count,
                   std::optional<int64_t> indices_dimension_count, StrArg /*feature_level*/,
                   bool check_indices, Tensor out) {
  Plan p;
  check_gather(input, indices, batch_dims, input_dimension_count, indices_dimension_count, p);
  check_out(kOp, out, p.out_shape.vec(), input.scalar_type(),
            {{"InputTensor", &input}, {"IndicesTensor", &indices}});
  check_storages(kOp,
                 {{"InputTensor", &input}, {"IndicesTensor", &indices},
                  {"OutputTensor (out)", &out}});
  // The rest of check_out's writability rule (after the storage checks: resolve_neg reads out):
  // an inference tensor only inside inference mode, where the write is a no-op for its absent
  // version counter.  A negative view (whose is_inference() query reads false) is written through
  // a fresh result, and its write recorded once that result stands.
  const bool neg = is_neg(out);
  if (!neg && call_bool("aten::is_inference", out)) mark_written(kOp, "OutputTensor (out)", out);
  const Tensor x = resolved(input), i = resolved(indices);
  const Call call{input, batch_dims, input_dimension_count, indices_dimension_count};
  if (!neg && out.is_contiguous()) {
    gather_into(static_cast<char*>(out.data_ptr()), x, i, p, &out, call, check_indices);
  } else {
    // A fresh result, then copied through out's strides and negation, the write recorded once.
    Tensor fresh = empty_contiguous(x, p.out_shape);
    gather_into(static_cast<char*>(fresh.data_ptr()), x, i, p, nullptr, call, check_indices);
    mark_written(kOp, "OutputTensor (out)", out, neg);
    copy_unrecorded(out, fresh, neg);
  }
}

Tensor gather_nd_backward(Tensor grad, Tensor indices, std::vector<int64_t> index_sizes,
                          int64_t batch_dims, std::optional<int64_t> input_dimension_count,
                          std::optional<int64_t> indices_dimension_count) {
  check_cpu_strided(kBackwardOp, {{"grad", &grad}, {"IndicesTensor", &indices}});
  // The input's shape: grad's batch and trailing dims around index_sizes.  The layout errors
  // name the forward op's rules (as on the portable path); index errors name this op and
  // index_sizes[j], where the sizes came from.
  Shape input_shape;
  const GatherLayout lay = backward_layout(shape_of(grad), shape_of(indices), index_sizes,
                                           batch_dims, input_dimension_count,
                                           indices_dimension_count, input_shape);
  const ScalarType dtype = grad.scalar_type();
  check_data_dtype(kBackwardOp, "grad", dtype);
  check_index_dtype(kBackwardOp, "IndicesTensor", indices.scalar_type());
  check_storages(kBackwardOp, {{"grad", &grad}, {"IndicesTensor", &indices}});
  Tensor g = resolved(grad), idx = resolved(indices);
  if (!g.is_contiguous()) g = torch::stable::contiguous(g);
  if (!idx.is_contiguous()) idx = torch::stable::contiguous(idx);

  Tensor out;
  try {
    out = new_output(g, input_shape, dtype);
  } catch (const std::exception&) {  // the stable ABI's message names only the shim call
    runtime_error(fill(msg::grad_alloc, {{"op", kBackwardOp}, {"shape", py_tuple(input_shape)},
                                         {"dtype", dtype_name(dtype)}}));
  }
  Backward w;
  w.out = static_cast<char*>(out.data_ptr());
  w.grad = static_cast<const char*>(g.data_ptr());
  w.idx = idx.data_ptr();
  w.kind = index_kind(idx.scalar_type());
  w.k = lay.k;
  w.n_tuples = lay.n_tuples;
  w.per_batch = lay.per_batch;
  w.rows = lay.rows;
  w.rows_per_batch = lay.batch ? lay.rows / lay.batch : 0;
  w.slice_len = lay.slice_len;
  w.sizes = lay.index_sizes.data();
  w.row_strides.resize(static_cast<size_t>(lay.k));
  for (int64_t j = lay.k, s = 1; j-- > 0;) {
    w.row_strides[j] = s;
    s *= lay.index_sizes[j];
  }
  const int64_t total = lay.rows * lay.slice_len;
  if (lay.n_tuples == 0 || total == 0) {
    // Nothing to add; the indices are still checked (as on the portable path).
    if (total) std::memset(w.out, 0, static_cast<size_t>(total) * out.element_size());
    if (int64_t bad = check_tuples(w); bad != kNoError)
      raise_index_error(kBackwardOp, w.idx, w.kind, bad, shape_of(idx), lay,
                        static_cast<int64_t>(input_shape.size()));
    return out;
  }
  // float16 / bfloat16: torch's index_add_ (the portable path) sums in float and rounds once
  // when it goes through scatter_add (int64 row numbers: every index dtype but int32), and
  // rounds after every add otherwise (int32 row numbers, which it uses for int32 indices while
  // the rows fit).
  const bool int32_rows = w.kind == kI32 && lay.rows < (int64_t(1) << 31);
  Tensor acc;
  if ((dtype == ScalarType::Half || dtype == ScalarType::BFloat16) && !int32_rows) {
    acc = torch::stable::new_empty(g, {total}, ScalarType::Float);
    w.acc = acc.data_ptr();
  }
  using BF16R = AddRounded<bf16_to_float, float_to_bf16>;
  using BF16F = AddInFloat<bf16_to_float, float_to_bf16>;
  int64_t bad = kNoError;
  switch (dtype) {
    case ScalarType::Float: bad = run_backward<float, AddSame<float>>(w); break;
    case ScalarType::Double: bad = run_backward<double, AddSame<double>>(w); break;
    case ScalarType::Half:
      bad = int32_rows ? run_backward<uint16_t, HalfRounded>(w)
                       : run_backward<uint16_t, HalfInFloat>(w);
      break;
    case ScalarType::BFloat16:
      bad = int32_rows ? run_backward<uint16_t, BF16R>(w) : run_backward<uint16_t, BF16F>(w);
      break;
    case ScalarType::Long: bad = run_backward<int64_t, AddWrap<int64_t>>(w); break;
    case ScalarType::Int: bad = run_backward<int32_t, AddWrap<int32_t>>(w); break;
    case ScalarType::Short: bad = run_backward<int16_t, AddWrap<int16_t>>(w); break;
    case ScalarType::Char: bad = run_backward<int8_t, AddWrap<int8_t>>(w); break;
    case ScalarType::Byte: bad = run_backward<uint8_t, AddWrap<uint8_t>>(w); break;
    case ScalarType::UInt16: bad = run_backward<uint16_t, AddWrap<uint16_t>>(w); break;
    case ScalarType::UInt32: bad = run_backward<uint32_t, AddWrap<uint32_t>>(w); break;
    case ScalarType::UInt64: bad = run_backward<uint64_t, AddWrap<uint64_t>>(w); break;
    default: bad = run_backward<uint8_t, AddBool>(w); break;  // Bool (check_data_dtype)
  }
  if (bad != kNoError)
    raise_index_error(kBackwardOp, w.idx, w.kind, bad, shape_of(idx), lay,
                      static_cast<int64_t>(input_shape.size()));
  return out;
}

}  // namespace
}  // namespace tdo

STABLE_TORCH_LIBRARY_IMPL(torch_dml_ops, CPU, m) {
  m.impl("gather_nd", TORCH_BOX(&tdo::gather_nd));
  m.impl("gather_nd_out", TORCH_BOX(&tdo::gather_nd_out));
  m.impl("gather_nd_backward", TORCH_BOX(&tdo::gather_nd_backward));
}
