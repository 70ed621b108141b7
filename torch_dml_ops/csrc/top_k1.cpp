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
#include "checks.h"

#include <array>

#ifdef TDO_X86_SIMD
#include <immintrin.h>
#endif
#include <limits>
#include <functional>
#include <memory>
#include <new>
#include <tuple>

namespace tdo {
namespace {

#ifdef TDO_X86_SIMD
// These AVX-512 operations go through their masked intrinsics with every lane on: the same
// instructions, but gcc 12's unmasked forms pass _mm512_undefined_*() (a self-initialised
// variable) as the pass-through operand, which -Wall reports as uninitialised wherever they are
// inlined (GCC bug 105593, fixed in GCC 13); here the pass-through is an operand.  The
// reductions take gcc's own order of steps (so NaN operands land as they did), their halves
// by the masked extract too (gcc 12's 512-to-256-bit casts are the unmasked extract).
TDO_TARGET_AVX512 inline __m512 mm512_max_ps(__m512 a, __m512 b) {
  return _mm512_mask_max_ps(a, 0xFFFF, a, b);
}
TDO_TARGET_AVX512 inline __m512i mm512_max_epi32(__m512i a, __m512i b) {
  return _mm512_mask_max_epi32(a, 0xFFFF, a, b);
}
TDO_TARGET_AVX512 inline __m512i mm512_max_epu64(__m512i a, __m512i b) {
  return _mm512_mask_max_epu64(a, 0xFF, a, b);
}
TDO_TARGET_AVX512 inline __m512i mm512_min_epu64(__m512i a, __m512i b) {
  return _mm512_mask_min_epu64(a, 0xFF, a, b);
}
template <int N>
TDO_TARGET_AVX512 inline __m512i mm512_alignr_epi64(__m512i a, __m512i b) {
  return _mm512_mask_alignr_epi64(a, 0xFF, a, b, N);
}
TDO_TARGET_AVX512 inline __m512i mm512_permutexvar_epi64(__m512i idx, __m512i a) {
  return _mm512_mask_permutexvar_epi64(a, 0xFF, idx, a);
}
TDO_TARGET_AVX512 inline float mm512_reduce_max_ps(__m512 a) {
  const __m512d d = _mm512_castps_pd(a);
  const __m256 hi = _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, d, 1));
  const __m256 lo = _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, d, 0));
  const __m256 m8 = _mm256_max_ps(hi, lo);
  const __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m8, 1), _mm256_castps256_ps128(m8));
  const __m128 m2 = _mm_max_ps(m4, _mm_shuffle_ps(m4, m4, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(_mm_max_ps(m2, _mm_shuffle_ps(m2, m2, _MM_SHUFFLE(0, 1, 0, 1))));
}
TDO_TARGET_AVX512 inline int32_t mm512_reduce_max_epi32(__m512i a) {
  const __m256i hi = _mm512_mask_extracti64x4_epi64(_mm256_setzero_si256(), 0xF, a, 1);
  const __m256i lo = _mm512_mask_extracti64x4_epi64(_mm256_setzero_si256(), 0xF, a, 0);
  const __m256i m8 = _mm256_max_epi32(hi, lo);
  const __m128i m4 = _mm_max_epi32(_mm256_extracti128_si256(m8, 1), _mm256_castsi256_si128(m8));
  const __m128i m2 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtsi128_si32(_mm_max_epi32(m2, _mm_shuffle_epi32(m2, _MM_SHUFFLE(0, 1, 0, 1))));
}
#endif

// Work one thread gets at least, in element-steps (a row of n counts n for k == 1, 4n for the
// selections): calls below ~2x this run on the calling thread.
constexpr int64_t kStepGrain = int64_t(1) << 15;
// When there are fewer rows than threads, rows of at least 2 * kSegMin elements are split into
// segments (>= kSegMin each) whose candidates are merged.
constexpr int64_t kSegMin = int64_t(1) << 15;
// Up to this k the k best so far are kept sorted (insertions are rare and short); above, in an
// unordered buffer cut back to the k best when full.
constexpr int64_t kSortedMaxK = 64;
// Up to this k the sorted k best take a candidate by a branch-free min/max network over
// kNetMaxK (or kNetMaxK / 2) entries.
constexpr int64_t kNetMaxK = 16;
// Whether k's network is the half-width one (kNetMaxK / 2 entries).
constexpr bool half_net(int64_t k) { return k <= kNetMaxK / 2; }
// Rows at least this long take 64-bit keys whatever the dtype (the index half of a 32-bit-key
// composite holds indices below 2**32).
constexpr int64_t kNarrowRowLimit = int64_t(1) << 32;

// Keys are computed a block of KB elements at a time (8 or 16 KiB of keys: stays in L1); a
// row of 1024 is one block.
constexpr int64_t KB = 2048;
// A block is seen as L interleaved groups (element j in group j % L), each with its maximum.
constexpr int L = 16;
// Rows of at most this many bytes prefetch a later row (run): the key pass the next row, in one
// burst before the row; the native pass the row kPrefetchRows on, a line at a time as its
// candidate passes go (spread over the row's work, so that the fetch overlaps it: faster out of
// cache than the burst, M15 in docs/benchmarks.md, "Measured choices").
constexpr int64_t kPrefetchRowMax = 16 << 10;
// Native-pass spans of more than KB and at most this many elements take two passes (bound
// first: scan_native); the scratch holds their group maxima.
constexpr int64_t kTwoPassMax = int64_t(1) << 16;
static_assert(kTwoPassMax / KB * L <= KB, "the group maxima fit in the key block");
// Two-pass spans of at least this many elements also keep their words' maxima, and their second
// pass reads only the words that hold a candidate (a shorter span is read again whole from L1,
// which is faster there: M16 in docs/benchmarks.md, "Measured choices").
constexpr int64_t kWordPassMin = 4 * KB;
constexpr int64_t kPrefetchRows = 2;
// The native pass makes its candidate masks this many elements at a time, each chunk with the
// threshold as it has risen.
constexpr int64_t kChunk = 256;
// The guessed pass (guessed_rows): rows of at least kGuessMin elements and k <= kNetMaxK; at most
// kGuessCap candidates (more: the guess was too low, the other passes take the row); the guess
// for the next row is the (k + kGuessSlack)-th largest of this row's L group maxima.
constexpr int64_t kGuessMin = 4 * 64;
constexpr int64_t kGuessCap = 64;
constexpr int64_t kGuessSlack = 3;
// The tie pass skips a row's words with none above its threshold by a branch when the row
// before had at most this many (a word in 16 or fewer: the branch is predicted).
constexpr int64_t kSparseAbove = 4;
constexpr int64_t kGuessRowMax = 256 << 10;  // bytes (run)

using u128 = unsigned __int128;

// ---- keys ----------------------------------------------------------------------------------
// One element's key, from its bits U.  IEEE binary formats: kInf the bit pattern of +inf;
// branch-free, so the block loops vectorise.
template <class U, U kInf>
struct FloatKey {
  using UT = U;
  static inline U key(U u) {
    constexpr int W = 8 * sizeof(U);
    const U sign = static_cast<U>(U(1) << (W - 1));
    U a = static_cast<U>(u & static_cast<U>(~sign));
    U neg = static_cast<U>(U(0) - static_cast<U>(u >> (W - 1)));  // all ones when the sign is set
    U k = static_cast<U>(u ^ static_cast<U>(neg | sign));
    k = a > kInf ? static_cast<U>(~U(0)) : k;  // NaN: above +inf
    k = a == 0 ? sign : k;                     // -0.0 is +0.0
    return k;
  }
};
// Integers: the raw bits, the sign bit flipped for signed types.
template <class U, U kFlip>
struct IntKey {
  using UT = U;
  static inline U key(U u) { return static_cast<U>(u ^ kFlip); }
};

using KeyF32 = FloatKey<uint32_t, 0x7f800000u>;
using KeyF16 = FloatKey<uint16_t, 0x7c00u>;
using KeyBF16 = FloatKey<uint16_t, 0x7f80u>;
using KeyF64 = FloatKey<uint64_t, 0x7ff0000000000000ull>;
using KeyI64 = IntKey<uint64_t, 0x8000000000000000ull>;
using KeyI32 = IntKey<uint32_t, 0x80000000u>;
using KeyI16 = IntKey<uint16_t, 0x8000u>;
using KeyI8 = IntKey<uint8_t, 0x80u>;
using KeyU64 = IntKey<uint64_t, 0>;
using KeyU32 = IntKey<uint32_t, 0>;
using KeyU16 = IntKey<uint16_t, 0>;
using KeyU8 = IntKey<uint8_t, 0>;  // uint8, and bool (its byte)

// The block pass: kb[j] = key(x[s + j]) ^ mask for j < len (<= KB); returns the largest.  With
// lanes, also lanes[g] = the largest kb[j] with j % L == g (0 where there is none, g >= len):
// the block as L interleaved groups, whose maxima bound the k-th best (scan).  Branch-free and
// in lane order, so that the compiler vectorizes it for each instruction set it is built for.
template <class D, class KT>
[[gnu::always_inline]] inline KT block_keys(const void* x, int64_t s, int64_t len, KT mask,
                                            KT* __restrict kb, KT* __restrict lanes) {
  const typename D::UT* __restrict p = static_cast<const typename D::UT*>(x) + s;
  if (!lanes) {
    KT mx = 0;
    for (int64_t j = 0; j < len; j++) {
      KT key = static_cast<KT>(D::key(p[j])) ^ mask;
      kb[j] = key;
      mx = key > mx ? key : mx;
    }
    return mx;
  }
  KT acc[L] = {};
  const int64_t full = len - len % L;
  for (int64_t v = 0; v < full; v += L) {
    for (int g = 0; g < L; g++) {
      KT key = static_cast<KT>(D::key(p[v + g])) ^ mask;
      kb[v + g] = key;
      acc[g] = key > acc[g] ? key : acc[g];
    }
  }
  for (int64_t j = full; j < len; j++) {
    KT key = static_cast<KT>(D::key(p[j])) ^ mask;
    kb[j] = key;
    acc[j - full] = key > acc[j - full] ? key : acc[j - full];
  }
  KT mx = 0;
  for (int g = 0; g < L; g++) {
    lanes[g] = acc[g];
    mx = acc[g] > mx ? acc[g] : mx;
  }
  return mx;
}

// words[w] bit b = kb[64 w + b] >= t, for the words that hold the len (<= KB) keys of a block
// (whole words are read: the caller fills kb up to a multiple of 64).  Portable, AVX2 and
// AVX-512 versions.
template <class KT>
void ge_masks(const KT* kb, int64_t len, KT t, uint64_t* words) {
  for (int64_t w = 0; w * 64 < len; w++) {
    uint64_t b = 0;
    for (int q = 0; q < 64; q += 16) {
      // 16 keys at a time: their max (which the compiler vectorizes) first, the bits only
      // where it reaches t (a bit loop does not vectorize without a movemask)
      const KT* a = kb + w * 64 + q;
      KT mx = 0;
      for (int j = 0; j < 16; j++) mx = a[j] > mx ? a[j] : mx;
      if (mx < t) continue;
      for (int j = 0; j < 16; j++) b |= static_cast<uint64_t>(a[j] >= t) << (q + j);
    }
    words[w] = b;
  }
}

#ifdef TDO_X86_SIMD
// The sign bits of a vector of eight 32-bit lanes (a compare's result).
TDO_TARGET_AVX2 [[gnu::always_inline]] inline uint32_t lane_bits_avx2(__m256i m) {
  return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(m)));
}

// ge_masks with vector compares; KT uint32_t or uint64_t.
template <class KT>
TDO_TARGET_AVX2 void ge_masks_avx2(const KT* kb, int64_t len, KT t, uint64_t* words) {
  constexpr int per = 32 / sizeof(KT);  // keys in a vector
  constexpr bool wide = sizeof(KT) == 8;
  // unsigned a >= t  <=>  not (t > a), signed after flipping the sign bits
  const __m256i flip = wide ? _mm256_set1_epi64x(INT64_MIN) : _mm256_set1_epi32(INT32_MIN);
  const __m256i tv = _mm256_xor_si256(wide ? _mm256_set1_epi64x(static_cast<int64_t>(t))
                                           : _mm256_set1_epi32(static_cast<int32_t>(t)),
                                      flip);
  for (int64_t w = 0; w * 64 < len; w++) {
    uint64_t b = 0;
    for (int v = 0; v < 64 / per; v++) {
      const __m256i a = _mm256_xor_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kb + w * 64 + v * per)), flip);
      const __m256i lt = wide ? _mm256_cmpgt_epi64(tv, a) : _mm256_cmpgt_epi32(tv, a);
      const uint32_t m =
          static_cast<uint32_t>(wide ? _mm256_movemask_pd(_mm256_castsi256_pd(lt))
                                     : lane_bits_avx2(lt));
      b |= static_cast<uint64_t>(~m & ((1u << per) - 1)) << (v * per);
    }
    words[w] = b;
  }
}
template <class KT>
TDO_TARGET_AVX512 void ge_masks_avx512(const KT* kb, int64_t len, KT t, uint64_t* words) {
  constexpr int per = 64 / sizeof(KT);  // keys in a vector
  for (int64_t w = 0; w * 64 < len; w++) {
    uint64_t b = 0;
    for (int v = 0; v < 64 / per; v++) {
      const __m512i a = _mm512_loadu_si512(kb + w * 64 + v * per);
      const uint64_t m =
          sizeof(KT) == 8
              ? _mm512_cmpge_epu64_mask(a, _mm512_set1_epi64(static_cast<int64_t>(t)))
              : _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(static_cast<int32_t>(t)));
      b |= m << (v * per);
    }
    words[w] = b;
  }
}
#endif

template <class KT>
using MaskFn = void (*)(const KT* kb, int64_t len, KT t, uint64_t* words);

