/* Native CPU kernels of gather_nd and scatter_nd (called through ctypes, see
 * torch_dml_ops/_native_gather_scatter.py).
 *
 * Data are moved as raw bytes; the index tuples are read, wrapped (signed dtypes) and
 * range-checked in the same loop that moves the data, one pass over the indices instead of the
 * portable path's chain of torch ops.  A bad tuple is never dereferenced: its flat position
 * (tuple * k + column) is recorded (the smallest wins) and the tuple is skipped.
 *
 * Scatter is two passes in one call: the first checks every index and writes the linear row of
 * every tuple (before anything caller-visible is written), the second writes.  The apply
 * partitions the DESTINATION rows among threads; each thread scans all tuples in index order and
 * applies those landing in its rows, so every row is written by one thread, in index order: the
 * last duplicate wins, rows never mix, reductions accumulate in index order (as torch's
 * index_add_ / scatter_reduce_ do on the CPU), and the result does not depend on the thread
 * count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TDO_X86_AVX2 1
#endif

/* How far ahead (in tuples) source rows are prefetched for small slices. */
#define TDO_BLOCK 32

#define TDO_INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------------------------------------ */
/* Index tuples -> row numbers                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* The row of tuple t (in [0, batch * prod(sizes)) with its batch offset added), or -1 with
 * *bad_col set to the first out-of-range column. */
TDO_INLINE int64_t tuple_row(const void *idx, const int dt, int64_t t, int k, const int64_t *sizes,
                             const int64_t *strides, int64_t base, int *bad_col) {
    const int is_signed = dt == TDO_I32 || dt == TDO_I64;
    int64_t row = base;
    for (int j = 0; j < k; j++) {
        int64_t v = tdo_wrap_check(tdo_load_index(idx, dt, t * k + j), sizes[j], is_signed);
        if (v < 0) {
            *bad_col = j;
            return -1;
        }
        row += v * strides[j];
    }
    return row;
}

/* ------------------------------------------------------------------------------------------ */
/* gather_nd                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    char *out;
    const char *src;
    const void *idx;
    int dt, k, copy;
    int64_t per_batch, rows_per_batch, row_bytes;
    const int64_t *sizes, *strides;
    int64_t first_bad;
    int stream;
} gather_ctx;

TDO_INLINE void copy_row(char *dst, const char *src, const int64_t rb) {
    /* constant rb: memcpy becomes one load and store */
    memcpy(dst, src, (size_t)rb);
}

TDO_INLINE void gather_range(gather_ctx *c, int64_t begin, int64_t end, const int dt,
                             const int64_t rb) {
    const int k = c->k;
    const int64_t pb = c->per_batch;
    int64_t b = begin / pb, r = begin % pb;   /* batch and position in it, advanced per tuple */
    int64_t rows[TDO_BLOCK];
    for (int64_t t0 = begin; t0 < end; t0 += TDO_BLOCK) {
        const int64_t n = end - t0 < TDO_BLOCK ? end - t0 : TDO_BLOCK;
        /* Resolve a block of rows first, prefetching each source row: the block's cache misses
         * are then in flight together while the copies below wait for the first ones. */
        for (int64_t i = 0; i < n; i++) {
            int bad_col = 0;
            int64_t row = tuple_row(c->idx, dt, t0 + i, k, c->sizes, c->strides,
                                    b * c->rows_per_batch, &bad_col);
            if (row < 0) {
                /* every later tuple of this range has a larger position: stop here */
                tdo_record_error(&c->first_bad, (t0 + i) * k + bad_col);
                for (int64_t j = 0; j < i; j++)
                    if (c->copy) copy_row(c->out + (t0 + j) * rb, c->src + rows[j] * rb, rb);
                return;
            }
            rows[i] = row;
            if (c->copy && rb <= 64) __builtin_prefetch(c->src + row * rb);
            if (++r == pb) {
                r = 0;
                b++;
            }
        }
        if (c->copy)
            for (int64_t i = 0; i < n; i++)
                copy_row(c->out + (t0 + i) * rb, c->src + rows[i] * rb, rb);
    }
}

/* Copy one long row with non-temporal stores (dst 16-byte aligned, rb a multiple of 16): a large
 * output is not read back soon, and streaming stores skip reading its lines into the cache
 * first (a third of the memory traffic of a plain copy). */
