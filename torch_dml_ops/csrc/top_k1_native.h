// top_k1_native.h: part of the top_k1 CPU kernel: the native-order pass (float32, int32): group
// maxima, bounds and candidate masks in the values' own order. Included only by top_k1_nets.h; the
// parts form one translation unit with top_k1.cpp (whose header comment describes the whole
// kernel), in one anonymous namespace, so the compiler sees and inlines across them as it did when
// they were one file.
#pragma once
#include "top_k1_keys.h"

namespace tdo {
namespace {

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

}  // namespace
}  // namespace tdo
