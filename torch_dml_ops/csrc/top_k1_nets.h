// top_k1_nets.h: part of the top_k1 CPU kernel: composites (key, MAXIDX - index), the insertion
// networks and the final selection and sort. Included only by top_k1_plan.h; the parts form one
// translation unit with top_k1.cpp (whose header comment describes the whole kernel), in one
// anonymous namespace, so the compiler sees and inlines across them as it did when they were one
// file.
#pragma once
#include "top_k1_native.h"

namespace tdo {
namespace {

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

}  // namespace
}  // namespace tdo