TDO_INLINE void stream_row(char *dst, const char *src, int64_t rb) {
#ifdef __SSE2__
    for (int64_t o = 0; o < rb; o += 16)
        _mm_stream_si128((__m128i *)(dst + o), _mm_loadu_si128((const __m128i *)(src + o)));
#else
    memcpy(dst, src, (size_t)rb);
#endif
}

/* Copy one row of a generic length: four loads, then four stores, so that a load is never
 * queued behind a store to the same 4 KiB offset (the gathered rows and the output rows are
 * equally aligned); AVX2 where the CPU has it.  Measured against memcpy per row: 1.25-1.9x
 * faster on 256-byte and 1 KiB rows. */
#ifdef TDO_X86_AVX2
__attribute__((target("avx2"))) static void copy_row_avx2(char *dst, const char *src,
                                                         int64_t rb) {
    int64_t o = 0;
    for (; o + 128 <= rb; o += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(src + o));
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + o + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(src + o + 64));
        __m256i d = _mm256_loadu_si256((const __m256i *)(src + o + 96));
        _mm256_storeu_si256((__m256i *)(dst + o), a);
        _mm256_storeu_si256((__m256i *)(dst + o + 32), b);
        _mm256_storeu_si256((__m256i *)(dst + o + 64), c);
        _mm256_storeu_si256((__m256i *)(dst + o + 96), d);
    }
    if (o < rb) memcpy(dst + o, src + o, (size_t)(rb - o));
}
#endif

static void copy_row_sse(char *dst, const char *src, int64_t rb) {
    int64_t o = 0;
#ifdef __SSE2__
    for (; o + 64 <= rb; o += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + o));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + o + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + o + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + o + 48));
        _mm_storeu_si128((__m128i *)(dst + o), a);
        _mm_storeu_si128((__m128i *)(dst + o + 16), b);
        _mm_storeu_si128((__m128i *)(dst + o + 32), c);
        _mm_storeu_si128((__m128i *)(dst + o + 48), d);
    }
#endif
    if (o < rb) memcpy(dst + o, src + o, (size_t)(rb - o));
}

typedef void (*row_copy_fn)(char *dst, const char *src, int64_t rb);

static row_copy_fn pick_row_copy(void) {
#ifdef TDO_X86_AVX2
    if (__builtin_cpu_supports("avx2")) return copy_row_avx2;
#endif
    return copy_row_sse;
}

/* Generic slice length (inlined per index dtype).  The next tuple's row is resolved (and
 * checked) before the current one is copied, so its first lines can be prefetched. */
TDO_INLINE void gather_range_any(gather_ctx *c, int64_t begin, int64_t end, const int dt) {
    const row_copy_fn copy = pick_row_copy();
    const int k = c->k;
    const int64_t rb = c->row_bytes, pb = c->per_batch;
    int64_t b = begin / pb, r = begin % pb;
    const int stream = c->stream && rb % 16 == 0 && ((uintptr_t)c->out % 16) == 0;
    int64_t row = 0;
    for (int64_t t = begin; t < end; t++) {
        int bad_col = 0;
        int64_t next = tuple_row(c->idx, dt, t, k, c->sizes, c->strides, b * c->rows_per_batch,
                                 &bad_col);
        if (next < 0) {
            tdo_record_error(&c->first_bad, t * k + bad_col);
            break;
        }
        if (c->copy) {
            /* The next row's first lines are fetched while this one is copied: the random jump
             * to a new row is what the hardware prefetcher cannot guess (measured 1.2-1.5x
             * faster on 1 KiB rows, with streaming stores and without). */
            __builtin_prefetch(c->src + next * rb);
            __builtin_prefetch(c->src + next * rb + 64);
            if (t > begin) {
                if (stream) stream_row(c->out + (t - 1) * rb, c->src + row * rb, rb);
                else copy(c->out + (t - 1) * rb, c->src + row * rb, rb);
            }
        }
        row = next;
        if (++r == pb) {
            r = 0;
            b++;
        }
        if (t == end - 1 && c->copy) {
            if (stream) stream_row(c->out + t * rb, c->src + row * rb, rb);
            else copy(c->out + t * rb, c->src + row * rb, rb);
        }
    }
#ifdef __SSE2__
    if (stream) _mm_sfence();   /* streaming stores visible before the caller reads them */
#endif
}

