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
// Per row (or row segment), keys are computed a block at a time, with the max of every 16.
// k <= kSortedMaxK: the k best so far are kept sorted; the k-th one's key is a threshold, and an
// element is a candidate only if its key is strictly greater (the scan is in index order, so a
// later equal key never beats an earlier one); 16 keys whose max is not above it are rejected at
// once, so on most data a candidate (an insertion) is rare.  Larger k: the first `cap` elements
// go to an unordered buffer; once full, a selection keeps its k best and sets the threshold, and
// the buffer is re-selected whenever it fills again; the k winners are sorted at the end (k == n:
// one sort).  k == 1 is a block-wise max.  Rows are spread over torch's threads (cost rule:
// kGrain in element-steps, a row counting n for k == 1 and 4n otherwise); rows fewer than the
// threads are split into segments whose candidates are merged.  Measured (EPYC, 4096 rows of 1024
// float32, one thread): k = 32 sorted 28.7 ms vs buffer 37.6 ms; k = 8 12.1 vs 19.8 ms.
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
#include <memory>
#include <new>
#include <tuple>

namespace tdo {
namespace {

// Work one thread gets at least, in element-steps (a row of n counts n for k == 1, 4n for the
// selections): calls below ~2x this run on the calling thread.
constexpr int64_t kGrain = int64_t(1) << 15;
// When there are fewer rows than threads, rows of at least 2 * kSegMin elements are split into
// segments (>= kSegMin each) whose candidates are merged.
constexpr int64_t kSegMin = int64_t(1) << 15;
// The candidate buffer holds k + max(k, kCapMin) entries (fewer selections for small k).
constexpr int64_t kCapMin = 64;
// Up to this k the k best so far are kept sorted (insertions are rare and short); above, in an
// unordered buffer re-selected when full.
constexpr int64_t kSortedMaxK = 32;
// Rows at least this long take 64-bit keys whatever the dtype (the index half of a 32-bit-key
// composite holds indices below 2**32).
constexpr int64_t kNarrowRowLimit = int64_t(1) << 32;

// Keys are computed a block of KB elements at a time (stays in L1).
constexpr int64_t KB = 256;
// The threshold test rejects this many keys at once.
constexpr int64_t SUB = 16;

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

// kb[j] = key(x[s + j]) ^ mask for j < len; returns the largest.  With sm, also the largest key
// of every SUB keys into sm (the threshold test skips such a chunk with one comparison); without
// (k == 1), a plain max loop.
template <class D, class KT>
[[gnu::always_inline]] inline KT block_keys(const void* x, int64_t s, int64_t len, KT mask,
                                            KT* kb, KT* sm) {
  const typename D::UT* p = static_cast<const typename D::UT*>(x) + s;
  KT mx = 0;
  if (!sm) {
    for (int64_t j = 0; j < len; j++) {
      KT key = static_cast<KT>(D::key(p[j])) ^ mask;
      kb[j] = key;
      mx = key > mx ? key : mx;
    }
    return mx;
  }
  for (int64_t c = 0; c < len; c += SUB) {
    int64_t e = c + SUB < len ? c + SUB : len;
    KT cm = 0;
    for (int64_t j = c; j < e; j++) {
      KT key = static_cast<KT>(D::key(p[j])) ^ mask;
      kb[j] = key;
      cm = key > cm ? key : cm;
    }
    sm[c / SUB] = cm;
    mx = cm > mx ? cm : mx;
  }
  return mx;
}

template <class KT>
using KeyFn = KT (*)(const void* x, int64_t s, int64_t len, KT mask, KT* kb, KT* sm);

// The key loops are the hot ones: compiled for AVX2 as well, picked at load time (ifunc).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TDO_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TDO_CLONES
#endif

#define TDO_KEY_FN(NAME, D, KT)                                                           \
  TDO_CLONES KT NAME(const void* x, int64_t s, int64_t len, KT mask, KT* kb, KT* sm) {    \
    return block_keys<D, KT>(x, s, len, mask, kb, sm);                                    \
  }
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

// The key loop of a <= 32-bit dtype (the caller picks 64-bit keys for the 64-bit dtypes).
KeyFn<uint32_t> key32_for(ScalarType t) {
  switch (t) {
    case ScalarType::Float: return keys32_f32;
    case ScalarType::Half: return keys32_f16;
    case ScalarType::BFloat16: return keys32_bf16;
    case ScalarType::Int: return keys32_i32;
    case ScalarType::Short: return keys32_i16;
    case ScalarType::Char: return keys32_i8;
    case ScalarType::UInt32: return keys32_u32;
    case ScalarType::UInt16: return keys32_u16;
    default: return keys32_u8;  // uint8, bool
  }
}

KeyFn<uint64_t> key64_for(ScalarType t) {
  switch (t) {
    case ScalarType::Double: return keys64_f64;
    case ScalarType::Long: return keys64_i64;
    case ScalarType::UInt64: return keys64_u64;
    case ScalarType::Float: return keys64_f32;
    case ScalarType::Half: return keys64_f16;
    case ScalarType::BFloat16: return keys64_bf16;
    case ScalarType::Int: return keys64_i32;
    case ScalarType::Short: return keys64_i16;
    case ScalarType::Char: return keys64_i8;
    case ScalarType::UInt32: return keys64_u32;
    case ScalarType::UInt16: return keys64_u16;
    default: return keys64_u8;  // uint8, bool
  }
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

template <class KT>
struct TopK {
  using CT = typename Composite<KT>::type;

  // x: [rows, n] contiguous, elements of esize bytes; outputs [rows / inner, k, inner].
  const char* x;
  int64_t esize, n, inner, k;
  int64_t cap;  // candidate buffer entries of the buffered scan (> k)
  KeyFn<KT> kf;
  KT mask;  // 0: largest first; all ones: smallest first
  char* out_v;
  void* out_i;
  ScalarType index_dtype;

  // A parallel part's scratch: the candidate buffer, and a block of keys with their chunk maxima.
  struct Scratch {
    std::vector<std::unique_ptr<CT[]>> buf;
    std::vector<std::unique_ptr<KT[]>> kb;
    Scratch(const TopK& c, int parts) {
      for (int p = 0; p < parts; p++) {
        buf.push_back(allocate<CT>(c.cap + 1, "top_k1's candidate buffer"));
        kb.push_back(allocate<KT>(KB + KB / SUB, "top_k1's key block"));
      }
    }
  };

  const char* row(int64_t r) const { return x + r * n * esize; }

  // The best min(k, s1 - s0) composites of row[s0, s1) (row indices) into buf[0..m), unordered;
  // returns m.  buf holds cap + 1 > k entries, kb KB keys and KB / SUB chunk maxima.
  int64_t scan(const char* rp, int64_t s0, int64_t s1, CT* buf, KT* kb) const {
    int64_t m = 0;
    KT* sm = kb + KB;
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
      int64_t j = 0;
      while (kb[j] != best) j++;
      buf[0] = comp<KT>(best, bs + j);
      return 1;
    }
    KT kt = 0;
    if (k <= kSortedMaxK) {
      // small k: the k best so far kept sorted; a candidate is inserted in place
      for (int64_t s = s0; s < s1; s += KB) {
        int64_t len = s1 - s < KB ? s1 - s : KB;
        KT bm = kf(rp, s, len, mask, kb, sm);
        if (m == k && bm <= kt) continue;
        for (int64_t j = 0; j < len;) {
          int64_t e = (j / SUB + 1) * SUB < len ? (j / SUB + 1) * SUB : len;
          if (m == k && sm[j / SUB] <= kt) {
            j = e;
            continue;
          }
          for (; j < e; j++) {
            if (m == k && kb[j] <= kt) continue;  // strictly greater only
            CT c = comp<KT>(kb[j], s + j);
            int64_t p = m < k ? m++ : k - 1;
            while (p > 0 && buf[p - 1] < c) {
              buf[p] = buf[p - 1];
              p--;
            }
            buf[p] = c;
            if (m == k) kt = key_of<KT>(buf[k - 1]);
          }
        }
      }
      return m;
    }
    bool filtering = false;
    for (int64_t s = s0; s < s1; s += KB) {
      int64_t len = s1 - s < KB ? s1 - s : KB;
      KT bm = kf(rp, s, len, mask, kb, sm);
      int64_t j = 0;
      if (filtering && bm <= kt) continue;  // no candidate in the block
      if (!filtering) {
        for (; j < len && m < cap; j++) buf[m++] = comp<KT>(kb[j], s + j);
        if (m < cap) continue;
        select_k(buf, m, k);
        m = k;
        kt = key_of<KT>(min_of(buf, k));
        filtering = true;
      }
      while (j < len) {
        int64_t e = (j / SUB + 1) * SUB < len ? (j / SUB + 1) * SUB : len;
        if (sm[j / SUB] <= kt) {
          j = e;
          continue;
        }
        for (int64_t t = j; t < e; t++) {
          // strictly greater: an equal key later in the row loses to the k-th
          if (kb[t] > kt) {
            buf[m++] = comp<KT>(kb[t], s + t);
            if (m == cap) {
              select_k(buf, m, k);
              m = k;
              kt = key_of<KT>(min_of(buf, k));
            }
          }
        }
        j = e;
      }
    }
    if (m > k) {
      select_k(buf, m, k);
      m = k;
    }
    return m;
  }

  // Sort the k winners of row r (in buf) and write them: values copied from the row at the
  // index, indices in the index dtype, at [r / inner, j, r % inner] of the outputs.
  void emit(int64_t r, CT* buf) const {
    const char* rp = row(r);
    const int64_t o0 = (r / inner) * k * inner + r % inner;
    sort_desc(buf, k);
    for (int64_t j = 0; j < k; j++) {
      int64_t i = index_of<KT>(buf[j]);
      int64_t o = o0 + j * inner;
      std::memcpy(out_v + o * esize, rp + i * esize, static_cast<size_t>(esize));
      switch (index_dtype) {
        case ScalarType::Int: static_cast<int32_t*>(out_i)[o] = static_cast<int32_t>(i); break;
        case ScalarType::UInt32:
          static_cast<uint32_t*>(out_i)[o] = static_cast<uint32_t>(i);
          break;
        default: static_cast<int64_t*>(out_i)[o] = i; break;
      }
    }
  }

  // Every row of [0, rows): spread over the threads, or, with fewer rows than threads, split
  // into segments whose candidates are merged.
  void run(int64_t rows) {
    const int64_t threads = parts_for(kMaxThreads, 1);  // torch's thread count, capped
    int64_t segs = std::min(n / kSegMin, (threads + rows - 1) / rows);
    if (rows < threads && segs >= 2 && k < n) {
      // A segment yields at most min(k, its length) candidates; its scan buffer never needs
      // more than its length + 1 entries (it then never fills: one selection at the end).
      const int64_t longest = (n + segs - 1) / segs;
      const int64_t slot = std::min(k, longest);
      cap = std::min(cap, longest + 1);
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
          emit(r, base);
        }
      });
      return;
    }
    // a row costs ~n (k == 1) to ~4n (selection) element-steps: kGrain is in element-steps
    const int64_t work = k == 1 ? n : 4 * n;
    const int parts = parts_for(rows, (kGrain + work - 1) / work);
    Scratch sc(*this, parts);
    parallel_parts(rows, parts, [&](int64_t b, int64_t e, int part) {
      CT* buf = sc.buf[part].get();
      KT* kb = sc.kb[part].get();
      for (int64_t r = b; r < e; r++) {
        scan(row(r), 0, n, buf, kb);
        emit(r, buf);
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
  c.cap = k + std::max(k, kCapMin);
  if (c.cap > n) c.cap = n + 1;  // the whole row fits: one selection at the end
  c.kf = kf;
  c.mask = largest ? KT(0) : static_cast<KT>(~KT(0));
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

// The Python layer's _check_top_k1, rule for rule and message for message; returns the axis,
// made non-negative.
int64_t check_args(const Tensor& input, int64_t k, int64_t axis, const std::string& direction,
                   ScalarType index_dtype, std::string_view feature_level) {
  constexpr const char* op = "top_k1";
  const Level level = parse_level(feature_level);
  if (direction != "decreasing" && direction != "increasing")
    value_error(op, ": direction (AxisDirection) must be 'decreasing' or 'increasing', got ",
                py_repr(direction));
  check_data_dtype(op, "InputTensor", input.scalar_type(), level);
  int64_t top;  // the largest index the index dtype holds
  switch (index_dtype) {
    case ScalarType::Long: top = INT64_MAX; break;
    case ScalarType::Int: top = INT32_MAX; break;
    case ScalarType::UInt32: top = UINT32_MAX; break;
    default:
      value_error(op, ": index_dtype (OutputIndexTensor) must be one of int64, int32, uint32, got ",
                  dtype_name(index_dtype));
  }
  const Shape shape = shape_of(input);
  const int64_t r = static_cast<int64_t>(shape.size());
  if (r < 1)
    value_error(op, ": InputTensor must have at least 1 dimension, got shape ", py_tuple(shape));
  // spec DML_TOP_K1.md Axis: "must be less than the DimensionCount of the InputTensor"
  // (negative axes count from the end, as in torch).
  if (!(-r <= axis && axis < r))
    index_error(op, ": Axis ", axis, " is out of range for InputTensor with ", r,
                " dimensions (expected in [", -r, ", ", r - 1, "])");
  const int64_t ax = axis < 0 ? axis + r : axis;
  const int64_t n = shape[ax];
  // spec DML_TOP_K1.md K: greater than 0; spec README 4: K equal to the size is allowed.
  if (!(1 <= k && k <= n))
    value_error(op, ": K must be in [1, ", n, "] (InputTensor size along Axis ", ax, "), got ", k);
  // Every index along the axis must be representable in the OutputIndexTensor's type.
  if (n - 1 > top)
    value_error(op, ": InputTensor has size ", n, " along Axis ", ax,
                ", but OutputIndexTensor's type ", dtype_name(index_dtype),
                " holds indices up to ", top,
                "; use index_dtype=torch.int64 for an axis longer than ", top + 1);
  if (level != Level::Permissive) {
    check_natural_ranks(op, {"InputTensor"}, {r}, level, Level::L3_1);
    if (index_dtype != ScalarType::UInt32)
      value_error(op, ": OutputIndexTensor is UINT32 in DirectML, but index_dtype is ",
                  dtype_name(index_dtype), " at ", level_name(level),
                  "; pass index_dtype=torch.uint32");
  }
  return ax;
}

}  // namespace

// The stable top-k of `input` along `axis`: (values, indices), contiguous, input's shape with k
// along the axis; index_dtype None means int64.
std::tuple<Tensor, Tensor> top_k1(Tensor input, int64_t k, int64_t axis, StrArg direction,
                                  std::optional<ScalarType> index_dtype,
                                  StrArg feature_level) {
  constexpr const char* op = "top_k1";
  const ScalarType idt = index_dtype.value_or(ScalarType::Long);
  const int64_t ax = check_args(input, k, axis, direction.value, idt, feature_level.value);
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
  const bool largest = direction.value == "decreasing";
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