template <class KT>
MaskFn<KT> mask_fn() {
#ifdef TDO_X86_SIMD
  switch (cpu_isa()) {
    case Isa::Avx512: return ge_masks_avx512<KT>;
    case Isa::Avx2: return ge_masks_avx2<KT>;
    default: break;
  }
#endif
  return ge_masks<KT>;
}

template <class KT>
using KeyFn = KT (*)(const void* x, int64_t s, int64_t len, KT mask, KT* kb, KT* lanes);

// One block pass per (dtype, key width), compiled three times: portable, AVX2, AVX-512; the
// call picks one by cpu_isa() (TORCH_DML_OPS_CPU_ISA caps it, so each is tested).
template <class KT>
struct KeyFns {
  KeyFn<KT> portable, avx2, avx512;
  KeyFn<KT> pick() const {
    switch (cpu_isa()) {
      case Isa::Avx512: return avx512;
      case Isa::Avx2: return avx2;
      default: return portable;
    }
  }
};

#ifdef TDO_X86_SIMD
#define TDO_KEY_FN(NAME, D, KT)                                                               \
  KT NAME(const void* x, int64_t s, int64_t len, KT mask, KT* kb, KT* lanes) {                \
    return block_keys<D, KT>(x, s, len, mask, kb, lanes);                                     \
  }                                                                                           \
  TDO_TARGET_AVX2 KT NAME##_avx2(const void* x, int64_t s, int64_t len, KT mask, KT* kb,     \
                                 KT* lanes) {                                                 \
    return block_keys<D, KT>(x, s, len, mask, kb, lanes);                                     \
  }                                                                                           \
  TDO_TARGET_AVX512 KT NAME##_avx512(const void* x, int64_t s, int64_t len, KT mask, KT* kb, \
                                     KT* lanes) {                                             \
    return block_keys<D, KT>(x, s, len, mask, kb, lanes);                                     \
  }                                                                                           \
  constexpr KeyFns<KT> NAME##_fns{NAME, NAME##_avx2, NAME##_avx512};
#else
#define TDO_KEY_FN(NAME, D, KT)                                                               \
  KT NAME(const void* x, int64_t s, int64_t len, KT mask, KT* kb, KT* lanes) {                \
    return block_keys<D, KT>(x, s, len, mask, kb, lanes);                                     \
  }                                                                                           \
  constexpr KeyFns<KT> NAME##_fns{NAME, NAME, NAME};
#endif
TDO_KEY_FN(keys32_f32, KeyF32, uint32_t)
TDO_KEY_FN(keys32_f16, KeyF16, uint32_t)
TDO_KEY_FN(keys32_bf16, KeyBF16, uint32_t)
TDO_KEY_FN(keys32_i32, KeyI32, uint32_t)
TDO_KEY_FN(keys32_i16, KeyI16, uint32_t)
TDO_KEY_FN(keys32_i8, KeyI8, uint32_t)
TDO_KEY_FN(keys32_u32, KeyU32, uint32_t)
TDO_KEY_FN(keys32_u16, KeyU16, uint32_t)
TDO_KEY_FN(keys32_u8, KeyU8, uint32_t)
TDO_KEY_FN(keys64_f64, KeyF64, uint64_t)
TDO_KEY_FN(keys64_i64, KeyI64, uint64_t)
TDO_KEY_FN(keys64_u64, KeyU64, uint64_t)
// <= 32-bit dtypes in rows of 2**32 elements or more
TDO_KEY_FN(keys64_f32, KeyF32, uint64_t)
TDO_KEY_FN(keys64_f16, KeyF16, uint64_t)
TDO_KEY_FN(keys64_bf16, KeyBF16, uint64_t)
TDO_KEY_FN(keys64_i32, KeyI32, uint64_t)
TDO_KEY_FN(keys64_i16, KeyI16, uint64_t)
TDO_KEY_FN(keys64_i8, KeyI8, uint64_t)
TDO_KEY_FN(keys64_u32, KeyU32, uint64_t)
TDO_KEY_FN(keys64_u16, KeyU16, uint64_t)
TDO_KEY_FN(keys64_u8, KeyU8, uint64_t)
#undef TDO_KEY_FN

// The block pass of a <= 32-bit dtype (the caller picks 64-bit keys for the 64-bit dtypes).
KeyFn<uint32_t> key32_for(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return keys32_f32_fns.pick();
    case ScalarType::Half: return keys32_f16_fns.pick();
    case ScalarType::BFloat16: return keys32_bf16_fns.pick();
    case ScalarType::Int: return keys32_i32_fns.pick();
    case ScalarType::Short: return keys32_i16_fns.pick();
    case ScalarType::Char: return keys32_i8_fns.pick();
    case ScalarType::UInt32: return keys32_u32_fns.pick();
    case ScalarType::UInt16: return keys32_u16_fns.pick();
    default: return keys32_u8_fns.pick();  // uint8, bool
  }
}

KeyFn<uint64_t> key64_for(ScalarType t) {
  switch (t) {
    case ScalarType::Double: return keys64_f64_fns.pick();
    case ScalarType::Long: return keys64_i64_fns.pick();
    case ScalarType::UInt64: return keys64_u64_fns.pick();
    case ScalarType::Float: return keys64_f32_fns.pick();
    case ScalarType::Half: return keys64_f16_fns.pick();
    case ScalarType::BFloat16: return keys64_bf16_fns.pick();
    case ScalarType::Int: return keys64_i32_fns.pick();
    case ScalarType::Short: return keys64_i16_fns.pick();
    case ScalarType::Char: return keys64_i8_fns.pick();
    case ScalarType::UInt32: return keys64_u32_fns.pick();
    case ScalarType::UInt16: return keys64_u16_fns.pick();
    default: return keys64_u8_fns.pick();  // uint8, bool
  }
}

// ---- the native-order pass (float32, int32) ----------------------------------------------
// The four cache lines of a word (64 elements of 4 bytes) at p: a later row's, fetched while
// this one's candidates are worked on.
[[gnu::always_inline]] inline void prefetch_word(const char* p) {
  for (int i = 0; i < 4; i++) __builtin_prefetch(p + 64 * i);
}

// For these dtypes the block pass compares the data in its own order instead of computing keys:
// one max per element (the order is the key order once -0.0 == +0.0, which float compares
// already hold, and NaN greatest, which they do not: a block with a NaN takes the key pass).
// Direction "increasing" is the same pass on -x (floats) or ~x (int32), both exact reversals.
// Only candidates get a key (the exact one, from the element's bits).

template <class V, bool Inc>
[[gnu::always_inline]] inline V nat_tr(V x) {
  if constexpr (!Inc) return x;
  else if constexpr (std::is_floating_point_v<V>) return -x;
  else return static_cast<V>(~x);
}

template <class V>
constexpr V nat_lowest() {
  if constexpr (std::is_floating_point_v<V>) return -__builtin_huge_valf();
  else return std::numeric_limits<V>::min();
}

// The k-th largest of g[0, ng), ng at most kTwoPassMax / KB * L (g may be reordered): the
// two-pass bound of a span from its group maxima.  std::nth_element alone mispredicts a branch
// for every few values (a good part of a long row's time: M17).  So, from 128
// values and k = 16, a sample first (kth_sampled): every 8th value; its (k/8 + 2 +
// sqrt(k/8))-th largest, t, is below the k-th largest of all but rarely (3% of such rows), and
// nth_element then runs on the ~1.5 k values that reach t; on all of g where fewer than k do
// (M17 in docs/benchmarks.md, "Measured choices").  Not `exact`: t itself when k values reach
// it (a bound at most the k-th largest, a little lower than it).  kth_sampled is its own
// function: its 2 KiB of stack in the caller's frame slowed short rows that are not sampled
// (M17).
template <class V>
[[gnu::noinline]] bool kth_sampled(const V* g, int64_t ng, int64_t k, bool exact, V& kth) {
  constexpr int64_t S = 8, kMax = kTwoPassMax / KB * L;
  const int64_t ns = (ng + S - 1) / S;
  int64_t r = k / S + 2;
  while ((r - k / S - 2) * (r - k / S - 2) < k / S) r++;  // + ceil(sqrt(k / S))
  if (r > ns) return false;
  V sample[kMax / S], top[kMax];
  for (int64_t i = 0; i < ns; i++) sample[i] = g[i * S];
  std::nth_element(sample, sample + r - 1, sample + ns, std::greater<V>());
  const V t = sample[r - 1];
  int64_t m = 0;
  for (int64_t i = 0; i < ng; i++) {  // branch-free: the values that reach t
    top[m] = g[i];
    m += g[i] >= t;
  }
  if (m < k) return false;
  if (!exact) {
    kth = t;
    return true;
  }
  std::nth_element(top, top + k - 1, top + m, std::greater<V>());
  kth = top[k - 1];
  return true;
}

template <class V>
V kth_largest(V* g, int64_t ng, int64_t k, bool exact = true) {
  V kth;
  if (ng >= 128 && k >= 16 && kth_sampled(g, ng, k, exact, kth)) return kth;
  std::nth_element(g, g + k - 1, g + ng, std::greater<V>());
  return g[k - 1];
}

// words[w] bit b = transformed p[64 w + b] >= t, for j < len (bits at or beyond len are 0).
template <class V, bool Inc>
[[gnu::always_inline]] inline void nat_masks_tail(const V* p, int64_t from, int64_t len, V t,
                                                  uint64_t* words) {
  for (int64_t w = from / 64; w * 64 < len; w++) {
    uint64_t b = 0;
    const int64_t e = len - w * 64 < 64 ? len - w * 64 : 64;
    for (int64_t j = 0; j < e; j++)
      b |= static_cast<uint64_t>(nat_tr<V, Inc>(p[w * 64 + j]) >= t) << j;
    words[w] = b;
  }
}

#ifdef TDO_X86_SIMD
// x86: whole words with vector compares, the tail with the loop above (never a read past len);
// pf (unless null) the same span in a later row, prefetched a word (four lines) at a time.
template <class V, bool Inc>
TDO_TARGET_AVX2 void nat_masks_avx2(const V* p, int64_t len, V t, uint64_t* words,
                                    const char* pf) {
  const int64_t full = len / 64;
  for (int64_t w = 0; w < full; w++) {
    if (pf) prefetch_word(pf + 256 * w);
    uint64_t b = 0;
    for (int v = 0; v < 8; v++) {
      const V* q = p + w * 64 + v * 8;
      uint32_t m;
      if constexpr (std::is_floating_point_v<V>) {
        const __m256 x = _mm256_loadu_ps(q);
        m = static_cast<uint32_t>(_mm256_movemask_ps(
            Inc ? _mm256_cmp_ps(x, _mm256_set1_ps(-t), _CMP_LE_OQ)
                : _mm256_cmp_ps(x, _mm256_set1_ps(t), _CMP_GE_OQ)));
      } else {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
        // x >= t is not (t > x); increasing: ~x >= t is x <= ~t, not (x > ~t)
        const __m256i gt = Inc ? _mm256_cmpgt_epi32(x, _mm256_set1_epi32(~t))
                               : _mm256_cmpgt_epi32(_mm256_set1_epi32(t), x);
        m = ~lane_bits_avx2(gt) & 0xffu;
      }
      b |= static_cast<uint64_t>(m) << (v * 8);
    }
    words[w] = b;
  }
  nat_masks_tail<V, Inc>(p, full * 64, len, t, words);
}

template <class V, bool Inc>
TDO_TARGET_AVX512 void nat_masks_avx512(const V* p, int64_t len, V t, uint64_t* words,
                                      const char* pf) {
  const int64_t full = len / 64;
  for (int64_t w = 0; w < full; w++) {
    if (pf) prefetch_word(pf + 256 * w);
    uint64_t b = 0;
    for (int v = 0; v < 4; v++) {
      const V* q = p + w * 64 + v * 16;
      uint64_t m;
      if constexpr (std::is_floating_point_v<V>) {
        const __m512 x = _mm512_loadu_ps(q);
        m = Inc ? _mm512_cmp_ps_mask(x, _mm512_set1_ps(-t), _CMP_LE_OQ)
                : _mm512_cmp_ps_mask(x, _mm512_set1_ps(t), _CMP_GE_OQ);
      } else {
        const __m512i x = _mm512_loadu_si512(q);
        m = Inc ? _mm512_cmple_epi32_mask(x, _mm512_set1_epi32(~t))
                : _mm512_cmpge_epi32_mask(x, _mm512_set1_epi32(t));
      }
      b |= m << (v * 16);
    }
    words[w] = b;
  }
  nat_masks_tail<V, Inc>(p, full * 64, len, t, words);
}

// The filtering pass once the k-th best is known: from `from`, 64 elements at a time, the first
// 64 (or the tail) holding an element whose transformed value is not below t (a NaN always is:
// its key decides); its candidates' positions go to idx (room for 64 + 16), their number to
// *nc, and the position after them is returned (len, *nc = 0: none left).  pfd (unless 0):
// the bytes from here to the same span in a later row, prefetched a word at a time.
template <class V, bool Inc>
[[gnu::always_inline]] inline int64_t nat_next_tail(const V* p, int64_t from, int64_t len, V t,
                                                    int32_t* idx, int64_t* nc) {
  int64_t cnt = 0;
  for (int64_t j = from; j < len; j++) {
    idx[cnt] = static_cast<int32_t>(j);
    cnt += !(nat_tr<V, Inc>(p[j]) < t);
  }
  *nc = cnt;
  return len;
}

