/* The extension module torch_dml_ops._cpu_kernels: a CPython module only so that setuptools builds it
 * and Python finds it; the kernels are plain C functions loaded with ctypes from this file.
 * Also the shared thread helper and the hugepage hint. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <sys/mman.h>

#include "common.h"

typedef struct {
    tdo_range_fn fn;
    void *ctx;
    int64_t begin, end;
    int tid;
} tdo_task;

static void *tdo_run_task(void *p) {
    tdo_task *t = (tdo_task *)p;
    t->fn(t->ctx, t->begin, t->end, t->tid);
    return NULL;
}

int tdo_parallel_for(int64_t n, int nthreads, int64_t grain, tdo_range_fn fn, void *ctx) {
    if (n <= 0) return 1;
    int T = tdo_threads_for(n, nthreads, grain);
    if (T == 1) {
        fn(ctx, 0, n, 0);
        return 1;
    }
    tdo_task tasks[TDO_MAX_THREADS];
    pthread_t th[TDO_MAX_THREADS];
    int started[TDO_MAX_THREADS] = {0};
    for (int i = 0; i < T; i++) {
        tasks[i].fn = fn;
        tasks[i].ctx = ctx;
        tasks[i].begin = n * i / T;
        tasks[i].end = n * (i + 1) / T;
        tasks[i].tid = i;
    }
    for (int i = 1; i < T; i++)
        started[i] = pthread_create(&th[i], NULL, tdo_run_task, &tasks[i]) == 0;
    tdo_run_task(&tasks[0]);
    for (int i = 1; i < T; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            tdo_run_task(&tasks[i]);   /* no thread could be started: run it here */
    }
    return T;
}

/* Version of the C ABI the Python wrappers were written against (2: uint64 data codes in
 * tdo_scatter_nd and tdo_top_k1; a stale build of version 1 would misread them). */
TDO_EXPORT int tdo_abi_version(void) { return 2; }

/* Ask the kernel to back [p, p + len) with transparent huge pages before it is first written
 * (only the 2 MiB-aligned interior; a hint, failures are ignored).  A fresh output of tens of MB
 * otherwise costs one page fault per 4 KiB on its first touch, which costs more than a gather
 * or scatter into it. */
TDO_EXPORT void tdo_hugepage_hint(void *p, int64_t len) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)1 << 21;
    uintptr_t s = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    uintptr_t e = ((uintptr_t)p + (uintptr_t)len) & ~(huge - 1);
    if (e > s) madvise((void *)s, e - s, MADV_HUGEPAGE);
#else
    (void)p;
    (void)len;
#endif
}

static struct PyModuleDef tdo_module = {
    PyModuleDef_HEAD_INIT, "_cpu_kernels",
    "Native CPU kernels of torch_dml_ops (called through ctypes; see torch_dml_ops/_native.py).",
    -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__cpu_kernels(void) { return PyModule_Create(&tdo_module); }
