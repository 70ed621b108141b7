/* top_k1: DirectML TopK1 (a stable top-k) on the CPU.
 *
 * Every value maps to an order-preserving unsigned key (larger key = better, in both directions:
 * "increasing" inverts the key), and every element to a composite (key, MAXIDX - index), so that
 * the lower index wins among equal keys and all composites of a row are distinct: any selection
 * or sort on composites is stable.  <= 32-bit dtypes use a 32-bit key in a uint64 composite (rows
 * shorter than 2**32), 64-bit dtypes a 64-bit key in an unsigned __int128 composite.  Unsigned
 * integers (uint64 included) are their own keys: values of 2**63 and above are the largest.
 *
 * Floats: -0.0 is +0.0, every NaN is one key above +inf (NaN greatest, all NaNs equal), then the
 * sign-flip trick.  Signed integers: the sign bit flipped.  Values are copied back from the input
 * at the selected index, so their bits are exact (NaN payloads, -0.0).
 *
 * Per row (or row segment), keys are computed a block at a time, with the max of every 16.
 * k <= SORTED_MAX_K: the k best so far are kept sorted; the k-th one's key is a threshold, and an
 * element is a candidate only if its key is strictly greater (the scan is in index order, so a
 * later equal key never beats an earlier one); 16 keys whose max is not above it are rejected at
 * once, so on most data a candidate (an insertion) is rare.  Larger k: the first `cap` elements
 * go to an unordered buffer; once full, a selection keeps its k best and sets the threshold, and
 * the buffer is re-selected whenever it fills again; the k winners are sorted at the end (k == n:
 * one sort).  k == 1 is a block-wise max.  Rows are spread over threads (cost rule: grain in
 * element-steps, a row counting n for k == 1 and 4n otherwise); rows fewer than the threads are
 * split into segments whose candidates are merged.  Measured (EPYC, 4096 rows of 1024 float32,
 * one thread): k = 32 sorted 28.7 ms vs buffer 37.6 ms; k = 8 12.1 vs 19.8 ms.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef unsigned __int128 u128;

/* Data dtypes, as _native_topk.py numbers them. */
enum { D_F32 = 0, D_F16, D_BF16, D_F64, D_I64, D_I32, D_I16, D_I8, D_U8, D_U16, D_U32, D_BOOL,
       D_U64 };

static int is_wide(int dt) { return dt == D_F64 || dt == D_I64 || dt == D_U64; }

static int elem_size(int dt) {
    switch (dt) {
    case D_F64: case D_I64: case D_U64: return 8;
    case D_F32: case D_I32: case D_U32: return 4;
    case D_F16: case D_BF16: case D_I16: case D_U16: return 2;
    default: return 1;
    }
}

/* Keys are computed a block of KB elements at a time (stays in L1). */
#define KB 256
/* The threshold test rejects this many keys at once. */
#define SUB 16
/* Up to this k the k best so far are kept sorted (insertions are rare and short); above, in an
 * unordered buffer re-selected when full. */
#ifndef SORTED_MAX_K
#define SORTED_MAX_K 32
#endif

/* ---- keys of a block: kb[j] = key(x[s + j]) ^ mask, j < len ---------------------------------- */

typedef uint32_t (*key32_fn)(const void *x, int64_t s, int64_t len, uint32_t mask, uint32_t *kb,
                             uint32_t *sm);
typedef uint64_t (*key64_fn)(const void *x, int64_t s, int64_t len, uint64_t mask, uint64_t *kb,
                             uint64_t *sm);

/* The key loops are the hot ones: compiled for AVX2 as well, picked at load time (ifunc). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TDO_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TDO_CLONES
#endif

/* One element's key.  IEEE binary formats: bits of width W, INF the bit pattern of +inf;
 * branch-free, so the block loops vectorise. */