template <class V, bool Inc>
TDO_TARGET_AVX512 int64_t nat_next_avx512(const V* p, int64_t from, int64_t len, V t,
                                          int32_t* idx, int64_t* nc, ptrdiff_t pfd) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t j = from;
  for (; j + 64 <= len; j += 64) {
    if (pfd) prefetch_word(reinterpret_cast<const char*>(p + j) + pfd);
    __mmask16 m[4];
    for (int i = 0; i < 4; i++) {
      if constexpr (std::is_floating_point_v<V>) {
        const __m512 x = _mm512_loadu_ps(p + j + 16 * i);
        m[i] = Inc ? _mm512_cmp_ps_mask(x, _mm512_set1_ps(-t), _CMP_NGT_UQ)
                   : _mm512_cmp_ps_mask(x, _mm512_set1_ps(t), _CMP_NLT_UQ);
      } else {
        const __m512i x = _mm512_loadu_si512(p + j + 16 * i);
        m[i] = Inc ? _mm512_cmple_epi32_mask(x, _mm512_set1_epi32(~t))
                   : _mm512_cmpge_epi32_mask(x, _mm512_set1_epi32(t));
      }
    }
    if (!(m[0] | m[1] | m[2] | m[3])) continue;
    int64_t cnt = 0;
    for (int i = 0; i < 4; i++) {
      _mm512_mask_compressstoreu_epi32(
          idx + cnt, m[i],
          _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int32_t>(j + 16 * i))));
      cnt += __builtin_popcount(m[i]);
    }
    *nc = cnt;
    return j + 64;
  }
  return nat_next_tail<V, Inc>(p, j, len, t, idx, nc);
}

template <class V, bool Inc>
TDO_TARGET_AVX2 int64_t nat_next_avx2(const V* p, int64_t from, int64_t len, V t, int32_t* idx,
                                      int64_t* nc, ptrdiff_t pfd) {
  int64_t j = from;
  for (; j + 64 <= len; j += 64) {
    if (pfd) prefetch_word(reinterpret_cast<const char*>(p + j) + pfd);
    uint64_t m = 0;
    for (int i = 0; i < 8; i++) {
      uint32_t b;
      if constexpr (std::is_floating_point_v<V>) {
        const __m256 x = _mm256_loadu_ps(p + j + 8 * i);
        b = static_cast<uint32_t>(_mm256_movemask_ps(
            Inc ? _mm256_cmp_ps(x, _mm256_set1_ps(-t), _CMP_NGT_UQ)
                : _mm256_cmp_ps(x, _mm256_set1_ps(t), _CMP_NLT_UQ)));
      } else {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j + 8 * i));
        const __m256i gt = Inc ? _mm256_cmpgt_epi32(x, _mm256_set1_epi32(~t))
                               : _mm256_cmpgt_epi32(_mm256_set1_epi32(t), x);
        b = ~lane_bits_avx2(gt) & 0xffu;
      }
      m |= static_cast<uint64_t>(b) << (8 * i);
    }
    if (!m) continue;
    int64_t cnt = 0;
    for (; m; m &= m - 1) idx[cnt++] = static_cast<int32_t>(j + __builtin_ctzll(m));
    *nc = cnt;
    return j + 64;
  }
  return nat_next_tail<V, Inc>(p, j, len, t, idx, nc);
}

// nat_lanes for AVX2 and AVX-512: four accumulators (lanes g, g + 16, g + 32, g + 48 of each
// 64, folded at the end), a NaN test per vector; the tail with the loop.  With wm, also each
// word's (64 elements', the last one's fewer) maximum: wm[w] = the untransformed value whose
// transform is the word's largest, so that nat_masks on wm selects the words that hold a
// candidate (scan_native's word pass).
template <class V, bool Inc>
[[gnu::always_inline]] inline bool nat_lanes_tail(const V* p, int64_t from, int64_t len,
                                                  V* lanes, V* wm, bool ok) {
  V mx = nat_lowest<V>();
  for (int64_t j = from; j < len; j++) {
    const V x = nat_tr<V, Inc>(p[j]);
    if constexpr (std::is_floating_point_v<V>) ok &= x == x;
    lanes[j % L] = x > lanes[j % L] ? x : lanes[j % L];
    mx = x > mx ? x : mx;
  }
  if (wm && from < len) wm[from / 64] = nat_tr<V, Inc>(mx);
  return ok;
}

template <class V, bool Inc, bool Words>
TDO_TARGET_AVX512 bool nat_lanes_avx512(const V* p, int64_t len, V* lanes, V* wm) {
  static_assert(L == 16, "one 512-bit vector of lanes");
  const int64_t full = len / 64 * 64;
  bool ok = true;
  if constexpr (std::is_floating_point_v<V>) {
    const __m512 flip = _mm512_set1_ps(Inc ? -0.0f : 0.0f);
    __m512 a[4];
    for (auto& v : a) v = _mm512_set1_ps(nat_lowest<float>());
    __mmask16 nan = 0;
    for (int64_t j = 0; j < full; j += 64) {
      __m512 x[4];
      for (int i = 0; i < 4; i++) {
        x[i] = _mm512_xor_ps(_mm512_loadu_ps(p + j + 16 * i), flip);
        a[i] = mm512_max_ps(x[i], a[i]);  // a NaN x leaves a[i] (the second operand)
      }
      // unordered: either is a NaN
      nan |= _mm512_cmp_ps_mask(x[0], x[1], _CMP_UNORD_Q) |
             _mm512_cmp_ps_mask(x[2], x[3], _CMP_UNORD_Q);
      if constexpr (Words)
        wm[j / 64] = nat_tr<V, Inc>(mm512_reduce_max_ps(
            mm512_max_ps(mm512_max_ps(x[0], x[1]), mm512_max_ps(x[2], x[3]))));
    }
    _mm512_storeu_ps(lanes, mm512_max_ps(mm512_max_ps(a[0], a[1]), mm512_max_ps(a[2], a[3])));
    ok = nan == 0;
  } else {
    const __m512i flip = _mm512_set1_epi32(Inc ? -1 : 0);
    __m512i a[4];
    for (auto& v : a) v = _mm512_set1_epi32(nat_lowest<int32_t>());
    for (int64_t j = 0; j < full; j += 64) {
      __m512i x[4];
      for (int i = 0; i < 4; i++) {
        x[i] = _mm512_xor_si512(_mm512_loadu_si512(p + j + 16 * i), flip);
        a[i] = mm512_max_epi32(x[i], a[i]);
      }
      if constexpr (Words)
        wm[j / 64] = nat_tr<V, Inc>(static_cast<V>(mm512_reduce_max_epi32(
            mm512_max_epi32(mm512_max_epi32(x[0], x[1]), mm512_max_epi32(x[2], x[3])))));
    }
    _mm512_storeu_si512(lanes, mm512_max_epi32(mm512_max_epi32(a[0], a[1]),
                                                mm512_max_epi32(a[2], a[3])));
  }
  return nat_lanes_tail<V, Inc>(p, full, len, lanes, Words ? wm : nullptr, ok);
}

// The largest of x[0..8) (AVX2 has no reduction instruction).
TDO_TARGET_AVX2 inline float hmax_avx2(const __m256* x) {
  __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_max_ps(x[0], x[1]), _mm256_max_ps(x[2], x[3])),
                           _mm256_max_ps(_mm256_max_ps(x[4], x[5]), _mm256_max_ps(x[6], x[7])));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_shuffle_ps(h, h, 0x4e));
  return _mm_cvtss_f32(_mm_max_ps(h, _mm_shuffle_ps(h, h, 0xb1)));
}
TDO_TARGET_AVX2 inline int32_t hmax_avx2(const __m256i* x) {
  __m256i m = _mm256_max_epi32(
      _mm256_max_epi32(_mm256_max_epi32(x[0], x[1]), _mm256_max_epi32(x[2], x[3])),
      _mm256_max_epi32(_mm256_max_epi32(x[4], x[5]), _mm256_max_epi32(x[6], x[7])));
  __m128i h = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  return _mm_cvtsi128_si32(_mm_max_epi32(h, _mm_shuffle_epi32(h, 0xb1)));
}

template <class V, bool Inc, bool Words>
TDO_TARGET_AVX2 bool nat_lanes_avx2(const V* p, int64_t len, V* lanes, V* wm) {
  static_assert(L == 16, "two 256-bit vectors of lanes");
  const int64_t full = len / 64 * 64;
  bool ok = true;
  if constexpr (std::is_floating_point_v<V>) {
    const __m256 flip = _mm256_set1_ps(Inc ? -0.0f : 0.0f);
    __m256 a[4];  // lanes 0-7, 8-15 of even and odd 16s
    for (auto& v : a) v = _mm256_set1_ps(nat_lowest<float>());
    __m256 nan = _mm256_setzero_ps();
    for (int64_t j = 0; j < full; j += 64) {
      __m256 x[8];
      for (int i = 0; i < 8; i++) {
        x[i] = _mm256_xor_ps(_mm256_loadu_ps(p + j + 8 * i), flip);
        a[i % 4] = _mm256_max_ps(x[i], a[i % 4]);
      }
      for (int i = 0; i < 8; i += 2)  // unordered: either is a NaN
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(x[i], x[i + 1], _CMP_UNORD_Q));
      if constexpr (Words) wm[j / 64] = nat_tr<V, Inc>(hmax_avx2(x));
    }
    // a[0], a[2]: lanes 0-7; a[1], a[3]: lanes 8-15
    _mm256_storeu_ps(lanes, _mm256_max_ps(a[0], a[2]));
    _mm256_storeu_ps(lanes + 8, _mm256_max_ps(a[1], a[3]));
    ok = _mm256_movemask_ps(nan) == 0;
  } else {
    const __m256i flip = _mm256_set1_epi32(Inc ? -1 : 0);
    __m256i a[4];
    for (auto& v : a) v = _mm256_set1_epi32(nat_lowest<int32_t>());
    for (int64_t j = 0; j < full; j += 64) {
      __m256i x[8];
      for (int i = 0; i < 8; i++) {
        x[i] = _mm256_xor_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j + 8 * i)), flip);
        a[i % 4] = _mm256_max_epi32(x[i], a[i % 4]);
      }
      if constexpr (Words) wm[j / 64] = nat_tr<V, Inc>(static_cast<V>(hmax_avx2(x)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), _mm256_max_epi32(a[0], a[2]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes + 8), _mm256_max_epi32(a[1], a[3]));
  }
  return nat_lanes_tail<V, Inc>(p, full, len, lanes, Words ? wm : nullptr, ok);
}

// The k-th largest of lanes[0..L) (1 <= k <= L, no NaN): the largest v[i] that at least k
// lanes are not below (with ties, the k-th in a descending sort).  Every lane's count of lanes
// >= it by L broadcast compares, independent of each other (no dependent sort steps), then a
// masked maximum.
template <class V>
TDO_TARGET_AVX512 V nat_kth_avx512(const V* v, int64_t k) {
  static_assert(L == 16, "one 512-bit vector of lanes");
  __m512i cnt = _mm512_setzero_si512();
  const __m512i one = _mm512_set1_epi32(1);
  if constexpr (std::is_floating_point_v<V>) {
    const __m512 a = _mm512_loadu_ps(v);
    for (int j = 0; j < L; j++)
      cnt = _mm512_mask_add_epi32(cnt, _mm512_cmp_ps_mask(a, _mm512_set1_ps(v[j]), _CMP_LE_OQ),
                                  cnt, one);
    const __mmask16 ok = _mm512_cmpge_epi32_mask(cnt, _mm512_set1_epi32(static_cast<int32_t>(k)));
    return mm512_reduce_max_ps(_mm512_mask_blend_ps(ok, _mm512_set1_ps(nat_lowest<V>()), a));
  } else {
    const __m512i a = _mm512_loadu_si512(v);
    for (int j = 0; j < L; j++)
      cnt = _mm512_mask_add_epi32(cnt, _mm512_cmple_epi32_mask(a, _mm512_set1_epi32(v[j])), cnt,
                                  one);
    const __mmask16 ok = _mm512_cmpge_epi32_mask(cnt, _mm512_set1_epi32(static_cast<int32_t>(k)));
    return mm512_reduce_max_epi32(
        _mm512_mask_blend_epi32(ok, _mm512_set1_epi32(nat_lowest<V>()), a));
  }
}

template <class V>
TDO_TARGET_AVX2 V nat_kth_avx2(const V* v, int64_t k) {
  static_assert(L == 16, "two 256-bit vectors of lanes");
  __m256i c0 = _mm256_setzero_si256(), c1 = _mm256_setzero_si256();
  V out[8];
  const __m256i km1 = _mm256_set1_epi32(static_cast<int32_t>(k - 1));
  if constexpr (std::is_floating_point_v<V>) {
    const __m256 a0 = _mm256_loadu_ps(v), a1 = _mm256_loadu_ps(v + 8);
    for (int j = 0; j < L; j++) {  // a true compare is -1: subtracting it counts
      const __m256 b = _mm256_set1_ps(v[j]);
      c0 = _mm256_sub_epi32(c0, _mm256_castps_si256(_mm256_cmp_ps(a0, b, _CMP_LE_OQ)));
      c1 = _mm256_sub_epi32(c1, _mm256_castps_si256(_mm256_cmp_ps(a1, b, _CMP_LE_OQ)));
    }
    const __m256 low = _mm256_set1_ps(nat_lowest<V>());
    const __m256 m = _mm256_max_ps(
        _mm256_blendv_ps(low, a0, _mm256_castsi256_ps(_mm256_cmpgt_epi32(c0, km1))),
        _mm256_blendv_ps(low, a1, _mm256_castsi256_ps(_mm256_cmpgt_epi32(c1, km1))));
    _mm256_storeu_ps(out, m);
  } else {
    const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
    const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 8));
    for (int j = 0; j < L; j++) {  // a <= b is not (a > b): count the lanes above, subtract
      const __m256i b = _mm256_set1_epi32(v[j]);
      c0 = _mm256_sub_epi32(c0, _mm256_cmpgt_epi32(b, a0) | _mm256_cmpeq_epi32(b, a0));
      c1 = _mm256_sub_epi32(c1, _mm256_cmpgt_epi32(b, a1) | _mm256_cmpeq_epi32(b, a1));
    }
    const __m256i low = _mm256_set1_epi32(nat_lowest<V>());
    const __m256i m = _mm256_max_epi32(_mm256_blendv_epi8(low, a0, _mm256_cmpgt_epi32(c0, km1)),
                                       _mm256_blendv_epi8(low, a1, _mm256_cmpgt_epi32(c1, km1)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), m);
  }
  V best = out[0];
  for (int i = 1; i < 8; i++) best = out[i] > best ? out[i] : best;
  return best;
}

