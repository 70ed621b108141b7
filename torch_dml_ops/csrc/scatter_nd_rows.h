// scatter_nd_rows.h: part of the scatter_nd CPU kernel: the rows pass, which checks every tuple
// before the first write and keeps each tuple's row number for the apply pass.  Included only by
// scatter_nd.cpp; it shares that file's anonymous namespace (one translation unit), as
// top_k1's parts share top_k1.cpp's.
#pragma once
#include "common.h"

namespace tdo {
namespace {

// ------------------------------------------------------------------------------------------
// Rows pass: check every tuple, keep its row number
// ------------------------------------------------------------------------------------------

struct RowsPass {
  const void* idx = nullptr;
  int kind = kI64;
  int64_t k = 1;
  const int64_t* sizes = nullptr;
  const int64_t* strides = nullptr;  // in rows; all 0 for a check-only pass
  int64_t* rows = nullptr;           // nullptr: check only
};

// Tuples [begin, end): stops at the first bad coordinate (every later one of the range has a
// larger position), recording its flat position (tuple * k + column).
template <int Kind>
void rows_range_scalar(const RowsPass& c, int64_t begin, int64_t end,
                       std::atomic<int64_t>& first_bad) {
  constexpr bool kSigned = Kind == kI32 || Kind == kI64;
  const void* const idx = c.idx;
  const int64_t k = c.k;
  const int64_t* const sizes = c.sizes;
  const int64_t* const strides = c.strides;
  int64_t* const rows = c.rows;
  for (int64_t t = begin; t < end; t++) {
    int64_t row = 0;
    for (int64_t j = 0; j < k; j++) {
      const int64_t v = wrap_check(load_index(idx, Kind, t * k + j), sizes[j], kSigned);
      if (v < 0) {
        record_error(first_bad, t * k + j);
        return;
      }
      row += v * strides[j];
    }
    if (rows) rows[t] = row;
  }
}

// The same for tuples of K coordinates, a block at a time without a branch per coordinate: a
// block's row numbers are written and its coordinates' verdicts or-ed together, and a block with
// a bad coordinate is scanned again by rows_range_scalar, which finds the first.  (Unsigned
// arithmetic: a bad coordinate, -1 from wrap_check, makes a row that wraps and is never used.)
template <int Kind, int K>
void rows_range_fixed(const RowsPass& c, int64_t begin, int64_t end,
                      std::atomic<int64_t>& first_bad) {
  constexpr bool kSigned = Kind == kI32 || Kind == kI64;
  constexpr int64_t kRowsBlock = 512;
  const void* const idx = c.idx;
  int64_t size[K];
  uint64_t stride[K];
  for (int j = 0; j < K; j++) {
    size[j] = c.sizes[j];
    stride[j] = static_cast<uint64_t>(c.strides[j]);
  }
  int64_t* const rows = c.rows;
  for (int64_t b = begin; b < end; b += kRowsBlock) {
    const int64_t e = std::min(end, b + kRowsBlock);
    bool bad = false;
    for (int64_t t = b; t < e; t++) {
      uint64_t row = 0;
      for (int j = 0; j < K; j++) {
        const int64_t w = wrap_check(load_index(idx, Kind, t * K + j), size[j], kSigned);
        bad |= w < 0;
        row += static_cast<uint64_t>(w) * stride[j];
      }
      if (rows) rows[t] = static_cast<int64_t>(row);
    }
    if (bad) return rows_range_scalar<Kind>(c, b, e, first_bad);
  }
}

template <int Kind>
void rows_range(const RowsPass& c, int64_t begin, int64_t end, std::atomic<int64_t>& first_bad) {
  switch (c.k) {
    case 1: return rows_range_fixed<Kind, 1>(c, begin, end, first_bad);
    case 2: return rows_range_fixed<Kind, 2>(c, begin, end, first_bad);
    case 3: return rows_range_fixed<Kind, 3>(c, begin, end, first_bad);
    case 4: return rows_range_fixed<Kind, 4>(c, begin, end, first_bad);
    default: return rows_range_scalar<Kind>(c, begin, end, first_bad);
  }
}

// check_indices=False, once the rows pass has found an out-of-range tuple (it stops at it): every
// row number again, -1 for a tuple with a bad coordinate (the apply pass skips it).
template <int Kind>
void rows_skipping(const RowsPass& c, int64_t begin, int64_t end) {
  constexpr bool kSigned = Kind == kI32 || Kind == kI64;
  for (int64_t t = begin; t < end; t++) {
    int64_t row = 0;
    for (int64_t j = 0; j < c.k; j++) {
      const int64_t v = wrap_check(load_index(c.idx, Kind, t * c.k + j), c.sizes[j], kSigned);
      if (v < 0) {
        row = -1;
        break;
      }
      row += v * c.strides[j];
    }
    c.rows[t] = row;
  }
}

void run_rows_skipping(const RowsPass& c, int64_t n) {
  parallel_parts(n, parts_for(n, kGrain / 2), [&](int64_t b, int64_t e, int) {
    with_index_kind(c.kind, [&](auto kind) { rows_skipping<decltype(kind)::value>(c, b, e); });
  });
}

// The smallest flat position of a bad coordinate among tuples [0, n), or kNoError.
int64_t run_rows(const RowsPass& c, int64_t n) {
  std::atomic<int64_t> first_bad{kNoError};
  parallel_parts(n, parts_for(n, kGrain / 2), [&](int64_t b, int64_t e, int) {
    with_index_kind(c.kind, [&](auto kind) {
      rows_range<decltype(kind)::value>(c, b, e, first_bad);
    });
  });
  return first_bad.load();
}

}  // namespace
}  // namespace tdo