#define FLOAT_KEY(NAME, UT, KT, W, INF)                                                          \
    static inline KT NAME(UT u) {                                                                \
        const UT sign = (UT)((UT)1 << (W - 1));                                                  \
        UT a = (UT)(u & (UT)~sign);                                                              \
        UT neg = (UT)(0 - (UT)(u >> (W - 1)));           /* all ones when the sign is set */    \
        UT k = (UT)(u ^ (UT)(neg | sign));                                                       \
        k = a > (UT)(INF) ? (UT)~(UT)0 : k;               /* NaN: above +inf */                  \
        k = a == 0 ? sign : k;                            /* -0.0 is +0.0 */                     \
        return (KT)k;                                                                            \
    }
/* Integers: the raw bits, the sign bit flipped for signed types. */
#define INT_KEY(NAME, UT, KT, FLIP)                                                              \
    static inline KT NAME(UT u) { return (KT)(UT)(u ^ (UT)(FLIP)); }

FLOAT_KEY(key1_f32, uint32_t, uint32_t, 32, 0x7f800000u)
FLOAT_KEY(key1_f16, uint16_t, uint32_t, 16, 0x7c00u)
FLOAT_KEY(key1_bf16, uint16_t, uint32_t, 16, 0x7f80u)
FLOAT_KEY(key1_f64, uint64_t, uint64_t, 64, 0x7ff0000000000000ull)
INT_KEY(key1_i32, uint32_t, uint32_t, 0x80000000u)
INT_KEY(key1_i16, uint16_t, uint32_t, 0x8000u)
INT_KEY(key1_i8, uint8_t, uint32_t, 0x80u)
INT_KEY(key1_u32, uint32_t, uint32_t, 0)
INT_KEY(key1_u16, uint16_t, uint32_t, 0)
INT_KEY(key1_u8, uint8_t, uint32_t, 0)
INT_KEY(key1_i64, uint64_t, uint64_t, 0x8000000000000000ull)
INT_KEY(key1_u64, uint64_t, uint64_t, 0)

/* kb[j] = key(x[s + j]) ^ mask for j < len; returns the largest.  With sm, also the largest key
 * of every SUB keys into sm (the threshold test skips such a chunk with one comparison); without
 * (k == 1), a plain max loop. */
#define BLOCK_KEYS(NAME, ONE, UT, KT)                                                            \
    TDO_CLONES static KT NAME(const void *x, int64_t s, int64_t len, KT mask, KT *kb, KT *sm) { \
        const UT *p = (const UT *)x + s;                                                         \
        KT mx = 0;                                                                               \
        if (!sm) {                                                                               \
            for (int64_t j = 0; j < len; j++) {                                                  \
                KT key = ONE(p[j]) ^ mask;                                                       \
                kb[j] = key;                                                                     \
                mx = key > mx ? key : mx;                                                        \
            }                                                                                    \
            return mx;                                                                           \
        }                                                                                        \
        for (int64_t c = 0; c < len; c += SUB) {                                                 \
            int64_t e = c + SUB < len ? c + SUB : len;                                           \
            KT cm = 0;                                                                           \
            for (int64_t j = c; j < e; j++) {                                                    \
                KT key = ONE(p[j]) ^ mask;                                                       \
                kb[j] = key;                                                                     \
                cm = key > cm ? key : cm;                                                        \
            }                                                                                    \
            sm[c / SUB] = cm;                                                                    \
            mx = cm > mx ? cm : mx;                                                              \
        }                                                                                        \
        return mx;                                                                               \
    }