// The positions base + b of the set bits b of w, written to o in order: two unconditionally
// (past the count when w has fewer: o has room), the rest (rare: a word of 64 elements holds
// ~1 candidate) by a loop; branch-free in the usual case.
[[gnu::always_inline]] inline void flatten_bits(uint64_t w, int64_t base, int32_t* o) {
  o[0] = static_cast<int32_t>(base + __builtin_ctzll(w | (uint64_t(1) << 63)));
  w &= w - 1;
  o[1] = static_cast<int32_t>(base + __builtin_ctzll(w | (uint64_t(1) << 63)));
  w &= w - 1;
  for (int r = 2; w; w &= w - 1) o[r++] = static_cast<int32_t>(base + __builtin_ctzll(w));
}

// The guessed pass over a row p[0, len) (guess_read): in one read, the L group maxima of the
// transformed values (lanes, as nat_lanes) and the positions of the elements that beat every
// transformed value below t into idx (room for cap + 128): those not below t, and a NaN when it
// is the greatest (decreasing; increasing, it is the least: never); returns their number, or
// -1 once more than cap (the lanes are still made whole).
// Ties (the tie pass): idx takes the elements above t instead (NaN as above), and eq the
// positions of those equal to t, in order, until they and those above t so far are at least
// eqcap (room for eqcap + 66; *neq their number): among equal values only the first eqcap less
// the number above can be among the eqcap best (rows of 0..99, k = 8, t = 98: the 98s are no
// longer compared once eight 98s and 99s are seen, about 40% into the row).  Exact
// only while compares see every value as it is: not so for a float t of 0 or subnormal when
// denormals are read as zero (the caller checks).
template <class V, bool Inc, bool Ties>
[[gnu::always_inline]] inline int64_t nat_guess_tail(const V* p, int64_t from, int64_t len, V t,
                                                     V* lanes, int32_t* idx, int64_t cnt,
                                                     int64_t cap, int32_t* eq, int64_t* neq,
                                                     int64_t eqcap) {
  for (int64_t j = from; j < len; j++) {
    const V x = nat_tr<V, Inc>(p[j]);
    lanes[j % L] = x > lanes[j % L] ? x : lanes[j % L];
    if (cnt <= cap) {
      idx[cnt] = static_cast<int32_t>(j);
      if constexpr (Ties) {
        cnt += Inc ? x > t : !(x <= t);
        if (x == t && cnt + *neq < eqcap) eq[(*neq)++] = static_cast<int32_t>(j);
      } else {
        cnt += Inc ? x >= t : !(x < t);
      }
    }
  }
  return cnt > cap ? -1 : cnt;
}

// The tie pass's equal positions of one word (mask we, base j) into eq (ne of them held).  By a
// branch: branch-free was slower on rows of 0..99 (M18 in docs/benchmarks.md).
[[gnu::always_inline]] inline void collect_equal(uint64_t we, int64_t j, int32_t* eq,
                                                 int64_t& ne) {
  if (we) {
    flatten_bits(we, j, eq + ne);
    ne += __builtin_popcountll(we);
  }
}

// The positions of one word's bits (mask w, base j) onto idx[cnt...].  The guessed pass takes
// about k of a row's words, often one of two: branch-free.  The tie pass, when the row before
// had few above its threshold (Sparse, nf.ties_sparse: the ties at the k-th value fill the k
// best, as in rows of 0..15), mostly none: a branch, taken rarely.
template <bool Sparse>
[[gnu::always_inline]] inline void take_bits(uint64_t w, int64_t j, int32_t* idx, int64_t& cnt) {
  if (Sparse && !w) return;
  flatten_bits(w, j, idx + cnt);
  cnt += __builtin_popcountll(w);
}

// Four 16-lane masks as one 64-bit word (m[0] the low bits).
TDO_TARGET_AVX512 [[gnu::always_inline]] inline uint64_t join_masks_avx512(const __mmask16* m) {
  return _cvtmask64_u64(
      _mm512_kunpackd(_mm512_kunpackw(m[3], m[2]), _mm512_kunpackw(m[1], m[0])));
}

template <class V, bool Inc, bool Ties, bool Sparse = false>
TDO_TARGET_AVX512 int64_t nat_guess_avx512(const V* p, int64_t len, V t, V* lanes,
                                           int32_t* idx, int64_t cap, int32_t* eq, int64_t* neq,
                                           int64_t eqcap) {
  const int64_t full = len / 64 * 64;
  int64_t cnt = 0, j = 0, ne = Ties ? *neq : 0;  // neq: null unless Ties
  if constexpr (std::is_floating_point_v<V>) {
    const __m512 flip = _mm512_set1_ps(Inc ? -0.0f : 0.0f), tv = _mm512_set1_ps(t);
    constexpr int kCmp = Ties ? (Inc ? _CMP_GT_OQ : _CMP_NLE_UQ) : (Inc ? _CMP_GE_OQ : _CMP_NLT_UQ);
    __m512 a[4];
    for (auto& v : a) v = _mm512_set1_ps(nat_lowest<float>());
    for (; j < full && cnt <= cap; j += 64) {
      __mmask16 m[4], e[4];
      __m512 x[4];
      for (int i = 0; i < 4; i++) {
        x[i] = _mm512_xor_ps(_mm512_loadu_ps(p + j + 16 * i), flip);
        a[i] = mm512_max_ps(x[i], a[i]);
        m[i] = _mm512_cmp_ps_mask(x[i], tv, kCmp);
      }
      const uint64_t w = join_masks_avx512(m);
      take_bits<Sparse>(w, j, idx, cnt);
      if constexpr (Ties)
        if (ne + cnt < eqcap) {  // (only as many as the k best may need)
          for (int i = 0; i < 4; i++) e[i] = _mm512_cmp_ps_mask(x[i], tv, _CMP_EQ_OQ);
          collect_equal(join_masks_avx512(e), j, eq, ne);
        }
    }
    for (; j < full; j += 64)  // too many: the maxima only
      for (int i = 0; i < 4; i++)
        a[i] = mm512_max_ps(_mm512_xor_ps(_mm512_loadu_ps(p + j + 16 * i), flip), a[i]);
    _mm512_storeu_ps(lanes, mm512_max_ps(mm512_max_ps(a[0], a[1]), mm512_max_ps(a[2], a[3])));
  } else {
    const __m512i flip = _mm512_set1_epi32(Inc ? -1 : 0), tv = _mm512_set1_epi32(t);
    __m512i a[4];
    for (auto& v : a) v = _mm512_set1_epi32(nat_lowest<int32_t>());
    for (; j < full && cnt <= cap; j += 64) {
      __mmask16 m[4], e[4];
      __m512i x[4];
      for (int i = 0; i < 4; i++) {
        x[i] = _mm512_xor_si512(_mm512_loadu_si512(p + j + 16 * i), flip);
        a[i] = mm512_max_epi32(x[i], a[i]);
        m[i] = Ties ? _mm512_cmpgt_epi32_mask(x[i], tv) : _mm512_cmpge_epi32_mask(x[i], tv);
      }
      const uint64_t w = join_masks_avx512(m);
      take_bits<Sparse>(w, j, idx, cnt);
      if constexpr (Ties)
        if (ne + cnt < eqcap) {
          for (int i = 0; i < 4; i++) e[i] = _mm512_cmpeq_epi32_mask(x[i], tv);
          collect_equal(join_masks_avx512(e), j, eq, ne);
        }
    }
    for (; j < full; j += 64)
      for (int i = 0; i < 4; i++)
        a[i] = mm512_max_epi32(_mm512_xor_si512(_mm512_loadu_si512(p + j + 16 * i), flip), a[i]);
    _mm512_storeu_si512(lanes, mm512_max_epi32(mm512_max_epi32(a[0], a[1]),
                                                mm512_max_epi32(a[2], a[3])));
  }
  if constexpr (Ties) *neq = ne;
  return nat_guess_tail<V, Inc, Ties>(p, full, len, t, lanes, idx, cnt, cap, eq, neq, eqcap);
}

template <class V, bool Inc, bool Ties, bool Sparse = false>
TDO_TARGET_AVX2 int64_t nat_guess_avx2(const V* p, int64_t len, V t, V* lanes, int32_t* idx,
                                       int64_t cap, int32_t* eq, int64_t* neq, int64_t eqcap) {
  const int64_t full = len / 64 * 64;
  int64_t cnt = 0, j = 0, ne = Ties ? *neq : 0;  // neq: null unless Ties
  if constexpr (std::is_floating_point_v<V>) {
    const __m256 flip = _mm256_set1_ps(Inc ? -0.0f : 0.0f), tv = _mm256_set1_ps(t);
    constexpr int kCmp = Ties ? (Inc ? _CMP_GT_OQ : _CMP_NLE_UQ) : (Inc ? _CMP_GE_OQ : _CMP_NLT_UQ);
    __m256 a[4];  // as nat_lanes_avx2: a[0], a[2] lanes 0-7; a[1], a[3] lanes 8-15
    for (auto& v : a) v = _mm256_set1_ps(nat_lowest<float>());
    for (; j < full && cnt <= cap; j += 64) {
      uint64_t w = 0;
      __m256 x[8];
      for (int i = 0; i < 8; i++) {
        x[i] = _mm256_xor_ps(_mm256_loadu_ps(p + j + 8 * i), flip);
        a[i % 4] = _mm256_max_ps(x[i], a[i % 4]);
        w |= static_cast<uint64_t>(static_cast<uint32_t>(
                 _mm256_movemask_ps(_mm256_cmp_ps(x[i], tv, kCmp))))
             << (8 * i);
      }
      take_bits<Sparse>(w, j, idx, cnt);
      if constexpr (Ties)
        if (ne + cnt < eqcap) {
          uint64_t we = 0;
          for (int i = 0; i < 8; i++)
            we |= static_cast<uint64_t>(static_cast<uint32_t>(
                      _mm256_movemask_ps(_mm256_cmp_ps(x[i], tv, _CMP_EQ_OQ))))
                  << (8 * i);
          collect_equal(we, j, eq, ne);
        }
    }
    for (; j < full; j += 64)  // too many: the maxima only
      for (int i = 0; i < 8; i++)
        a[i % 4] = _mm256_max_ps(_mm256_xor_ps(_mm256_loadu_ps(p + j + 8 * i), flip), a[i % 4]);
    _mm256_storeu_ps(lanes, _mm256_max_ps(a[0], a[2]));
    _mm256_storeu_ps(lanes + 8, _mm256_max_ps(a[1], a[3]));
  } else {
    const __m256i flip = _mm256_set1_epi32(Inc ? -1 : 0), tv = _mm256_set1_epi32(t);
    __m256i a[4];
    for (auto& v : a) v = _mm256_set1_epi32(nat_lowest<int32_t>());
    const __m256i* pv = reinterpret_cast<const __m256i*>(p);  // 8 elements each
    for (; j < full && cnt <= cap; j += 64) {
      uint64_t w = 0;
      __m256i x[8];
      for (int i = 0; i < 8; i++) {
        x[i] = _mm256_xor_si256(_mm256_loadu_si256(pv + j / 8 + i), flip);
        a[i % 4] = _mm256_max_epi32(x[i], a[i % 4]);
        if constexpr (Ties)
          w |= static_cast<uint64_t>(lane_bits_avx2(_mm256_cmpgt_epi32(x[i], tv))) << (8 * i);
        else  // x >= t is not (t > x)
          w |= static_cast<uint64_t>(~lane_bits_avx2(_mm256_cmpgt_epi32(tv, x[i])) & 0xffu)
               << (8 * i);
      }
      take_bits<Sparse>(w, j, idx, cnt);
      if constexpr (Ties)
        if (ne + cnt < eqcap) {
          uint64_t we = 0;
          for (int i = 0; i < 8; i++)
            we |= static_cast<uint64_t>(lane_bits_avx2(_mm256_cmpeq_epi32(x[i], tv))) << (8 * i);
          collect_equal(we, j, eq, ne);
        }
    }
    for (; j < full; j += 64)
      for (int i = 0; i < 8; i++)
        a[i % 4] = _mm256_max_epi32(_mm256_xor_si256(_mm256_loadu_si256(pv + j / 8 + i), flip),
                                    a[i % 4]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), _mm256_max_epi32(a[0], a[2]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes + 8), _mm256_max_epi32(a[1], a[3]));
  }
  if constexpr (Ties) *neq = ne;
  return nat_guess_tail<V, Inc, Ties>(p, full, len, t, lanes, idx, cnt, cap, eq, neq, eqcap);
}
#endif

// The native pass's two loops for V and a direction; lanes null: not available (the portable
// build: there the key pass, which the compiler vectorizes, is used).
template <class V>
struct NatFns {
  // wm: ignored by lanes, written by lanes_w (the word maxima too)
  bool (*lanes)(const V* p, int64_t len, V* lanes, V* wm) = nullptr;
  bool (*lanes_w)(const V* p, int64_t len, V* lanes, V* wm) = nullptr;
  void (*masks)(const V* p, int64_t len, V t, uint64_t* words, const char* pf) = nullptr;
  V (*kth)(const V* v, int64_t k) = nullptr;
  int64_t (*next)(const V* p, int64_t from, int64_t len, V t, int32_t* idx, int64_t* nc,
                  ptrdiff_t pfd) = nullptr;
  // the guessed pass and the tie pass (nat_guess_*)
  using GuessFn = int64_t (*)(const V* p, int64_t len, V t, V* lanes, int32_t* idx, int64_t cap,
                              int32_t* eq, int64_t* neq, int64_t eqcap);
  GuessFn guess = nullptr, ties = nullptr, ties_sparse = nullptr;  // (see take_bits)
};

