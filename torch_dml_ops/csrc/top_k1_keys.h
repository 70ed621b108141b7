// top_k1_keys.h: part of the top_k1 CPU kernel: keys: every dtype's order-preserving unsigned key,
// and the candidate masks over a block of keys. Included only by top_k1_native.h; the parts form
// one translation unit with top_k1.cpp (whose header comment describes the whole kernel), in one
// anonymous namespace, so the compiler sees and inlines across them as it did when they were one
// file.
#pragma once
#include "top_k1_base.h"

namespace tdo {
namespace {

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

}  // namespace
}  // namespace tdo