BLOCK_KEYS(keys_f32, key1_f32, uint32_t, uint32_t)
BLOCK_KEYS(keys_f16, key1_f16, uint16_t, uint32_t)
BLOCK_KEYS(keys_bf16, key1_bf16, uint16_t, uint32_t)
BLOCK_KEYS(keys_f64, key1_f64, uint64_t, uint64_t)
BLOCK_KEYS(keys_i32, key1_i32, uint32_t, uint32_t)
BLOCK_KEYS(keys_i16, key1_i16, uint16_t, uint32_t)
BLOCK_KEYS(keys_i8, key1_i8, uint8_t, uint32_t)
BLOCK_KEYS(keys_u32, key1_u32, uint32_t, uint32_t)
BLOCK_KEYS(keys_u16, key1_u16, uint16_t, uint32_t)
BLOCK_KEYS(keys_u8, key1_u8, uint8_t, uint32_t)
BLOCK_KEYS(keys_i64, key1_i64, uint64_t, uint64_t)
BLOCK_KEYS(keys_u64, key1_u64, uint64_t, uint64_t)

static key32_fn key32_for(int dt) {
    switch (dt) {
    case D_F32: return keys_f32;
    case D_F16: return keys_f16;
    case D_BF16: return keys_bf16;
    case D_I32: return keys_i32;
    case D_I16: return keys_i16;
    case D_I8: return keys_i8;
    case D_U32: return keys_u32;
    case D_U16: return keys_u16;
    default: return keys_u8;    /* uint8, bool (its byte) */
    }
}

static key64_fn key64_for(int dt) {
    switch (dt) {
    case D_F64: return keys_f64;
    case D_I64: return keys_i64;
    default: return keys_u64;
    }
}

/* ---- selection, sort and row scan, for both key widths ---------------------------------------
 * SFX: name suffix; KT key type; CT composite type (key in the high half, MAXIDX - index low). */