template <class V, bool Inc>
NatFns<V> nat_fns() {
#ifdef TDO_X86_SIMD
  switch (cpu_isa()) {
    case Isa::Avx512:
      return {nat_lanes_avx512<V, Inc, false>, nat_lanes_avx512<V, Inc, true>,
              nat_masks_avx512<V, Inc>, nat_kth_avx512<V>, nat_next_avx512<V, Inc>,
              nat_guess_avx512<V, Inc, false>, nat_guess_avx512<V, Inc, true>,
              nat_guess_avx512<V, Inc, true, true>};
    case Isa::Avx2:
      return {nat_lanes_avx2<V, Inc, false>, nat_lanes_avx2<V, Inc, true>, nat_masks_avx2<V, Inc>,
              nat_kth_avx2<V>, nat_next_avx2<V, Inc>, nat_guess_avx2<V, Inc, false>,
              nat_guess_avx2<V, Inc, true>, nat_guess_avx2<V, Inc, true, true>};
    default: break;
  }
#endif
  return {};
}

// Whether compares against a threshold t see every value as it is, as the tie pass needs (x > t
// and x == t exact; the guessed pass's x >= t only needs to hold for every x that does): always
// for int32; for a float, unless t is 0 or subnormal while the CPU reads denormal inputs as zero
// (MXCSR.DAZ, torch.set_flush_denormal(True)): a subnormal x then compares equal to 0.
template <class V>
inline bool exact_compares(V t) {
#ifdef TDO_X86_SIMD
  if constexpr (std::is_floating_point_v<V>) {
    const int cls = std::fpclassify(t);
    return (cls != FP_ZERO && cls != FP_SUBNORMAL) || !(_mm_getcsr() & 0x40);
  }
#endif
  (void)t;
  return true;
}

// ---- composites: the key in the high half, MAXIDX - index in the low half -----------------

template <class KT>
struct Composite;
template <>
struct Composite<uint32_t> {
  using type = uint64_t;
};
template <>
struct Composite<uint64_t> {
  using type = u128;
};

template <class KT, class CT = typename Composite<KT>::type>
inline CT comp(KT key, int64_t i) {
  return (static_cast<CT>(key) << (8 * sizeof(KT))) |
         static_cast<CT>(static_cast<KT>(static_cast<KT>(~KT(0)) - static_cast<KT>(i)));
}
template <class KT, class CT>
inline int64_t index_of(CT c) {
  return static_cast<int64_t>(static_cast<KT>(static_cast<KT>(~KT(0)) - static_cast<KT>(c)));
}
template <class KT, class CT>
inline KT key_of(CT c) {
  return static_cast<KT>(c >> (8 * sizeof(KT)));
}

// ---- selection and sort (descending; composites are distinct: the order is total) ----------

template <class CT>
void insertion(CT* a, int64_t n) {
  for (int64_t i = 1; i < n; i++) {
    CT v = a[i];
    int64_t j = i;
    while (j > 0 && a[j - 1] < v) {
      a[j] = a[j - 1];
      j--;
    }
    a[j] = v;
  }
}

// Insert c into the W largest composites so far, a[0..W) sorted descending (distinct; unused
// entries 0, below every composite): new a[j] = max(a[j], min(a[j - 1], c)), a[-1] = +inf.
// Branch-free, and every j independent: the compiler makes it a few vector min/max steps.
template <int W, class CT>
[[gnu::always_inline]] inline void insert_net(CT* a, CT c) {
  CT prev[W];
  prev[0] = static_cast<CT>(~CT(0));
  for (int j = 1; j < W; j++) prev[j] = a[j - 1];
  for (int j = 0; j < W; j++) {
    const CT lo = prev[j] < c ? prev[j] : c;
    a[j] = a[j] > lo ? a[j] : lo;
  }
}

// insert_net on 64-bit composites (32-bit keys) with vector min/max; W = 8 or 16.
using InsFn = void (*)(uint64_t* a, uint64_t c);
template <int W>
void insert_net_portable(uint64_t* a, uint64_t c) {
  insert_net<W>(a, c);
}
#ifdef TDO_X86_SIMD
template <int W>
TDO_TARGET_AVX512 void insert_net_avx512(uint64_t* a, uint64_t c) {
  const __m512i cv = _mm512_set1_epi64(static_cast<long long>(c));
  const __m512i top = _mm512_set1_epi64(-1);
  const __m512i a0 = _mm512_loadu_si512(a);
  // prev = [+inf, a[0..6]] (and [a[7], a[8..14]] for the second half)
  const __m512i p0 = mm512_alignr_epi64<7>(a0, top);
  _mm512_storeu_si512(a, mm512_max_epu64(a0, mm512_min_epu64(p0, cv)));
  if constexpr (W == 16) {
    const __m512i a1 = _mm512_loadu_si512(a + 8);
    const __m512i p1 = mm512_alignr_epi64<7>(a1, a0);
    _mm512_storeu_si512(a + 8, mm512_max_epu64(a1, mm512_min_epu64(p1, cv)));
  }
}

TDO_TARGET_AVX2 inline __m256i max_u64_avx2(__m256i x, __m256i y, __m256i sign) {
  const __m256i gt = _mm256_cmpgt_epi64(_mm256_xor_si256(x, sign), _mm256_xor_si256(y, sign));
  return _mm256_blendv_epi8(y, x, gt);
}
template <int W>
TDO_TARGET_AVX2 void insert_net_avx2(uint64_t* a, uint64_t c) {
  const __m256i sign = _mm256_set1_epi64x(INT64_MIN);
  const __m256i cv = _mm256_set1_epi64x(static_cast<long long>(c));
  __m256i prev_last = _mm256_set1_epi64x(-1);  // the entry before each group of 4: +inf first
  for (int g = 0; g < W / 4; g++) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 4 * g));
    // prev = [last of the group before, x[0..2]]
    const __m256i rot = _mm256_permute4x64_epi64(x, 0x90);  // x0 x0 x1 x2
    const __m256i prev = _mm256_blend_epi32(rot, prev_last, 0x03);
    prev_last = _mm256_permute4x64_epi64(x, 0xff);  // x3 everywhere
    // min(prev, c) = c where prev > c
    const __m256i gt =
        _mm256_cmpgt_epi64(_mm256_xor_si256(prev, sign), _mm256_xor_si256(cv, sign));
    const __m256i lo = _mm256_blendv_epi8(prev, cv, gt);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + 4 * g), max_u64_avx2(x, lo, sign));
  }
}
#endif

// The insert_net of W entries for this machine.
template <int W>
InsFn insert_fn() {
#ifdef TDO_X86_SIMD
  switch (cpu_isa()) {
    case Isa::Avx512: return insert_net_avx512<W>;
    case Isa::Avx2: return insert_net_avx2<W>;
    default: break;
  }
#endif
  return insert_net_portable<W>;
}

// The W largest of the c composites cs[0, c) (64-bit: 32-bit keys), sorted descending, into
// out[0, W) (0 past c); W = 8 or 16.  insert_net for each, the entries kept in registers on
// AVX2 and AVX-512, in two independent chains (even and odd candidates) merged at the end.
using NetFn = void (*)(const uint64_t* cs, int64_t c, uint64_t* out);
// The same for two rows at once (a and b, c candidates each, the shorter list padded with
// zeros, which leave the entries as they are): their chains interleaved, so that each hides
// the other's latency (a row's net alone waits on its chain).
using Net2Fn = void (*)(const uint64_t* a, const uint64_t* b, int64_t c, uint64_t* oa,
                        uint64_t* ob);
template <int W>
void net_portable(const uint64_t* cs, int64_t c, uint64_t* out) {
  std::fill(out, out + W, uint64_t(0));
  for (int64_t q = 0; q < c; q++) insert_net<W>(out, cs[q]);
}
template <int W>
void net2_portable(const uint64_t* a, const uint64_t* b, int64_t c, uint64_t* oa, uint64_t* ob) {
  net_portable<W>(a, c, oa);
  net_portable<W>(b, c, ob);
}
#ifdef TDO_X86_SIMD
// AVX2: the entries in registers as signed 64-bit values (sign bit flipped: AVX2 compares
// signed), in groups of 4.
TDO_TARGET_AVX2 inline __m256i max_s64_avx2(__m256i x, __m256i y) {
  return _mm256_blendv_epi8(y, x, _mm256_cmpgt_epi64(x, y));
}
TDO_TARGET_AVX2 inline __m256i min_s64_avx2(__m256i x, __m256i y) {
  return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(x, y));
}
// One insert_net step of cv (broadcast) into the G groups x, descending.
template <int G>
TDO_TARGET_AVX2 inline void net_step_avx2(__m256i (&x)[G], __m256i cv) {
  __m256i carry = _mm256_set1_epi64x(INT64_MAX);  // the entry before the group: +inf first
  for (int g = 0; g < G; g++) {
    const __m256i prev = _mm256_blend_epi32(_mm256_permute4x64_epi64(x[g], 0x90), carry, 0x03);
    carry = _mm256_permute4x64_epi64(x[g], 0xff);
    x[g] = max_s64_avx2(x[g], min_s64_avx2(prev, cv));
  }
}
// A half-cleaner within a group: entry i against entry i ^ d (d = 2: imm 0x4e, d = 1: 0xb1),
// the larger to the lower position (the upper entries' dwords: 0xf0 for d = 2, 0xcc for 1).
template <int Imm, int Upper>
TDO_TARGET_AVX2 inline __m256i half_clean_avx2(__m256i v) {
  const __m256i s = _mm256_permute4x64_epi64(v, Imm);
  return _mm256_blend_epi32(max_s64_avx2(v, s), min_s64_avx2(v, s), Upper);
}

// R rows' nets at once (cs[r], c candidates each; out[r]).
template <int W, int R>
TDO_TARGET_AVX2 [[gnu::always_inline]] inline void net_rows_avx2(const uint64_t* const* cs,
                                                                  int64_t c, uint64_t* const* out) {
  constexpr int G = W / 4;
  const __m256i sign = _mm256_set1_epi64x(INT64_MIN);
  __m256i a[R][G], b[R][G];
  for (int r = 0; r < R; r++)
    for (int g = 0; g < G; g++) a[r][g] = b[r][g] = sign;  // 0 (below every composite), flipped
#define TDO_CAND(r, q) \
  _mm256_set1_epi64x(static_cast<long long>(cs[r][q] ^ (uint64_t(1) << 63)))
  int64_t q = 0;
  for (; q + 1 < c; q += 2)  // a takes the even candidates, b the odd
    for (int r = 0; r < R; r++) {
      net_step_avx2<G>(a[r], TDO_CAND(r, q));
      net_step_avx2<G>(b[r], TDO_CAND(r, q + 1));
    }
  if (q < c)
    for (int r = 0; r < R; r++) net_step_avx2<G>(a[r], TDO_CAND(r, q));
#undef TDO_CAND
  for (int r = 0; r < R; r++) {
    // the W largest of both: max(a[i], b[W - 1 - i]) (a bitonic sequence), then its sort:
    // half-cleaners across the groups (distance W / 2 down to 4), then within each group
    __m256i* x = a[r];
    for (int g = 0; g < G; g++)
      x[g] = max_s64_avx2(x[g], _mm256_permute4x64_epi64(b[r][G - 1 - g], 0x1b));
    for (int h = G / 2; h >= 1; h /= 2)
      for (int g = 0; g < G; g++)
        if (!(g & h)) {
          const __m256i hi = max_s64_avx2(x[g], x[g + h]);
          x[g + h] = min_s64_avx2(x[g], x[g + h]);
          x[g] = hi;
        }
    for (int g = 0; g < G; g++)
      x[g] = half_clean_avx2<0xb1, 0xcc>(half_clean_avx2<0x4e, 0xf0>(x[g]));
    for (int g = 0; g < G; g++)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[r] + 4 * g),
                          _mm256_xor_si256(x[g], sign));
  }
}
template <int W>
TDO_TARGET_AVX2 void net_avx2(const uint64_t* cs, int64_t c, uint64_t* out) {
  net_rows_avx2<W, 1>(&cs, c, &out);
}
template <int W>
TDO_TARGET_AVX2 void net2_avx2(const uint64_t* a, const uint64_t* b, int64_t c, uint64_t* oa,
                               uint64_t* ob) {
  const uint64_t* cs[2] = {a, b};
  uint64_t* out[2] = {oa, ob};
  net_rows_avx2<W, 2>(cs, c, out);
}

// One insert_net step on the 8 entries in a (descending) and the composite cv (broadcast).
#define TDO_NET8_STEP(a, cv) \
  a = mm512_max_epu64(a, mm512_min_epu64(mm512_alignr_epi64<7>(a, top), cv))
// The same on the 16 entries in x0 (0-7) and x1 (8-15).
#define TDO_NET16_STEP(x0, x1, cv)                                          \
  do {                                                                      \
    const __m512i cv_ = (cv), p1_ = mm512_alignr_epi64<7>(x1, x0);         \
    TDO_NET8_STEP(x0, cv_);                                                 \
    x1 = mm512_max_epu64(x1, mm512_min_epu64(p1_, cv_));                  \
  } while (0)

// A bitonic sequence of 8 composites sorted descending: half-cleaners of distance 4, 2, 1 (each
// entry against its partner, the larger to the lower position).
TDO_TARGET_AVX512 [[gnu::always_inline]] inline __m512i sort_bitonic8_avx512(__m512i m) {
  for (int d = 4; d >= 1; d /= 2) {
    const __m512i s = mm512_permutexvar_epi64(
        _mm512_xor_si512(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), _mm512_set1_epi64(d)), m);
    const __mmask8 upper = d == 4 ? 0xf0 : d == 2 ? 0xcc : 0xaa;
    m = _mm512_mask_blend_epi64(upper, mm512_max_epu64(m, s), mm512_min_epu64(m, s));
  }
  return m;
}