#define TDO_GATHER_DT(DT)                                                                      \
    switch (c->copy ? c->row_bytes : 0) {                                                      \
    case 0: gather_range(c, begin, end, DT, 0); break;                                         \
    case 1: gather_range(c, begin, end, DT, 1); break;                                         \
    case 2: gather_range(c, begin, end, DT, 2); break;                                         \
    case 4: gather_range(c, begin, end, DT, 4); break;                                         \
    case 8: gather_range(c, begin, end, DT, 8); break;                                         \
    case 16: gather_range(c, begin, end, DT, 16); break;                                       \
    default: gather_range_any(c, begin, end, DT); break;                                       \
    }

static void gather_task(void *ctx, int64_t begin, int64_t end, int tid) {
    (void)tid;
    gather_ctx *c = (gather_ctx *)ctx;
    switch (c->dt) {
    case TDO_I32: TDO_GATHER_DT(TDO_I32); break;
    case TDO_U32: TDO_GATHER_DT(TDO_U32); break;
    case TDO_U64: TDO_GATHER_DT(TDO_U64); break;
    default: TDO_GATHER_DT(TDO_I64); break;
    }
}

/* out[t] = src row of tuple t, for t in [0, n_tuples); rows of row_bytes bytes.
 * The arguments come packed in one int64 array (one ctypes argument instead of thirteen: the
 * per-argument conversions cost more than a small gather):
 *   a = [out, src, idx, idx_dtype, n_tuples, k, per_batch, rows_per_batch, row_bytes, copy,
 *        nthreads, grain, k sizes..., k strides (in rows)...]
 * Tuple t belongs to batch t / per_batch, whose rows start at batch * rows_per_batch.  copy = 0:
 * check only (reads only the indices).  Returns the smallest flat bad position, or TDO_NO_ERROR;
 * tuples at or after a bad one (in its thread's range) may be left unwritten. */
TDO_EXPORT int64_t tdo_gather_nd(const int64_t *a) {
    const int k = (int)a[5];
    gather_ctx c = {(char *)(intptr_t)a[0], (const char *)(intptr_t)a[1],
                    (const void *)(intptr_t)a[2], (int)a[3], k, (int)a[9], a[6], a[7], a[8],
                    a + 12, a + 12 + k, TDO_NO_ERROR, 0};
    /* streaming stores for outputs well beyond the last-level cache */
    c.stream = c.copy && a[4] * a[8] >= ((int64_t)16 << 20);
    if (a[4] <= 0 || c.per_batch <= 0) return TDO_NO_ERROR;
    tdo_parallel_for(a[4], (int)a[10], a[11], gather_task, &c);
    return c.first_bad;
}

/* ------------------------------------------------------------------------------------------ */
/* scatter_nd: check pass                                                                      */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    const void *idx;
    int dt, k;
    const int64_t *sizes, *strides;
    int64_t *rows;
    int64_t first_bad;
} rows_ctx;

TDO_INLINE void rows_range(rows_ctx *c, int64_t begin, int64_t end, const int dt) {
    for (int64_t t = begin; t < end; t++) {
        int bad_col = 0;
        int64_t row = tuple_row(c->idx, dt, t, c->k, c->sizes, c->strides, 0, &bad_col);
        if (row < 0) {
            tdo_record_error(&c->first_bad, t * c->k + bad_col);
            return;
        }
        c->rows[t] = row;
    }
}