#define TOPK_IMPL(SFX, KT, CT, KFN)                                                              \
    static inline CT comp_##SFX(KT key, int64_t i) {                                             \
        return ((CT)key << (8 * sizeof(KT))) | (CT)(KT)((KT)~(KT)0 - (KT)i);                   \
    }                                                                                            \
    static inline int64_t index_##SFX(CT c) { return (int64_t)(KT)((KT)~(KT)0 - (KT)c); }     \
    static inline KT key_##SFX(CT c) { return (KT)(c >> (8 * sizeof(KT))); }                    \
                                                                                                 \
    static void insertion_##SFX(CT *a, int64_t n) {                                              \
        for (int64_t i = 1; i < n; i++) {                                                        \
            CT v = a[i];                                                                         \
            int64_t j = i;                                                                       \
            while (j > 0 && a[j - 1] < v) { a[j] = a[j - 1]; j--; }                              \
            a[j] = v;                                                                            \
        }                                                                                        \
    }                                                                                            \
    static void sift_##SFX(CT *a, int64_t i, int64_t n) {   /* min-heap: descending heapsort */ \
        CT v = a[i];                                                                             \
        for (;;) {                                                                               \
            int64_t c = 2 * i + 1;                                                               \
            if (c >= n) break;                                                                   \
            if (c + 1 < n && a[c + 1] < a[c]) c++;                                               \
            if (!(a[c] < v)) break;                                                              \
            a[i] = a[c];                                                                         \
            i = c;                                                                               \
        }                                                                                        \
        a[i] = v;                                                                                \
    }                                                                                            \
    static void heapsort_##SFX(CT *a, int64_t n) {                                               \
        for (int64_t i = n / 2 - 1; i >= 0; i--) sift_##SFX(a, i, n);                            \
        for (int64_t e = n - 1; e > 0; e--) {                                                    \
            CT t = a[0]; a[0] = a[e]; a[e] = t;                                                  \
            sift_##SFX(a, 0, e);                                                                 \
        }                                                                                        \
    }                                                                                            \
    /* Hoare partition around a median of three; returns p: a[<p] >= pivot >= a[>=p]. */        \
    static int64_t partition_##SFX(CT *a, int64_t n) {                                           \
        CT x = a[0], y = a[n / 2], z = a[n - 1], piv;                                            \
        if (x < y) { CT t = x; x = y; y = t; }                                                   \
        piv = z > x ? x : (z < y ? y : z);                                                       \
        int64_t i = -1, j = n;                                                                   \
        for (;;) {                                                                               \
            do i++; while (a[i] > piv);                                                          \
            do j--; while (a[j] < piv);                                                          \
            if (i >= j) return j + 1;                                                            \
            CT t = a[i]; a[i] = a[j]; a[j] = t;                                                  \
        }                                                                                        \
    }                                                                                            \
    /* Descending introsort (composites are distinct: the order is total and stable). */        \
    static void sort_##SFX(CT *a, int64_t n) {                                                   \
        int depth = 0;                                                                           \
        for (int64_t m = n; m > 1; m >>= 1) depth += 2;                                          \
        while (n > 16) {                                                                         \
            if (depth-- == 0) { heapsort_##SFX(a, n); return; }                                 \
            int64_t p = partition_##SFX(a, n);                                                   \
            if (p < n - p) { sort_##SFX(a, p); a += p; n -= p; }                                 \
            else { sort_##SFX(a + p, n - p); n = p; }                                            \
        }                                                                                        \
        insertion_##SFX(a, n);                                                                   \
    }                                                                                            \
    /* Rearrange a[0..n) so that a[0..k) are its k largest (0 < k < n), unordered. */            \
    static void select_##SFX(CT *a, int64_t n, int64_t k) {                                      \
        int depth = 0;                                                                           \
        for (int64_t m = n; m > 1; m >>= 1) depth += 2;                                          \
        int64_t want = k;                                                                        \
        while (n > 16) {                                                                         \
            if (depth-- == 0) break;                                                             \
            int64_t p = partition_##SFX(a, n);                                                   \
            if (p == want) return;                                                               \
            if (p > want) n = p;                                                                 \
            else { a += p; n -= p; want -= p; }                                                  \
        }                                                                                        \
        sort_##SFX(a, n);                                                                        \
    }                                                                                            \
    /* The min of a[0..k): the k-th best, after select. */                                       \
    static CT min_##SFX(const CT *a, int64_t k) {                                                \
        CT m = a[0];                                                                             \
        for (int64_t i = 1; i < k; i++) m = a[i] < m ? a[i] : m;                                 \
        return m;                                                                                \
    }                                                                                            \
    /* The best min(k, n) composites of x[s0, s1) (global indices) into buf[0..m), unordered;  \
     * returns m.  buf holds cap > k entries, kb KB keys. */                                     \
    static int64_t scan_##SFX(const void *x, int64_t s0, int64_t s1, int64_t k, KFN kf,         \
                              KT mask, CT *buf, int64_t cap, KT *kb) {                           \
        int64_t m = 0;                                                                           \
        KT *sm = kb + KB;                                                                        \
        if (k == 1) {                                                                            \
            KT best = 0;                                                                         \
            int64_t bs = -1;                                                                     \
            for (int64_t s = s0; s < s1; s += KB) {                                              \
                int64_t len = s1 - s < KB ? s1 - s : KB;                                         \
                KT bm = kf(x, s, len, mask, kb, NULL);                                           \
                if (bs < 0 || bm > best) { best = bm; bs = s; }  /* first block wins ties */   \
            }                                                                                    \
            if (bs < 0) return 0;                                                                \
            int64_t len = s1 - bs < KB ? s1 - bs : KB;                                           \
            if (bs + KB < s1) kf(x, bs, len, mask, kb, NULL);  /* else still in kb */            \
            int64_t j = 0;                                                                       \
            while (kb[j] != best) j++;                                                           \
            buf[0] = comp_##SFX(best, bs + j);                                                   \
            return 1;                                                                            \
        }                                                                                        \
        KT kt = 0;                                                                               \
        if (k <= SORTED_MAX_K) {                                                                 \
            /* small k: the k best so far kept sorted; a candidate is inserted in place */      \
            for (int64_t s = s0; s < s1; s += KB) {                                              \
                int64_t len = s1 - s < KB ? s1 - s : KB;                                         \
                KT bm = kf(x, s, len, mask, kb, sm);                                             \
                if (m == k && bm <= kt) continue;                                                \
                for (int64_t j = 0; j < len;) {                                                  \
                    int64_t e = (j / SUB + 1) * SUB < len ? (j / SUB + 1) * SUB : len;           \
                    if (m == k && sm[j / SUB] <= kt) { j = e; continue; }                        \
                    for (; j < e; j++) {                                                         \
                        if (m == k && kb[j] <= kt) continue;   /* strictly greater only */      \
                        CT c = comp_##SFX(kb[j], s + j);                                         \
                        int64_t p = m < k ? m++ : k - 1;                                         \
                        while (p > 0 && buf[p - 1] < c) { buf[p] = buf[p - 1]; p--; }           \
                        buf[p] = c;                                                              \
                        if (m == k) kt = key_##SFX(buf[k - 1]);                                  \
                    }                                                                            \
                }                                                                                \
            }                                                                                    \
            return m;                                                                            \
        }                                                                                        \
        int filtering = 0;                                                                       \
        for (int64_t s = s0; s < s1; s += KB) {                                                  \
            int64_t len = s1 - s < KB ? s1 - s : KB;                                             \
            KT bm = kf(x, s, len, mask, kb, sm);                                                 \
            int64_t j = 0;                                                                       \
            if (filtering && bm <= kt) continue;          /* no candidate in the block */      \
            if (!filtering) {                                                                    \
                for (; j < len && m < cap; j++) buf[m++] = comp_##SFX(kb[j], s + j);             \
                if (m < cap) continue;                                                           \
                select_##SFX(buf, m, k);                                                         \
                m = k;                                                                           \
                kt = key_##SFX(min_##SFX(buf, k));                                               \
                filtering = 1;                                                                   \
            }                                                                                    \
            while (j < len) {                                                                    \
                int64_t e = (j / SUB + 1) * SUB < len ? (j / SUB + 1) * SUB : len;               \
                if (sm[j / SUB] <= kt) { j = e; continue; }                                      \
                for (int64_t t = j; t < e; t++) {                                                \
                    /* strictly greater: an equal key later in the row loses to the k-th */     \
                    if (kb[t] > kt) {                                                            \
                        buf[m++] = comp_##SFX(kb[t], s + t);                                     \
                        if (m == cap) {                                                          \
                            select_##SFX(buf, m, k);                                             \
                            m = k;                                                               \
                            kt = key_##SFX(min_##SFX(buf, k));                                   \
                        }                                                                        \
                    }                                                                            \
                }                                                                                \
                j = e;                                                                           \
            }                                                                                    \
        }                                                                                        \
        if (m > k) { select_##SFX(buf, m, k); m = k; }                                          \
        return m;                                                                                \
    }

TOPK_IMPL(32, uint32_t, uint64_t, key32_fn)
TOPK_IMPL(64, uint64_t, u128, key64_fn)

/* ---- driver ----------------------------------------------------------------------------------- */

typedef struct {
    const char *x;
    int dt, esize, wide, idt;
    int64_t rows, n, inner, k, cap, segs;
    int64_t slot;      /* split rows: candidate entries per segment, min(k, longest segment) */
    uint64_t mask;
    char *out_v;
    void *out_i;
    void *cand;        /* split rows: [rows * segs * slot] composites */
    int64_t *cnt;      /* split rows: [rows * segs] candidate counts */
    int failed;
} topk_ctx;

/* Sort the k winners of row r (in buf) and write them: values copied from the row at the index,
 * indices in the requested dtype, at [r / inner, j, r % inner] of the [outer, k, inner] outputs. */
static void emit(topk_ctx *c, int64_t r, void *buf) {
    const int64_t k = c->k, inner = c->inner, es = c->esize;
    const char *row = c->x + r * c->n * es;
    int64_t o0 = (r / inner) * k * inner + r % inner;
    if (c->wide) sort_64((u128 *)buf, k);
    else sort_32((uint64_t *)buf, k);
    for (int64_t j = 0; j < k; j++) {
        int64_t i = c->wide ? index_64(((u128 *)buf)[j]) : index_32(((uint64_t *)buf)[j]);
        int64_t o = o0 + j * inner;
        memcpy(c->out_v + o * es, row + i * es, (size_t)es);
        switch (c->idt) {
        case TDO_I32: ((int32_t *)c->out_i)[o] = (int32_t)i; break;
        case TDO_U32: ((uint32_t *)c->out_i)[o] = (uint32_t)i; break;
        default: ((int64_t *)c->out_i)[o] = i; break;
        }
    }
}

static int64_t scan(topk_ctx *c, const char *row, int64_t s0, int64_t s1, void *buf, void *kb) {
    if (c->wide)
        return scan_64(row, s0, s1, c->k, key64_for(c->dt), c->mask, (u128 *)buf, c->cap,
                       (uint64_t *)kb);
    return scan_32(row, s0, s1, c->k, key32_for(c->dt), (uint32_t)c->mask, (uint64_t *)buf,
                   c->cap, (uint32_t *)kb);
}

static size_t comp_size(const topk_ctx *c) { return c->wide ? sizeof(u128) : sizeof(uint64_t); }

/* A thread's scratch: the candidate buffer and a block of keys with their chunk maxima.  0 (and
 * the call marked failed) when they cannot be allocated. */
static int scratch(topk_ctx *c, void **buf, void **kb) {
    *buf = malloc((size_t)(c->cap + 1) * comp_size(c));
    *kb = malloc((KB + KB / SUB) * sizeof(uint64_t));
    if (*buf && *kb) return 1;
    free(*buf);
    free(*kb);
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
    return 0;
}

/* Whole rows [b, e). */
static void rows_fn(void *p, int64_t b, int64_t e, int tid) {
    topk_ctx *c = (topk_ctx *)p;
    void *buf, *kb;
    (void)tid;
    if (!scratch(c, &buf, &kb)) return;
    for (int64_t r = b; r < e; r++) {
        scan(c, c->x + r * c->n * c->esize, 0, c->n, buf, kb);
        emit(c, r, buf);
    }
    free(buf);
    free(kb);
}

/* Segments [b, e) of the split rows (task t: row t / segs, segment t % segs). */
static void segs_fn(void *p, int64_t b, int64_t e, int tid) {
    topk_ctx *c = (topk_ctx *)p;
    void *buf, *kb;
    (void)tid;
    if (!scratch(c, &buf, &kb)) return;
    const size_t cs = comp_size(c);
    for (int64_t t = b; t < e; t++) {
        int64_t r = t / c->segs, g = t % c->segs;
        int64_t s0 = c->n * g / c->segs, s1 = c->n * (g + 1) / c->segs;
        int64_t m = scan(c, c->x + r * c->n * c->esize, s0, s1, buf, kb);
        memcpy((char *)c->cand + (size_t)t * (size_t)c->slot * cs, buf, (size_t)m * cs);
        c->cnt[t] = m;
    }
    free(buf);
    free(kb);
}

/* Merge the split rows' candidates [b, e): the k best of the (at most segs * slot) candidates. */
static void merge_fn(void *p, int64_t b, int64_t e, int tid) {
    topk_ctx *c = (topk_ctx *)p;
    (void)tid;
    const size_t cs = comp_size(c);
    for (int64_t r = b; r < e; r++) {
        char *base = (char *)c->cand + (size_t)(r * c->segs) * (size_t)c->slot * cs;
        int64_t m = 0;
        for (int64_t g = 0; g < c->segs; g++) {   /* compact (a short segment has < k) */
            int64_t cn = c->cnt[r * c->segs + g];
            memmove(base + (size_t)m * cs, base + (size_t)g * (size_t)c->slot * cs,
                    (size_t)cn * cs);
            m += cn;
        }
        if (m > c->k) {
            if (c->wide) select_64((u128 *)base, m, c->k);
            else select_32((uint64_t *)base, m, c->k);
        }
        emit(c, r, base);
    }
}

/* The k best (largest when `largest`, else smallest) of every row of x ([rows, n], contiguous,
 * dtype dt), sorted, ties by lower index; into out_v / out_i laid out [rows / inner, k, inner]
 * (index dtype idt).  `nthreads`: at most this many threads (and at most TDO_MAX_THREADS, so
 * that an absurd request costs nothing).  `grain`: elements per thread at least; rows fewer
 * than the threads and at least 2 * seg_min long are split into segments of seg_min elements or
 * more, at most as many segments in all as threads (rows * segs < nthreads + rows).
 * `cap_min`: the candidate buffer holds k + max(k, cap_min) (a segment's, at most its length
 * + 1).  Memory: per thread the candidate buffer and a key block; split rows also
 * rows * segs * min(k, longest segment) composites, at most about the input's element count.
 * Returns 0, or -1 when memory ran out; rows of n >= 2**32 with a <= 32-bit dtype are the
 * caller's to refuse. */
TDO_EXPORT int tdo_top_k1(const void *x, int dt, int64_t rows, int64_t n, int64_t inner,
                          int64_t k, int largest, void *out_v, void *out_i, int idt, int nthreads,
                          int64_t grain, int64_t seg_min, int64_t cap_min) {
    if (rows <= 0 || n <= 0 || k <= 0 || k > n || inner <= 0) return 0;
    topk_ctx c;
    memset(&c, 0, sizeof c);
    c.x = (const char *)x;
    c.dt = dt;
    c.esize = elem_size(dt);
    c.wide = is_wide(dt);
    c.idt = idt;
    c.rows = rows;
    c.n = n;
    c.inner = inner;
    c.k = k;
    c.cap = k + (k > cap_min ? k : cap_min);
    if (c.cap > n) c.cap = n + 1;     /* the whole row fits: one selection at the end */
    c.mask = largest ? 0 : ~(uint64_t)0;
    c.out_v = (char *)out_v;
    c.out_i = out_i;
    if (grain < 1) grain = 1;
    if (seg_min < 1) seg_min = 1;
    if (nthreads < 1) nthreads = 1;
    if (nthreads > TDO_MAX_THREADS) nthreads = TDO_MAX_THREADS;   /* tdo_parallel_for's cap */
    int64_t segs = n / seg_min;
    int64_t per_row = (nthreads + rows - 1) / rows;
    if (segs > per_row) segs = per_row;
    if (rows < nthreads && segs >= 2 && k < n) {
        /* A segment yields at most min(k, its length) candidates; its scan buffer never needs
         * more than its length + 1 entries (it then never fills: one selection at the end). */
        const int64_t longest = (n + segs - 1) / segs;
        c.segs = segs;
        c.slot = k < longest ? k : longest;
        if (c.cap > longest + 1) c.cap = longest + 1;
        c.cand = malloc((size_t)(rows * segs) * (size_t)c.slot * comp_size(&c));
        c.cnt = (int64_t *)malloc((size_t)(rows * segs) * sizeof(int64_t));
        if (c.cand && c.cnt) {
            tdo_parallel_for(rows * segs, nthreads, 1, segs_fn, &c);
            if (!c.failed) tdo_parallel_for(rows, nthreads, 1, merge_fn, &c);
        } else {
            c.failed = 1;
        }
        free(c.cand);
        free(c.cnt);
        return c.failed ? -1 : 0;
    }
    /* a row costs ~n (k == 1) to ~4n (selection) element-steps: grain is in element-steps */
    int64_t work = k == 1 ? n : 4 * n;
    int64_t grain_rows = (grain + work - 1) / work;
    tdo_parallel_for(rows, nthreads, grain_rows, rows_fn, &c);
    return c.failed ? -1 : 0;
}
