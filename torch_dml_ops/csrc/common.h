/* Shared helpers of the native CPU kernels (plain C11 + pthreads; no Python or torch API).
 *
 * The kernels are called through ctypes (which releases the GIL) with raw data pointers of
 * tensors that the Python side has validated and made contiguous where a kernel needs it.
 * Every kernel checks every index it reads before it dereferences anything with it, so no
 * kernel ever reads or writes out of bounds, whatever the indices hold.
 */
#ifndef TDO_COMMON_H
#define TDO_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define TDO_EXPORT __attribute__((visibility("default")))
#define TDO_MAX_THREADS 64
/* "no bad index found" */
#define TDO_NO_ERROR INT64_MAX

/* Index dtypes, as the Python side passes them. */
enum { TDO_I32 = 0, TDO_I64 = 1, TDO_U32 = 2, TDO_U64 = 3 };

/* fn(ctx, begin, end, tid) over [0, n) split into contiguous ranges, one per thread; the calling
 * thread runs range 0.  At most `nthreads` threads, and none with fewer than `grain` items
 * (so small problems run on the calling thread alone, without a thread start). */
typedef void (*tdo_range_fn)(void *ctx, int64_t begin, int64_t end, int tid);
int tdo_parallel_for(int64_t n, int nthreads, int64_t grain, tdo_range_fn fn, void *ctx);

/* Hint that [p, p + len) be backed by transparent huge pages (module.c). */
void tdo_hugepage_hint(void *p, int64_t len);

/* How many threads tdo_parallel_for will use for n items. */
static inline int tdo_threads_for(int64_t n, int nthreads, int64_t grain) {
    if (nthreads < 1) nthreads = 1;
    if (nthreads > TDO_MAX_THREADS) nthreads = TDO_MAX_THREADS;
    if (grain < 1) grain = 1;
    int64_t t = n / grain;
    if (t < 1) t = 1;
    return (int)(t < nthreads ? t : nthreads);
}

/* Read index i of an index array of dtype `dt` as a signed 64-bit value.  uint64 values of
 * 2**63 or more come back negative; callers treat negative values of an unsigned dtype as out
 * of range (they never wrap). */
static inline int64_t tdo_load_index(const void *p, int dt, int64_t i) {
    switch (dt) {
    case TDO_I32: return ((const int32_t *)p)[i];
    case TDO_U32: return (int64_t)((const uint32_t *)p)[i];
    case TDO_U64: return (int64_t)((const uint64_t *)p)[i];
    default:      return ((const int64_t *)p)[i];
    }
}

/* Wrap a negative index of a signed dtype and check it: the non-negative position in [0, size),
 * or -1 when out of range. */
static inline int64_t tdo_wrap_check(int64_t v, int64_t size, int is_signed) {
    if (v < 0) {
        if (!is_signed) return -1;
        v += size;
        if (v < 0) return -1;
    }
    return v < size ? v : -1;
}

/* Atomic min of a shared first-error position. */
static inline void tdo_record_error(int64_t *first_bad, int64_t pos) {
    int64_t cur = __atomic_load_n(first_bad, __ATOMIC_RELAXED);
    while (pos < cur &&
           !__atomic_compare_exchange_n(first_bad, &cur, pos, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
}

#endif