// R rows' nets at once (cs[r], c candidates each; out[r]).
template <int W, int R>
TDO_TARGET_AVX512 [[gnu::always_inline]] inline void net_rows_avx512(
    const uint64_t* const* cs, int64_t c, uint64_t* const* out) {
  const __m512i top = _mm512_set1_epi64(-1);
  const __m512i rev = _mm512_setr_epi64(7, 6, 5, 4, 3, 2, 1, 0);
#define TDO_CAND(r, q) _mm512_set1_epi64(static_cast<long long>(cs[r][q]))
  if constexpr (W == 8) {
    __m512i a0[R], a1[R];  // a0 takes the even candidates, a1 the odd
    for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm512_setzero_si512();
    int64_t q = 0;
    for (; q + 1 < c; q += 2)
      for (int r = 0; r < R; r++) {
        const __m512i c0 = TDO_CAND(r, q), c1 = TDO_CAND(r, q + 1);
        TDO_NET8_STEP(a0[r], c0);
        TDO_NET8_STEP(a1[r], c1);
      }
    if (q < c)
      for (int r = 0; r < R; r++) {
        const __m512i c0 = TDO_CAND(r, q);
        TDO_NET8_STEP(a0[r], c0);
      }
    // the 8 largest of both: max(a0[i], a1[7 - i]) (a bitonic sequence), then its sort
    for (int r = 0; r < R; r++)
      _mm512_storeu_si512(out[r], sort_bitonic8_avx512(mm512_max_epu64(
                                      a0[r], mm512_permutexvar_epi64(rev, a1[r]))));
  } else {
    // entries 0-7 in a0, 8-15 in a1, and the same in b0, b1: a takes the even candidates, b
    // the odd (two chains of half the length)
    __m512i a0[R], a1[R], b0[R], b1[R];
    for (int r = 0; r < R; r++) a0[r] = a1[r] = b0[r] = b1[r] = _mm512_setzero_si512();
    int64_t q = 0;
    for (; q + 1 < c; q += 2)
      for (int r = 0; r < R; r++) {
        TDO_NET16_STEP(a0[r], a1[r], TDO_CAND(r, q));
        TDO_NET16_STEP(b0[r], b1[r], TDO_CAND(r, q + 1));
      }
    if (q < c)
      for (int r = 0; r < R; r++) TDO_NET16_STEP(a0[r], a1[r], TDO_CAND(r, q));
    // the 16 largest of both: max(a[i], b[15 - i]) (a bitonic sequence), then its sort: entry
    // i against i + 8 across the two vectors, then within each as for W == 8
    for (int r = 0; r < R; r++) {
      const __m512i m0 = mm512_max_epu64(a0[r], mm512_permutexvar_epi64(rev, b1[r]));
      const __m512i m1 = mm512_max_epu64(a1[r], mm512_permutexvar_epi64(rev, b0[r]));
      _mm512_storeu_si512(out[r], sort_bitonic8_avx512(mm512_max_epu64(m0, m1)));
      _mm512_storeu_si512(out[r] + 8, sort_bitonic8_avx512(mm512_min_epu64(m0, m1)));
    }
  }
#undef TDO_CAND
}
template <int W>
TDO_TARGET_AVX512 void net_avx512(const uint64_t* cs, int64_t c, uint64_t* out) {
  net_rows_avx512<W, 1>(&cs, c, &out);
}
template <int W>
TDO_TARGET_AVX512 void net2_avx512(const uint64_t* a, const uint64_t* b, int64_t c,
                                   uint64_t* oa, uint64_t* ob) {
  const uint64_t* cs[2] = {a, b};
  uint64_t* out[2] = {oa, ob};
  net_rows_avx512<W, 2>(cs, c, out);
}
#undef TDO_NET8_STEP
#undef TDO_NET16_STEP
#endif

// The network of W entries for this machine, for one row and for two at once.
struct Nets {
  NetFn one;
  Net2Fn two;
};
template <int W>
Nets net_fns() {
#ifdef TDO_X86_SIMD
  switch (cpu_isa()) {
    case Isa::Avx512: return {net_avx512<W>, net2_avx512<W>};
    case Isa::Avx2: return {net_avx2<W>, net2_avx2<W>};
    default: break;
  }
#endif
  return {net_portable<W>, net2_portable<W>};
}

template <class CT>
void sift(CT* a, int64_t i, int64_t n) {  // min-heap: descending heapsort
  CT v = a[i];
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && a[c + 1] < a[c]) c++;
    if (!(a[c] < v)) break;
    a[i] = a[c];
    i = c;
  }
  a[i] = v;
}

template <class CT>
void heapsort(CT* a, int64_t n) {
  for (int64_t i = n / 2 - 1; i >= 0; i--) sift(a, i, n);
  for (int64_t e = n - 1; e > 0; e--) {
    std::swap(a[0], a[e]);
    sift(a, 0, e);
  }
}

// Hoare partition around a median of three (n > 16); returns p: a[<p] >= pivot >= a[>=p].
template <class CT>
int64_t partition(CT* a, int64_t n) {
  CT x = a[0], y = a[n / 2], z = a[n - 1];
  if (x < y) std::swap(x, y);
  CT piv = z > x ? x : (z < y ? y : z);
  int64_t i = -1, j = n;
  for (;;) {
    do i++;
    while (a[i] > piv);
    do j--;
    while (a[j] < piv);
    if (i >= j) return j + 1;
    std::swap(a[i], a[j]);
  }
}

// Descending introsort.
template <class CT>
void sort_desc(CT* a, int64_t n) {
  int depth = 0;
  for (int64_t m = n; m > 1; m >>= 1) depth += 2;
  while (n > 16) {
    if (depth-- == 0) {
      heapsort(a, n);
      return;
    }
    int64_t p = partition(a, n);
    if (p < n - p) {
      sort_desc(a, p);
      a += p;
      n -= p;
    } else {
      sort_desc(a + p, n - p);
      n = p;
    }
  }
  insertion(a, n);
}

// Rearrange a[0..n) so that a[0..k) are its k largest (0 < k < n), unordered.
template <class CT>
void select_k(CT* a, int64_t n, int64_t k) {
  int depth = 0;
  for (int64_t m = n; m > 1; m >>= 1) depth += 2;
  int64_t want = k;
  while (n > 16) {
    if (depth-- == 0) break;
    int64_t p = partition(a, n);
    if (p == want) return;
    if (p > want) {
      n = p;
    } else {
      a += p;
      n -= p;
      want -= p;
    }
  }
  sort_desc(a, n);
}

// The min of a[0..k): the k-th best, after select_k.
template <class CT>
CT min_of(const CT* a, int64_t k) {
  CT m = a[0];
  for (int64_t i = 1; i < k; i++) m = a[i] < m ? a[i] : m;
  return m;
}

// The k-th largest of v[0..L) (1 <= k <= L): the value whose rank (larger values, and equal
// ones before it, counted) is k - 1.  Branch-free, L * L compares the compiler vectorizes.
template <class KT>
KT kth_largest(const KT* v, int64_t k) {
  KT out = 0;
  for (int i = 0; i < L; i++) {
    int rank = 0;
    for (int j = 0; j < L; j++) rank += (v[j] > v[i]) | ((v[j] == v[i]) & (j < i));
    out = rank == k - 1 ? v[i] : out;
  }
  return out;
}

// ---- the kernel ----------------------------------------------------------------------------

// Work buffers, allocated before any parallel loop (the loops' bodies must not throw).
template <class T>
std::unique_ptr<T[]> allocate(int64_t count, const char* what) {
  size_t bytes = 0;
  if (count < 0 || __builtin_mul_overflow(static_cast<size_t>(count), sizeof(T), &bytes))
    runtime_error("top_k1: ", what, " of ", count, " entries is too large to allocate");
  T* p = new (std::nothrow) T[static_cast<size_t>(count)];
  if (!p)
    runtime_error("top_k1: could not allocate ", bytes, " bytes for ", what,
                  " (out of memory)");
  return std::unique_ptr<T[]>(p);
}

// A parallel part's guess for the guessed pass (the bits of a float or int32 threshold), and how
// often it failed: a part whose rows keep defeating it stops guessing.
struct Guess {
  uint32_t bits = 0;
  bool set = false;
  bool ties = false;  // the last row's k best took values equal to the threshold: the tie pass
  int64_t above = 0;  // how many of the last row's candidates were above it
  int64_t rows = 0, misses = 0;
  bool on() const { return misses <= 8 + rows / 8; }
};

template <class KT>
struct TopK {
  using CT = typename Composite<KT>::type;

  // x: [rows, n] contiguous, elements of esize bytes; outputs [rows / inner, k, inner].
  const char* x;
  int64_t esize, n, inner, k;
  int64_t cap;  // candidate buffer entries (> k; scan)
  KeyFn<KT> kf;
  MaskFn<KT> mf;
  InsFn ins;  // insert_net for k <= kNetMaxK (32-bit keys)
  NetFn net;  // the same over a list of candidates (guess_finish)
  Net2Fn net2;  // and over two rows' lists at once (guessed_rows)
  // float32 / int32 rows of 32-bit keys: the native-order pass (scan_native)
  ScalarType native = ScalarType::Undefined;
  NatFns<float> nat_f{};
  NatFns<int32_t> nat_i{};
  KT mask;  // 0: largest first; all ones: smallest first
  char* out_v;
  void* out_i;
  ScalarType index_dtype;

  // A parallel part's scratch: the candidate buffer, and a block of keys with its group maxima.
  struct Scratch {
    std::vector<std::unique_ptr<CT[]>> buf;
    std::vector<std::unique_ptr<KT[]>> kb;
    Scratch(const TopK& c, int parts) {
      for (int p = 0; p < parts; p++) {
        buf.push_back(allocate<CT>(c.cap + 1, "top_k1's candidate buffer"));
        kb.push_back(allocate<KT>(KB + L, "top_k1's key block"));
      }
    }
  };

  const char* row(int64_t r) const { return x + r * n * esize; }

  // The best min(k, s1 - s0) composites of row[s0, s1) (row indices) into buf[0..m), unordered;
  // returns m.  buf holds cap entries, kb KB + L keys (the L group maxima last).
  // pf: where to prefetch the row a few on (the native pass; null: none).
  int64_t scan(const char* rp, int64_t s0, int64_t s1, CT* buf, KT* kb,
               const char* pf = nullptr) const {
    KT* lanes = kb + KB;
    // float32 / int32 spans of at least 256 (shorter: the key pass, vectorized inline, is as
    // fast or faster: M19 in docs/benchmarks.md, "Measured choices")
    if (k == 1 && native != ScalarType::Undefined && s1 - s0 >= 256) {
      const bool inc = mask != 0;
      const int64_t m =
          native == ScalarType::Float
              ? (inc ? max_native<float, KeyF32, true>(rp, s0, s1, buf, nat_f)
                     : max_native<float, KeyF32, false>(rp, s0, s1, buf, nat_f))
              : (inc ? max_native<int32_t, KeyI32, true>(rp, s0, s1, buf, nat_i)
                     : max_native<int32_t, KeyI32, false>(rp, s0, s1, buf, nat_i));
      if (m >= 0) return m;  // else a NaN: the key pass below decides
    }
    if (k == 1) {
      KT best = 0;
      int64_t bs = -1;
      for (int64_t s = s0; s < s1; s += KB) {
        int64_t len = s1 - s < KB ? s1 - s : KB;
        KT bm = kf(rp, s, len, mask, kb, nullptr);
        if (bs < 0 || bm > best) {  // the first block wins ties
          best = bm;
          bs = s;
        }
      }
      if (bs < 0) return 0;
      int64_t len = s1 - bs < KB ? s1 - bs : KB;
      if (bs + KB < s1) kf(rp, bs, len, mask, kb, nullptr);  // else still in kb
      // its first key >= best (== best), found with the vector compare
      const int64_t nw = (len + 63) / 64;
      if (len % 64) std::fill(kb + len, kb + nw * 64, KT(0));
      uint64_t words[KB / 64];
      mf(kb, nw * 64, best, words);
      int64_t w = 0;
      while (!words[w]) w++;  // best is in the block: some word has a bit
      buf[0] = comp<KT>(best, bs + w * 64 + __builtin_ctzll(words[w]));
      return 1;
    }
    const bool inc = mask != 0;
    if (native == ScalarType::Float)
      return inc ? scan_native<float, KeyF32, true>(rp, s0, s1, buf, kb, pf, nat_f)
                 : scan_native<float, KeyF32, false>(rp, s0, s1, buf, kb, pf, nat_f);
    if (native == ScalarType::Int)
      return inc ? scan_native<int32_t, KeyI32, true>(rp, s0, s1, buf, kb, pf, nat_i)
                 : scan_native<int32_t, KeyI32, false>(rp, s0, s1, buf, kb, pf, nat_i);
    // Candidates are the keys >= t.  Before anything is known t is 0, or, in a block, the
    // k-th largest of its group maxima (k groups hold a key at least that large, so smaller
    // keys are out of the k best for good).  Once k are held, t is the k-th best key + 1
    // (`floor`: the scan is in index order, so a later equal key loses to it).  A block whose
    // maximum is below the floor is skipped whole; else a vector compare gives the bit mask of
    // its candidates, and only those are visited.
    int64_t m = 0;
    if (k <= kNetMaxK) std::fill(buf, buf + kNetMaxK, CT(0));  // insert_net's start
    KT floor = 0;
    bool have = false;  // the floor is set
    uint64_t words[KB / 64];
    for (int64_t s = s0; s < s1; s += KB) {
      const int64_t len = s1 - s < KB ? s1 - s : KB;
      const KT bm = kf(rp, s, len, mask, kb, lanes);
      if (have && bm < floor) continue;  // no candidate in the block
      KT bound = 0;
      if (!have && k <= L && len >= L) bound = kth_largest(lanes, k);
      const int64_t nw = (len + 63) / 64;
      if (len % 64) std::fill(kb + len, kb + nw * 64, KT(0));  // whole words are compared
      // The masks are made with t; when t has risen since and many candidates are left (the
      // first block without a bound), the rest are made again.
      KT t = have && floor > bound ? floor : bound;
      mf(kb, nw * 64, t, words);
      if (len % 64) words[nw - 1] &= (uint64_t(1) << (len % 64)) - 1;
      int64_t pending = 0;
      for (int64_t w = 0; w < nw; w++) pending += __builtin_popcountll(words[w]);
      for (int64_t w = 0; w < nw; w++) {
        if (have && floor > t && pending > 64) {
          t = floor > bound ? floor : bound;
          mf(kb + w * 64, (nw - w) * 64, t, words + w);
          if (len % 64) words[nw - 1] &= (uint64_t(1) << (len % 64)) - 1;
          pending = 0;
          for (int64_t v = w; v < nw; v++) pending += __builtin_popcountll(words[v]);
        }
        for (uint64_t b = words[w]; b; b &= b - 1) {
          pending--;
          const int64_t j = w * 64 + __builtin_ctzll(b);
          if (!offer(buf, m, kb[j], s + j, floor, have)) return m;
        }
      }
    }
    if (m > k) select_k(buf, m, k);
    return m < k ? m : k;
  }