static void rows_task(void *ctx, int64_t begin, int64_t end, int tid) {
    (void)tid;
    rows_ctx *c = (rows_ctx *)ctx;
    switch (c->dt) {
    case TDO_I32: rows_range(c, begin, end, TDO_I32); break;
    case TDO_U32: rows_range(c, begin, end, TDO_U32); break;
    case TDO_U64: rows_range(c, begin, end, TDO_U64); break;
    default: rows_range(c, begin, end, TDO_I64); break;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* scatter_nd: apply pass                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Data dtypes of a reduction (the Python side's _DATA_CODES). */
enum { D_F32 = 0, D_F64, D_I8, D_I16, D_I32, D_I64, D_U8, D_U16, D_U32, D_BOOL, D_U64 };
enum { R_NONE = 0, R_ADD, R_MUL, R_MAX, R_MIN };

typedef struct {
    char *dst;
    const char *init;      /* copied into dst's rows by their owner first (or NULL) */
    const char *upd;
    const int64_t *rows;
    int64_t n, n_rows, row_bytes, slice_len;
    int parts, dtype, red;
} apply_ctx;

/* Elementwise reductions, matching torch's CPU kernels bit for bit: integers wrap around (done
 * in unsigned arithmetic: no UB), max/min as scatter_reduce_'s amax/amin with include_self
 * (a NaN update wins, a NaN already there stays, ties keep what is there).  Unsigned types
 * compare unsigned (uint64 values of 2**63 and above are the largest), as torch orders them. */
#define TDO_REDUCE_INT(T, UT)                                                                  \
    static void red_##T(T *d, const T *s, int64_t n, int red) {                                \
        switch (red) {                                                                         \
        case R_ADD: for (int64_t i = 0; i < n; i++) d[i] = (T)(UT)((UT)d[i] + (UT)s[i]); break; \
        case R_MUL: for (int64_t i = 0; i < n; i++) d[i] = (T)(UT)((UT)d[i] * (UT)s[i]); break; \
        case R_MAX: for (int64_t i = 0; i < n; i++) d[i] = d[i] < s[i] ? s[i] : d[i]; break;   \
        default: for (int64_t i = 0; i < n; i++) d[i] = s[i] < d[i] ? s[i] : d[i]; break;      \
        }                                                                                      \
    }
/* unsigned int (not narrower types) so that products do not promote to signed int */
TDO_REDUCE_INT(int8_t, unsigned)
TDO_REDUCE_INT(int16_t, unsigned)
TDO_REDUCE_INT(int32_t, uint32_t)
TDO_REDUCE_INT(int64_t, uint64_t)
TDO_REDUCE_INT(uint8_t, unsigned)
TDO_REDUCE_INT(uint16_t, unsigned)
TDO_REDUCE_INT(uint32_t, uint32_t)
TDO_REDUCE_INT(uint64_t, uint64_t)

#define TDO_REDUCE_FLOAT(T)                                                                    \
    static void red_##T(T *d, const T *s, int64_t n, int red) {                                \
        switch (red) {                                                                         \
        case R_ADD: for (int64_t i = 0; i < n; i++) d[i] = d[i] + s[i]; break;                 \
        case R_MUL: for (int64_t i = 0; i < n; i++) d[i] = d[i] * s[i]; break;                 \
        case R_MAX:                                                                            \
            for (int64_t i = 0; i < n; i++) d[i] = isnan(s[i]) ? s[i] : (d[i] < s[i] ? s[i] : d[i]); \
            break;                                                                             \
        default:                                                                               \
            for (int64_t i = 0; i < n; i++) d[i] = isnan(s[i]) ? s[i] : (s[i] < d[i] ? s[i] : d[i]); \
            break;                                                                             \
        }                                                                                      \
    }
TDO_REDUCE_FLOAT(float)
TDO_REDUCE_FLOAT(double)

/* bool: add/max are logical or, mul/min logical and (canonical 0/1 bytes out) */
static void red_bool(uint8_t *d, const uint8_t *s, int64_t n, int red) {
    if (red == R_ADD || red == R_MAX)
        for (int64_t i = 0; i < n; i++) d[i] = (d[i] | s[i]) != 0;
    else
        for (int64_t i = 0; i < n; i++) d[i] = d[i] && s[i];
}

static void reduce_row(const apply_ctx *c, char *d, const char *s) {
    const int64_t n = c->slice_len;
    switch (c->dtype) {
    case D_F32: red_float((float *)d, (const float *)s, n, c->red); break;
    case D_F64: red_double((double *)d, (const double *)s, n, c->red); break;
    case D_I8: red_int8_t((int8_t *)d, (const int8_t *)s, n, c->red); break;
    case D_I16: red_int16_t((int16_t *)d, (const int16_t *)s, n, c->red); break;
    case D_I32: red_int32_t((int32_t *)d, (const int32_t *)s, n, c->red); break;
    case D_I64: red_int64_t((int64_t *)d, (const int64_t *)s, n, c->red); break;
    case D_U8: red_uint8_t((uint8_t *)d, (const uint8_t *)s, n, c->red); break;
    case D_U16: red_uint16_t((uint16_t *)d, (const uint16_t *)s, n, c->red); break;
    case D_U32: red_uint32_t((uint32_t *)d, (const uint32_t *)s, n, c->red); break;
    case D_U64: red_uint64_t((uint64_t *)d, (const uint64_t *)s, n, c->red); break;
    default: red_bool((uint8_t *)d, (const uint8_t *)s, n, c->red); break;
    }
}

/* Overwrite: rows [lo, hi) owned by this thread; the scan in index order makes the last
 * duplicate win.  Destination rows are prefetched (for writing) a block ahead. */
TDO_INLINE void overwrite_part(const apply_ctx *c, int64_t lo, int64_t hi, const int64_t rb) {
    const int64_t n = c->n;
    const int64_t *rows = c->rows;
    for (int64_t t = 0; t < n; t++) {
        if (rb <= 64 && t + TDO_BLOCK < n) {
            int64_t p = rows[t + TDO_BLOCK];
            if (p >= lo && p < hi) __builtin_prefetch(c->dst + p * rb, 1);
        }
        int64_t r = rows[t];
        if (r >= lo && r < hi) copy_row(c->dst + r * rb, c->upd + t * rb, rb);
    }
}

static void apply_task(void *ctx, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const apply_ctx *c = (const apply_ctx *)ctx;
    for (int64_t p = begin; p < end; p++) {
        const int64_t lo = c->n_rows * p / c->parts, hi = c->n_rows * (p + 1) / c->parts;
        const int64_t rb = c->row_bytes;
        if (c->init && hi > lo)
            memcpy(c->dst + lo * rb, c->init + lo * rb, (size_t)((hi - lo) * rb));
        if (c->red == R_NONE) {
            switch (rb) {
            case 1: overwrite_part(c, lo, hi, 1); break;
            case 2: overwrite_part(c, lo, hi, 2); break;
            case 4: overwrite_part(c, lo, hi, 4); break;
            case 8: overwrite_part(c, lo, hi, 8); break;
            case 16: overwrite_part(c, lo, hi, 16); break;
            default:
                for (int64_t t = 0; t < c->n; t++) {
                    int64_t r = c->rows[t];
                    if (r >= lo && r < hi)
                        memcpy(c->dst + r * rb, c->upd + t * rb, (size_t)rb);
                }
            }
        } else {
            for (int64_t t = 0; t < c->n; t++) {
                int64_t r = c->rows[t];
                if (r >= lo && r < hi) reduce_row(c, c->dst + r * rb, c->upd + t * rb);
            }
        }
    }
}

/* dst[rows[t]] (op)= upd[t] for t in index order; rows were produced (and checked) by
 * the rows pass, so every rows[t] is in [0, n_rows).  Packed arguments:
 *   a = [dst, init, upd, rows, n, n_rows, row_bytes, slice_len, dtype, red, parts]
 * init: when not 0, dst is first a copy of it (the functional scatter; each thread copies the
 * rows it owns).  parts: how many row partitions (threads) the caller chose, at most
 * TDO_MAX_THREADS (each partition scans every tuple: partitions beyond the threads that run
 * them only multiply that scan; the result does not depend on their number).  red = R_NONE moves
 * row_bytes bytes per row (any dtype); otherwise dtype is a D_* code and slice_len the elements
 * per row. */
static void scatter_apply(const int64_t *a) {
    apply_ctx c = {(char *)(intptr_t)a[0], (const char *)(intptr_t)a[1],
                   (const char *)(intptr_t)a[2], (const int64_t *)(intptr_t)a[3], a[4], a[5],
                   a[6], a[7], 1, (int)a[8], (int)a[9]};
    c.parts = a[10] < 1 ? 1 : a[10] > TDO_MAX_THREADS ? TDO_MAX_THREADS : (int)a[10];
    if (c.n_rows <= 0 || c.row_bytes <= 0) return;
    tdo_parallel_for(c.parts, c.parts, 1, apply_task, &c);
}

/* ------------------------------------------------------------------------------------------ */
/* scatter_nd: element overwrite split by tuples                                               */
/* ------------------------------------------------------------------------------------------ */

/* Outside deterministic mode an element scatter ("none", one element per tuple) may keep any one
 * duplicate (a single element cannot mix), so its tuples are split among threads like torch's
 * index_copy_: every thread writes only its own tuples, and no thread tests (and mispredicts)
 * whether a random row is in its partition, which costs more than the write itself. */
typedef struct {
    char *dst;
    const char *init, *upd;
    const int64_t *rows;
    int64_t n_bytes, row_bytes;
} split_ctx;

static void copy_init_task(void *ctx, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const split_ctx *c = (const split_ctx *)ctx;
    memcpy(c->dst + begin, c->init + begin, (size_t)(end - begin));
}

TDO_INLINE void split_range(const split_ctx *c, int64_t begin, int64_t end, const int64_t rb) {
    const int64_t *rows = c->rows;
    for (int64_t t = begin; t < end; t++) {
        if (t + TDO_BLOCK < end) __builtin_prefetch(c->dst + rows[t + TDO_BLOCK] * rb, 1);
        copy_row(c->dst + rows[t] * rb, c->upd + t * rb, rb);
    }
}

static void split_task(void *ctx, int64_t begin, int64_t end, int tid) {
    (void)tid;
    const split_ctx *c = (const split_ctx *)ctx;
    switch (c->row_bytes) {
    case 1: split_range(c, begin, end, 1); break;
    case 2: split_range(c, begin, end, 2); break;
    case 4: split_range(c, begin, end, 4); break;
    default: split_range(c, begin, end, 8); break;
    }
}

/* Both passes in one call (small scatters pay one ctypes call):
 *   a = [dst, init, upd, idx, idx_dtype, n, k, n_rows, row_bytes, slice_len, dtype, red, parts,
 *        nthreads, grain, split, k sizes..., k strides...]
 * Checks every index first and writes nothing when one is bad (returns its flat position);
 * TDO_NO_ERROR after a complete scatter; -1 when the row buffer cannot be allocated.
 * split = 1 (the caller allows it only for red = R_NONE and row_bytes in {1, 2, 4, 8}, outside
 * deterministic mode): the init copy, then the tuples split among nthreads threads. */
TDO_EXPORT int64_t tdo_scatter_nd(const int64_t *a) {
    const int64_t n = a[5];
    const int k = (int)a[6];
    const int64_t rb = a[8];
    if (n <= 0) return TDO_NO_ERROR;
    const int split = a[15] && a[11] == R_NONE && (rb == 1 || rb == 2 || rb == 4 || rb == 8);
    /* The row numbers of the check pass are kept for the write pass: recomputing them from the
     * tuples measured 1.5x slower.  The buffer is hinted onto huge pages: a fresh n-sized buffer
     * is otherwise faulted in 4 KiB at a time on many calls. */
    int64_t *rows = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (!rows) return -1;
    if (n >= ((int64_t)1 << 18)) tdo_hugepage_hint(rows, n * (int64_t)sizeof(int64_t));
    rows_ctx rc = {(const void *)(intptr_t)a[3], (int)a[4], k, a + 16, a + 16 + k, rows,
                   TDO_NO_ERROR};
    tdo_parallel_for(n, (int)a[13], a[14], rows_task, &rc);   /* check (and rows) first */
    if (rc.first_bad == TDO_NO_ERROR) {
        if (split) {
            split_ctx sc = {(char *)(intptr_t)a[0], (const char *)(intptr_t)a[1],
                            (const char *)(intptr_t)a[2], rows, a[7] * rb, rb};
            if (sc.init && sc.n_bytes > 0)
                tdo_parallel_for(sc.n_bytes, (int)a[13], (int64_t)1 << 20, copy_init_task, &sc);
            tdo_parallel_for(n, (int)a[13], a[14], split_task, &sc);
        } else {
            int64_t ap[11] = {a[0], a[1], a[2], (int64_t)(intptr_t)rows, n, a[7], a[8], a[9],
                              a[10], a[11], a[12]};
            scatter_apply(ap);
        }
    }
    free(rows);
    return rc.first_bad;
}
