// top_k1_base.h: part of the top_k1 CPU kernel: the constants of the passes and the AVX-512
// operations gcc 12 needs spelled out. Included only by top_k1_keys.h; the parts form one
// translation unit with top_k1.cpp (whose header comment describes the whole kernel), in one
// anonymous namespace, so the compiler sees and inlines across them as it did when they were one
// file.
#pragma once
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

}  // namespace
}  // namespace tdo