  // k == 1 for float32 / int32 (V) in their own order: every block's maximum by the native
  // group-maxima pass (one read, no keys), then the first element of the first block holding the
  // largest, by a vector compare (-0.0 and +0.0 are equal there, as their keys are).  Returns 1
  // (buf[0] the winner), 0 for an empty span, or -1 when a block holds a NaN (float compares do
  // not order it) or the thread treats denormals as zero (torch.set_flush_denormal: compares
  // then tie distinct denormals, which the keys order): the key pass then takes the span.
  template <class V, class D, bool Inc>
  int64_t max_native(const char* rp, int64_t s0, int64_t s1, CT* buf,
                     const NatFns<V>& nf) const {
#ifdef TDO_X86_SIMD
    if constexpr (std::is_floating_point_v<V>)
      if (_mm_getcsr() & 0x0040) return -1;  // MXCSR.DAZ
#endif
    const V* p = reinterpret_cast<const V*>(rp);
    alignas(64) V lanes[L];
    V best = nat_lowest<V>();
    int64_t bs = -1;
    for (int64_t s = s0; s < s1; s += KB) {
      const int64_t len = std::min(KB, s1 - s);
      if (!nf.lanes(p + s, len, lanes, nullptr)) return -1;
      V bm = lanes[0];
      for (int g = 1; g < L; g++) bm = lanes[g] > bm ? lanes[g] : bm;
      if (bs < 0 || bm > best) {  // the first block wins ties
        best = bm;
        bs = s;
      }
    }
    if (bs < 0) return 0;
    uint64_t words[KB / 64];
    nf.masks(p + bs, std::min(KB, s1 - bs), best, words, nullptr);
    int64_t w = 0;
    while (!words[w]) w++;  // best is in the block: some word has a bit
    const int64_t j = bs + w * 64 + __builtin_ctzll(words[w]);
    typename D::UT bits;
    std::memcpy(&bits, p + j, sizeof(bits));
    buf[0] = comp<KT>(static_cast<KT>(static_cast<KT>(D::key(bits)) ^ mask), j);
    return 1;
  }

  // A candidate (its key, its row index): into the k best so far, kept sorted (k <=
  // kSortedMaxK), or into the unordered buffer, cut back to the k best when full.  Keeps floor
  // (the k-th best key + 1, once k are held: `have`); false when no key can be greater.
  [[gnu::always_inline]] inline bool offer(CT* buf, int64_t& m, KT key, int64_t i, KT& floor,
                                           bool& have) const {
    if (have && key < floor) return true;  // the floor rose since the mask was made
    if (k <= kSortedMaxK) {
      const CT c = comp<KT>(key, i);
      if (k <= kNetMaxK) {  // branch-free (buf was cleared: 0 is below every composite)
        if constexpr (std::is_same_v<CT, uint64_t>)
          ins(buf, c);
        else if (half_net(k))
          insert_net<kNetMaxK / 2>(buf, c);
        else
          insert_net<kNetMaxK>(buf, c);
        m = m < k ? m + 1 : k;
      } else {
        int64_t q = m < k ? m++ : k - 1;
        while (q > 0 && buf[q - 1] < c) {
          buf[q] = buf[q - 1];
          q--;
        }
        buf[q] = c;
      }
      if (m < k) return true;
      const KT kt = key_of<KT>(buf[k - 1]);
      if (kt == static_cast<KT>(~KT(0))) return false;
      floor = kt + 1;
      have = true;
      return true;
    }
    buf[m++] = comp<KT>(key, i);
    if (m == k && !have) {  // the first k: the floor from them (until the first cut)
      const KT kt = key_of<KT>(min_of(buf, k));
      if (kt == static_cast<KT>(~KT(0))) return false;
      floor = kt + 1;
      have = true;
    }
    if (m < cap) return true;
    select_k(buf, m, k);
    m = k;
    const KT kt = key_of<KT>(min_of(buf, k));
    if (kt == static_cast<KT>(~KT(0))) return false;
    floor = kt + 1;
    have = true;
    return true;
  }

  // The least transformed value above the k-th best's (the one at buf's k-th), lowest when
  // that is a NaN (every other value beats it), the largest when none is above.
  template <class V, bool Inc>
  V native_floor(const V* p, const CT* buf) const {
    const V vk = nat_tr<V, Inc>(p[index_of<KT>(k <= kSortedMaxK ? buf[k - 1] : min_of(buf, k))]);
    if constexpr (std::is_floating_point_v<V>) {
      if (vk != vk) return nat_lowest<V>();
      if (vk == 0) return std::numeric_limits<float>::denorm_min();  // +0.0 == -0.0
      if (vk == __builtin_huge_valf()) return vk;
      uint32_t u;
      std::memcpy(&u, &vk, 4);
      u = vk > 0 ? u + 1 : u - 1;  // the next float up
      V up;
      std::memcpy(&up, &u, 4);
      return up;
    }
    else
      return vk == std::numeric_limits<V>::max() ? vk : static_cast<V>(vk + 1);
  }

  // The guessed pass of a row p[0, n).  Rows of one distribution have
  // similar k-th best values, so a threshold guessed from an earlier row's group maxima (their
  // (k + kGuessSlack)-th largest) is usually below this row's k-th best, but not far.  One
  // read (nat_guess) finds this row's group maxima and the positions of the elements that
  // reach the guess (and the NaNs, decreasing: NaN is the greatest).  When there are at least
  // k, the k best of the span are among them (each beats every other element), and the sorted
  // network of their composites gives them (4096x1024 float32, k = 8: ~16 candidates, no
  // branch per candidate).  When fewer than k or more than kGuessCap reach the guess, a second
  // read (from cache) takes this row's own k-th largest group maximum instead, which k
  // elements reach, by the tie pass: the elements above it, and the first k equal to it (ties
  // across the k-th value, as in rows of a few distinct values, where many elements reach any
  // threshold: the k best are those above it and then the first equal ones); false when more
  // than kGuessCap are above it: the other passes then take the span.  A row that needed equal
  // values makes the next row's first read the tie pass (not a row whose k best merely end in
  // equal keys: on rows of 0..99 that was faster on one thread, slower on two: M18).  The guess
  // is made again from this row's group maxima after a miss, or when more than 3k reach it.  A
  // row's pass is read (guess_read), then finished (guess_finish; two rows at once:
  // guess_finish2).
  // GuessRow: a read's candidates' positions, the equal ones' (the tie pass), and how many.
  struct GuessRow {
    int32_t idx[kGuessCap + 128], eq[kNetMaxK + 66];
    int64_t c = 0, neq = 0;
  };
  // The read: false when the other passes must take the span (more than kGuessCap reach the
  // guess, or are above it); the guess kept up to date.
  template <class V, bool Inc>
  [[gnu::always_inline]] bool guess_read(const V* p, int64_t len, Guess& g, const NatFns<V>& nf,
                                         GuessRow& gr) const {
    static_assert(sizeof(V) == sizeof(g.bits), "a 32-bit threshold");
    alignas(64) V lanes[L];
    int32_t* idx = gr.idx;
    gr.neq = 0;
    V t = nat_lowest<V>();
    if (g.set) std::memcpy(&t, &g.bits, sizeof(t));
    // the tie pass at t: above t, and equal (only where compares see t's neighbours as they are)
    const auto tie_pass = [&](V t, V* lanes) {
      gr.neq = 0;
      return (g.above <= kSparseAbove ? nf.ties_sparse : nf.ties)(p, len, t, lanes, idx,
                                                                  kGuessCap, gr.eq, &gr.neq, k);
    };
    bool tied = g.ties && exact_compares(t);
    int64_t c = tied ? tie_pass(t, lanes) : nf.guess(p, len, t, lanes, idx, kGuessCap, nullptr,
                                                    nullptr, 0);
    g.rows++;
    const auto enough = [&] { return c >= k || (tied && c >= 0 && c + gr.neq >= k); };
    bool hit = enough();
    if (!g.set || !hit || c > 3 * k) {  // a new guess (kept while it works)
      const V next = nf.kth(lanes, std::min<int64_t>(L, k + kGuessSlack));
      std::memcpy(&g.bits, &next, sizeof(next));
      g.set = true;
    }
    if (!hit) {  // too high (fewer than k reach it), or too low (-1: too many)
      g.misses++;
      // this row's own k-th largest group maximum: k groups hold an element that reaches it
      // (the row is in cache: a second read, cheaper than the other passes)
      alignas(64) V again[L];
      const V tk = nf.kth(lanes, k);
      tied = exact_compares(tk);
      c = tied ? tie_pass(tk, again)
               : nf.guess(p, len, tk, again, idx, kGuessCap, nullptr, nullptr, 0);
      if (!enough()) return false;  // more than kGuessCap reach it (or are above it)
    }
    g.ties = c < k && gr.neq > 1;
    g.above = c;
    gr.c = c;
    return true;
  }
  // The composite of the row's element p[j].
  template <class D>
  [[gnu::always_inline]] uint64_t guess_comp(const void* p, int32_t j) const {
    typename D::UT bits;
    std::memcpy(&bits, static_cast<const char*>(p) + int64_t(j) * sizeof(bits), sizeof(bits));
    return comp<KT>(static_cast<KT>(static_cast<KT>(D::key(bits)) ^ mask), j);
  }
  // The finish: the k best into buf, sorted.  At least k candidates (gr.c >= k): the k best of
  // the span are among them (each beats every other element), and the sorted network of
  // their composites gives them (4096x1024 float32, k = 8: ~16 candidates, no branch per
  // candidate).  Fewer (the tie pass): the c above t, sorted, then the first k - c equal to t:
  // equal keys, so in index order (descending composites) already.
  template <class V, class D>
  [[gnu::always_inline]] void guess_finish(const V* p, const GuessRow& gr, CT* buf) const {
    const int64_t c = gr.c;
    uint64_t cs[kGuessCap];
    for (int64_t q = 0; q < c; q++) cs[q] = guess_comp<D>(p, gr.idx[q]);
    if (c >= k) {
      net(cs, c, buf);
      return;
    }
    if (c > 0) net(cs, c, buf);
    for (int64_t q = c; q < k; q++) buf[q] = guess_comp<D>(p, gr.eq[q - c]);
  }
  // Two rows' finish (both with at least k candidates), their nets at once (net2).
  template <class V, class D>
  [[gnu::always_inline]] void guess_finish2(const V* pa, const GuessRow& ga, CT* oa,
                                            const V* pb, const GuessRow& gb, CT* ob) const {
    const int64_t c = std::max(ga.c, gb.c);
    uint64_t ca[kGuessCap], cb[kGuessCap];
    for (int64_t q = 0; q < ga.c; q++) ca[q] = guess_comp<D>(pa, ga.idx[q]);
    for (int64_t q = 0; q < gb.c; q++) cb[q] = guess_comp<D>(pb, gb.idx[q]);
    std::fill(ca + ga.c, ca + c, uint64_t(0));  // the shorter list padded with zeros
    std::fill(cb + gb.c, cb + c, uint64_t(0));
    net2(ca, cb, c, oa, ob);
  }

  // A part's rows [b, e) of the guessed pass (float32 / int32 rows of kGuessMin to INT32_MAX
  // elements, 1 < k <= kNetMaxK), in pairs: a row whose read leaves at least k candidates
  // waits for the next such row, and their nets run at once (net2).  A row the guess cannot
  // take goes to scan() (the other passes, with their prefetch of a later short row).  Its
  // own function (noinline): its candidate lists on the stack would slow the caller's other
  // paths.
  template <class V, class D, bool Inc>
  [[gnu::noinline]] void guessed_rows(int64_t b, int64_t e, CT* buf, KT* kb,
                                      const NatFns<V>& nf) const {
    Guess g;
    GuessRow gr[2];
    CT out[2][kNetMaxK];
    int pend = -1;  // the slot of a row waiting for its pair
    int64_t prow = 0;
    for (int64_t r = b; r < e; r++) {
      const V* p = reinterpret_cast<const V*>(row(r));
      const int s = pend == 0 ? 1 : 0;
      if (!g.on() || !guess_read<V, Inc>(p, n, g, nf, gr[s])) {
        const bool short_row = n * esize <= kPrefetchRowMax;
        scan(row(r), 0, n, buf, kb,
             short_row && r + kPrefetchRows < e ? row(r + kPrefetchRows) : nullptr);
        emit(r, buf, k <= kSortedMaxK);
        continue;
      }
      if (gr[s].c < k) {  // the tie pass's rows alone
        guess_finish<V, D>(p, gr[s], out[s]);
        emit(r, out[s], true);
      } else if (pend < 0) {
        pend = s;
        prow = r;
      } else {
        guess_finish2<V, D>(reinterpret_cast<const V*>(row(prow)), gr[pend], out[pend], p, gr[s],
                            out[s]);
        emit(prow, out[pend], true);
        emit(r, out[s], true);
        pend = -1;
      }
    }
    if (pend >= 0) {
      guess_finish<V, D>(reinterpret_cast<const V*>(row(prow)), gr[pend], out[pend]);
      emit(prow, out[pend], true);
    }
  }

  // scan() for float32 and int32 (V) with the native-order pass; D their key.  A block with a
  // NaN takes the key pass (block_keys), like scan().
  template <class V, class D, bool Inc>
  int64_t scan_native(const char* rp, int64_t s0, int64_t s1, CT* buf, KT* kb, const char* pf,
                      const NatFns<V>& nf) const {
    const V* p = reinterpret_cast<const V*>(rp);
    KT* lanes = kb + KB;
    V vl[L];
    int64_t m = 0;
    if (k <= kNetMaxK) std::fill(buf, buf + kNetMaxK, CT(0));  // insert_net's start
    KT floor = 0;
    bool have = false;
    V vfloor = nat_lowest<V>();  // with have: no transformed value below it can enter
    uint64_t words[KB / 64];
    int64_t pos = s0;  // everything before is done
    // An element (its position in the row) into the k best, the floors kept; false when no
    // key can be greater.
    auto offer_at = [&](int64_t j) [[gnu::always_inline]] {
      typename D::UT bits;
      std::memcpy(&bits, p + j, sizeof(bits));
      const KT key = static_cast<KT>(static_cast<KT>(D::key(bits)) ^ mask);
      const KT before = floor;
      if (!offer(buf, m, key, j, floor, have)) return false;
      if (have && floor != before) vfloor = native_floor<V, Inc>(p, buf);
      return true;
    };
    // What a value must reach to be offered: the bound, or the floor once that is higher.
    const auto threshold = [&](V bound) { return have && vfloor > bound ? vfloor : bound; };
    // The second pass over [b, b + len), whose words' maxima wm the first pass wrote (see
    // nat_lanes): only the words whose maximum reaches the threshold are compared, in order,
    // each with the threshold as it has risen (32x50257, k = 50: about 52 of 786 words).  pf
    // (unless null): the same span of a later row, prefetched up to each visited word as the
    // pass goes, the rest at the end.  False when no key can be greater.
    auto words_pass = [&](int64_t b, int64_t len, const V* wm, V bound) {
      const int64_t nw = (len + 63) / 64;
      int64_t fetched = 0;  // words of pf prefetched
      const auto fetch_to = [&](int64_t w) {
        for (; pf && fetched < w; fetched++) prefetch_word(pf + (b + 64 * fetched) * sizeof(V));
      };
      for (int64_t w0 = 0; w0 < nw; w0 += 64) {
        uint64_t sel;
        nf.masks(wm + w0, std::min<int64_t>(64, nw - w0), threshold(bound), &sel, nullptr);
        for (; sel; sel &= sel - 1) {
          const int64_t w = w0 + __builtin_ctzll(sel);
          const V t = threshold(bound);
          if (nat_tr<V, Inc>(wm[w]) < t) continue;  // the threshold rose past it
          fetch_to(w + 1);
          uint64_t bits;
          nf.masks(p + b + 64 * w, std::min<int64_t>(64, len - 64 * w), t, &bits, nullptr);
          for (; bits; bits &= bits - 1)
            if (!offer_at(b + 64 * w + __builtin_ctzll(bits))) return false;
        }
      }
      fetch_to(nw);
      return true;
    };
    // A span of several blocks that fits in cache: first every block's L group maxima and every
    // word's maximum (one read); the k-th largest group maximum bounds the k-th best of the
    // span (k groups hold a value that large), so that the second pass visits about k words
    // and offers little more than k candidates instead of ~k ln(n / k) (32x50257, k = 50: ~53
    // instead of ~420 a row).  The second read is from cache.  Only for k > kNetMaxK, whose
    // insertions cost enough to pay for it (M20 in docs/benchmarks.md, "Measured choices").
    // A span of one block (at most KB) with k >= len / 32 takes the same bound from groups of
    // four (the L groups of every word): about a third of the candidates, faster from k = 32
    // on, slower below (M20).  Not with a NaN (the key pass decides those).
    static_assert(kTwoPassMax / KB * L + kTwoPassMax / 64 <= KB + L,
                  "the group and word maxima fit in the key block");
    static_assert(KB / 64 * L <= kTwoPassMax / KB * L, "a block's groups of four fit too");
    bool bounded = false;
    const int64_t sb = s1 - s0 > KB ? KB : 64;  // the groups' block
    if (k > kNetMaxK && s1 - s0 <= kTwoPassMax && (s1 - s0 > KB || 32 * k >= s1 - s0) &&
        (s1 - s0 + sb - 1) / sb * L >= k) {
      V* g = reinterpret_cast<V*>(kb);
      V* wm = g + kTwoPassMax / KB * L;
      int64_t ng = 0;
      bool ok = true;
      const bool by_words = s1 - s0 >= kWordPassMin;
      for (int64_t s = s0; s < s1 && ok; s += sb, ng += L) {
        const int64_t len = s1 - s < sb ? s1 - s : sb;
        ok = by_words ? nf.lanes_w(p + s, len, g + ng, wm + (s - s0) / 64)
                      : nf.lanes(p + s, len, g + ng, nullptr);
      }
      if (ok) {
        // One block: the sample's bound is enough (the selection that tightens it costs more
        // than the candidates it saves there, not on longer spans: M21 in docs/benchmarks.md).
        const V bound = kth_largest(g, ng, k, /*exact=*/s1 - s0 > KB);
        if (by_words) {
          if (!words_pass(s0, s1 - s0, wm, bound)) return m;
          pos = s1;
        } else {
          vfloor = bound;  // the filtering pass below, from s0
        }
        bounded = true;
      }
    }
    // Until the k best so far are known: blocks, their bound and candidate masks.
    for (int64_t s = pos; s < s1 && !have && !bounded; s += KB) {
      const int64_t len = s1 - s < KB ? s1 - s : KB;
      pos = s + len;
      if (nf.lanes(p + s, len, vl, nullptr)) {
        V bound = nat_lowest<V>();
        if (k <= L && len >= L) bound = nf.kth(vl, k);
        // the masks a chunk at a time: one word without a bound, else kChunk
        for (int64_t c = 0, cl; c < len; c += cl) {
          cl = std::min(len - c, bound != nat_lowest<V>() ? kChunk : int64_t(64));
          nf.masks(p + s + c, cl, threshold(bound), words,
                   pf ? pf + (s + c) * sizeof(V) : nullptr);
          for (int64_t w = 0; w * 64 < cl; w++)
            for (uint64_t b = words[w]; b; b &= b - 1)
              if (!offer_at(s + c + w * 64 + __builtin_ctzll(b))) return m;
          if (have) {  // the rest of the row by the filtering pass
            pos = s + c + cl;
            break;
          }
        }
        continue;
      }
      // a NaN in the block: its keys
      kf(rp, s, len, mask, kb, lanes);
      const int64_t nw = (len + 63) / 64;
      if (len % 64) std::fill(kb + len, kb + nw * 64, KT(0));
      mf(kb, nw * 64, KT(0), words);
      if (len % 64) words[nw - 1] &= (uint64_t(1) << (len % 64)) - 1;
      for (int64_t w = 0; w < nw; w++) {
        for (uint64_t b = words[w]; b; b &= b - 1) {
          const int64_t j = s + w * 64 + __builtin_ctzll(b);
          const KT before = floor;
          if (!offer(buf, m, kb[j - s], j, floor, have)) return m;
          if (have && floor != before) vfloor = native_floor<V, Inc>(p, buf);
        }
      }
    }
    // Then one filtering pass: vector compares against the floor; the rare candidates (and
    // any NaN, whose key decides) are offered.
    int32_t idx[64 + 16];
    while (pos < s1) {
      int64_t nc = 0;
      pos = nf.next(p, pos, s1, vfloor, idx, &nc, pf ? pf - rp : 0);
      for (int64_t q = 0; q < nc; q++)
        if (!offer_at(idx[q])) return m;
    }
    if (m > k) select_k(buf, m, k);
    return m < k ? m : k;
  }

  // Sort the k winners of row r (in buf; `sorted`: they already are) and write them: values
  // copied from the row at the index, indices in the index dtype, at [r / inner, j, r % inner]
  // of the outputs.
  void emit(int64_t r, CT* buf, bool sorted) const {
    const int64_t o0 = inner == 1 ? r * k : (r / inner) * k * inner + r % inner;
    if (!sorted) sort_desc(buf, k);
    // one loop per value size and index width (int32 and uint32 indices share their bits)
    if (index_dtype == ScalarType::Int || index_dtype == ScalarType::UInt32)
      emit_sized<uint32_t>(row(r), buf, o0);
    else
      emit_sized<uint64_t>(row(r), buf, o0);
  }
  template <class IT>
  void emit_sized(const char* rp, const CT* buf, int64_t o0) const {
    switch (esize) {
      case 1: return emit_as<uint8_t, IT>(rp, buf, o0);
      case 2: return emit_as<uint16_t, IT>(rp, buf, o0);
      case 4: return emit_as<uint32_t, IT>(rp, buf, o0);
      default: return emit_as<uint64_t, IT>(rp, buf, o0);
    }
  }
  template <class VT, class IT>
  void emit_as(const char* rp, const CT* buf, int64_t o0) const {
    VT* ov = reinterpret_cast<VT*>(out_v);
    IT* oi = static_cast<IT*>(out_i);
    const int64_t kk = k, step = inner;
    for (int64_t j = 0; j < kk; j++) {
      const int64_t i = index_of<KT>(buf[j]);
      const int64_t o = o0 + j * step;
      std::memcpy(ov + o, rp + i * static_cast<int64_t>(sizeof(VT)), sizeof(VT));
      oi[o] = static_cast<IT>(i);
    }
  }

  // Every row of [0, rows): spread over the threads, or, with fewer rows than threads, split
  // into segments whose candidates are merged.
  void run(int64_t rows) {
    const int64_t threads = parts_for(kMaxThreads, 1);  // torch's thread count, capped
    int64_t segs = std::min(n / kSegMin, (threads + rows - 1) / rows);
    if (rows < threads && segs >= 2 && k < n) {
      // A segment yields at most min(k, its length) candidates.
      const int64_t longest = (n + segs - 1) / segs;
      const int64_t slot = std::min(k, longest);
      const int64_t tasks = rows * segs;  // < threads + rows
      auto cand = allocate<CT>(tasks * slot, "top_k1's segment candidates");
      auto cnt = allocate<int64_t>(tasks, "top_k1's segment counts");
      const int parts = parts_for(tasks, 1);
      Scratch sc(*this, parts);
      // task t: row t / segs, segment t % segs
      parallel_parts(tasks, parts, [&](int64_t b, int64_t e, int part) {
        CT* buf = sc.buf[part].get();
        KT* kb = sc.kb[part].get();
        for (int64_t t = b; t < e; t++) {
          int64_t r = t / segs, g = t % segs;
          int64_t s0 = n * g / segs, s1 = n * (g + 1) / segs;
          int64_t m = scan(row(r), s0, s1, buf, kb);
          std::copy(buf, buf + m, cand.get() + t * slot);
          cnt[t] = m;
        }
      });
      // merge: the k best of each row's (at most segs * slot) candidates
      parallel_parts(rows, parts_for(rows, 1), [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
          CT* base = cand.get() + r * segs * slot;
          int64_t m = 0;
          for (int64_t g = 0; g < segs; g++) {  // compact (a short segment has < k)
            int64_t cn = cnt[r * segs + g];
            std::memmove(base + m, base + g * slot, static_cast<size_t>(cn) * sizeof(CT));
            m += cn;
          }
          if (m > k) select_k(base, m, k);
          emit(r, base, false);
        }
      });
      return;
    }
    // a row costs ~n (k == 1) to ~4n (k > 1, short rows) element-steps, kStepGrain's unit
    const int64_t work = k == 1 ? n : 4 * n;
    const int parts = parts_for(rows, (kStepGrain + work - 1) / work);
    Scratch sc(*this, parts);
    parallel_parts(rows, parts, [&](int64_t b, int64_t e, int part) {
      CT* buf = sc.buf[part].get();
      KT* kb = sc.kb[part].get();
      // This part's rows, in order, guess their threshold from the row before (guessed_rows):
      // its first row has none and reads its data twice (the guess pass, then the others),
      // which pays when the row is short, or over several rows that fit in L2 (longer rows
      // are as fast without: M22 in docs/benchmarks.md, "Measured choices").
      const bool guessing =
          n * esize <= kPrefetchRowMax || (e - b >= 8 && n * esize <= kGuessRowMax);
      if constexpr (std::is_same_v<CT, uint64_t>)
        if (guessing && native != ScalarType::Undefined && k > 1 && k <= kNetMaxK &&
            n >= kGuessMin && n <= INT32_MAX) {
          const bool inc = mask != 0;
          if (native == ScalarType::Float)
            inc ? guessed_rows<float, KeyF32, true>(b, e, buf, kb, nat_f)
                : guessed_rows<float, KeyF32, false>(b, e, buf, kb, nat_f);
          else
            inc ? guessed_rows<int32_t, KeyI32, true>(b, e, buf, kb, nat_i)
                : guessed_rows<int32_t, KeyI32, false>(b, e, buf, kb, nat_i);
          return;
        }
      for (int64_t r = b; r < e; r++) {
        // a short row: fetch a later one while this one's candidates are worked on (the
        // hardware prefetcher alone stays too close), so that its pass reads from cache
        const bool short_row = n * esize <= kPrefetchRowMax;
        if (short_row && r + 1 < e && (native == ScalarType::Undefined || k == 1))
          for (int64_t o = 0; o < n * esize; o += 64) __builtin_prefetch(row(r + 1) + o);
        scan(row(r), 0, n, buf, kb,
             short_row && r + kPrefetchRows < e ? row(r + kPrefetchRows) : nullptr);
        emit(r, buf, k <= kSortedMaxK);
      }
    });
  }
};

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
