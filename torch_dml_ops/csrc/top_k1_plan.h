// top_k1_plan.h: part of the top_k1 CPU kernel: the per-row plan: struct TopK, which chooses a pass
// for each row (or segment) and runs it over torch's threads. Included only by top_k1.cpp; the
// parts form one translation unit with top_k1.cpp (whose header comment describes the whole
// kernel), in one anonymous namespace, so the compiler sees and inlines across them as it did when
// they were one file.
#pragma once
#include "top_k1_nets.h"

namespace tdo {
namespace {

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

// A parallel part's guess for the guessed pass (the bits of a float or int32 threshold), and how
// often it failed: a part whose rows keep defeating it stops guessing.
struct Guess {
  uint32_t bits = 0;
  bool set = false;
  bool ties = false;  // the last row's k best took values equal to the threshold: the tie pass
  int64_t above = 0;  // how many of the last row's candidates were above it
  int64_t rows = 0, misses = 0;
  bool on() const { return misses <= 8 + rows / 8; }
};

template <class KT>
struct TopK {
  using CT = typename Composite<KT>::type;

  // x: [rows, n] contiguous, elements of esize bytes; outputs [rows / inner, k, inner].
  const char* x;
  int64_t esize, n, inner, k;
  int64_t cap;  // candidate buffer entries (> k; scan)
  KeyFn<KT> kf;
  MaskFn<KT> mf;
  InsFn ins;  // insert_net for k <= kNetMaxK (32-bit keys)
  NetFn net;  // the same over a list of candidates (guess_finish)
  Net2Fn net2;  // and over two rows' lists at once (guessed_rows)
  // float32 / int32 rows of 32-bit keys: the native-order pass (scan_native)
  ScalarType native = ScalarType::Undefined;
  NatFns<float> nat_f{};
  NatFns<int32_t> nat_i{};
  KT mask;  // 0: largest first; all ones: smallest first
  char* out_v;
  void* out_i;
  ScalarType index_dtype;

  // A parallel part's scratch: the candidate buffer, and a block of keys with its group maxima.
  struct Scratch {
    std::vector<std::unique_ptr<CT[]>> buf;
    std::vector<std::unique_ptr<KT[]>> kb;
    Scratch(const TopK& c, int parts) {
      for (int p = 0; p < parts; p++) {
        buf.push_back(allocate<CT>(c.cap + 1, "top_k1's candidate buffer"));
        kb.push_back(allocate<KT>(KB + L, "top_k1's key block"));
      }
    }
  };

  const char* row(int64_t r) const { return x + r * n * esize; }

  // The best min(k, s1 - s0) composites of row[s0, s1) (row indices) into buf[0..m), unordered;
  // returns m.  buf holds cap entries, kb KB + L keys (the L group maxima last).
  // pf: where to prefetch the row a few on (the native pass; null: none).
  int64_t scan(const char* rp, int64_t s0, int64_t s1, CT* buf, KT* kb,
               const char* pf = nullptr) const {
    KT* lanes = kb + KB;
    // float32 / int32 spans of at least 256 (shorter: the key pass, vectorized inline, is as
    // fast or faster: M19 in docs/benchmarks.md, "Measured choices")
    if (k == 1 && native != ScalarType::Undefined && s1 - s0 >= 256) {
      const bool inc = mask != 0;
      const int64_t m =
          native == ScalarType::Float
              ? (inc ? max_native<float, KeyF32, true>(rp, s0, s1, buf, nat_f)
                     : max_native<float, KeyF32, false>(rp, s0, s1, buf, nat_f))
              : (inc ? max_native<int32_t, KeyI32, true>(rp, s0, s1, buf, nat_i)
                     : max_native<int32_t, KeyI32, false>(rp, s0, s1, buf, nat_i));
      if (m >= 0) return m;  // else a NaN: the key pass below decides
    }
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
      // its first key >= best (== best), found with the vector compare
      const int64_t nw = (len + 63) / 64;
      if (len % 64) std::fill(kb + len, kb + nw * 64, KT(0));
      uint64_t words[KB / 64];
      mf(kb, nw * 64, best, words);
      int64_t w = 0;
      while (!words[w]) w++;  // best is in the block: some word has a bit
      buf[0] = comp<KT>(best, bs + w * 64 + __builtin_ctzll(words[w]));
      return 1;
    }
    const bool inc = mask != 0;
    if (native == ScalarType::Float)
      return inc ? scan_native<float, KeyF32, true>(rp, s0, s1, buf, kb, pf, nat_f)
                 : scan_native<float, KeyF32, false>(rp, s0, s1, buf, kb, pf, nat_f);
    if (native == ScalarType::Int)
      return inc ? scan_native<int32_t, KeyI32, true>(rp, s0, s1, buf, kb, pf, nat_i)
                 : scan_native<int32_t, KeyI32, false>(rp, s0, s1, buf, kb, pf, nat_i);
    // Candidates are the keys >= t.  Before anything is known t is 0, or, in a block, the
    // k-th largest of its group maxima (k groups hold a key at least that large, so smaller
    // keys are out of the k best for good).  Once k are held, t is the k-th best key + 1
    // (`floor`: the scan is in index order, so a later equal key loses to it).  A block whose
    // maximum is below the floor is skipped whole; else a vector compare gives the bit mask of
    // its candidates, and only those are visited.
    int64_t m = 0;
    if (k <= kNetMaxK) std::fill(buf, buf + kNetMaxK, CT(0));  // insert_net's start
    KT floor = 0;
    bool have = false;  // the floor is set
    uint64_t words[KB / 64];
    for (int64_t s = s0; s < s1; s += KB) {
      const int64_t len = s1 - s < KB ? s1 - s : KB;
      const KT bm = kf(rp, s, len, mask, kb, lanes);
      if (have && bm < floor) continue;  // no candidate in the block
      KT bound = 0;
      if (!have && k <= L && len >= L) bound = kth_largest(lanes, k);
      const int64_t nw = (len + 63) / 64;
      if (len % 64) std::fill(kb + len, kb + nw * 64, KT(0));  // whole words are compared
      // The masks are made with t; when t has risen since and many candidates are left (the
      // first block without a bound), the rest are made again.
      KT t = have && floor > bound ? floor : bound;
      mf(kb, nw * 64, t, words);
      if (len % 64) words[nw - 1] &= (uint64_t(1) << (len % 64)) - 1;
      int64_t pending = 0;
      for (int64_t w = 0; w < nw; w++) pending += __builtin_popcountll(words[w]);
      for (int64_t w = 0; w < nw; w++) {
        if (have && floor > t && pending > 64) {
          t = floor > bound ? floor : bound;
          mf(kb + w * 64, (nw - w) * 64, t, words + w);
          if (len % 64) words[nw - 1] &= (uint64_t(1) << (len % 64)) - 1;
          pending = 0;
          for (int64_t v = w; v < nw; v++) pending += __builtin_popcountll(words[v]);
        }
        for (uint64_t b = words[w]; b; b &= b - 1) {
          pending--;
          const int64_t j = w * 64 + __builtin_ctzll(b);
          if (!offer(buf, m, kb[j], s + j, floor, have)) return m;
        }
      }
    }
    if (m > k) select_k(buf, m, k);
    return m < k ? m : k;
  }

  // k == 1 for float32 / int32 (V) in their own order: every block's maximum by the native
  // group-maxima pass (one read, no keys), then the first element of the first block holding the
  // largest, by a vector compare (-0.0 and +0.0 are equal there, as their keys are).  Returns 1
  // (buf[0] the winner), 0 for an empty span, or -1 when a block holds a NaN (float compares do
  // not order it) or the thread treats denormals as zero (torch.set_flush_denormal: compares
  // then tie distinct denormals, which the keys order): the key pass then takes the span.
  template <class V, class D, bool Inc>
  int64_t max_native(const char* rp, int64_t s0, int64_t s1, CT* buf,
                     const NatFns<V>& nf) const {
#ifdef TDO_X86_SIMD
    if constexpr (std::is_floating_point_v<V>)
      if (_mm_getcsr() & 0x0040) return -1;  // MXCSR.DAZ
#endif
    const V* p = reinterpret_cast<const V*>(rp);
    alignas(64) V lanes[L];
    V best = nat_lowest<V>();
    int64_t bs = -1;
    for (int64_t s = s0; s < s1; s += KB) {
      const int64_t len = std::min(KB, s1 - s);
      if (!nf.lanes(p + s, len, lanes, nullptr)) return -1;
      V bm = lanes[0];
      for (int g = 1; g < L; g++) bm = lanes[g] > bm ? lanes[g] : bm;
      if (bs < 0 || bm > best) {  // the first block wins ties
        best = bm;
        bs = s;
      }
    }
    if (bs < 0) return 0;
    uint64_t words[KB / 64];
    nf.masks(p + bs, std::min(KB, s1 - bs), best, words, nullptr);
    int64_t w = 0;
    while (!words[w]) w++;  // best is in the block: some word has a bit
    const int64_t j = bs + w * 64 + __builtin_ctzll(words[w]);
    typename D::UT bits;
    std::memcpy(&bits, p + j, sizeof(bits));
    buf[0] = comp<KT>(static_cast<KT>(static_cast<KT>(D::key(bits)) ^ mask), j);
    return 1;
  }

  // A candidate (its key, its row index): into the k best so far, kept sorted (k <=
  // kSortedMaxK), or into the unordered buffer, cut back to the k best when full.  Keeps floor
  // (the k-th best key + 1, once k are held: `have`); false when no key can be greater.
  [[gnu::always_inline]] inline bool offer(CT* buf, int64_t& m, KT key, int64_t i, KT& floor,
                                           bool& have) const {
    if (have && key < floor) return true;  // the floor rose since the mask was made
    if (k <= kSortedMaxK) {
      const CT c = comp<KT>(key, i);
      if (k <= kNetMaxK) {  // branch-free (buf was cleared: 0 is below every composite)
        if constexpr (std::is_same_v<CT, uint64_t>)
          ins(buf, c);
        else if (half_net(k))
          insert_net<kNetMaxK / 2>(buf, c);
        else
          insert_net<kNetMaxK>(buf, c);
        m = m < k ? m + 1 : k;
      } else {
        int64_t q = m < k ? m++ : k - 1;
        while (q > 0 && buf[q - 1] < c) {
          buf[q] = buf[q - 1];
          q--;
        }
        buf[q] = c;
      }
      if (m < k) return true;
      const KT kt = key_of<KT>(buf[k - 1]);
      if (kt == static_cast<KT>(~KT(0))) return false;
      floor = kt + 1;
      have = true;
      return true;
    }
    buf[m++] = comp<KT>(key, i);
    if (m == k && !have) {  // the first k: the floor from them (until the first cut)
      const KT kt = key_of<KT>(min_of(buf, k));
      if (kt == static_cast<KT>(~KT(0))) return false;
      floor = kt + 1;
      have = true;
    }
    if (m < cap) return true;
    select_k(buf, m, k);
    m = k;
    const KT kt = key_of<KT>(min_of(buf, k));
    if (kt == static_cast<KT>(~KT(0))) return false;
    floor = kt + 1;
    have = true;
    return true;
  }

  // The least transformed value above the k-th best's (the one at buf's k-th), lowest when
  // that is a NaN (every other value beats it), the largest when none is above.
  template <class V, bool Inc>
  V native_floor(const V* p, const CT* buf) const {
    const V vk = nat_tr<V, Inc>(p[index_of<KT>(k <= kSortedMaxK ? buf[k - 1] : min_of(buf, k))]);
    if constexpr (std::is_floating_point_v<V>) {
      if (vk != vk) return nat_lowest<V>();
      if (vk == 0) return std::numeric_limits<float>::denorm_min();  // +0.0 == -0.0
      if (vk == __builtin_huge_valf()) return vk;
      uint32_t u;
      std::memcpy(&u, &vk, 4);
      u = vk > 0 ? u + 1 : u - 1;  // the next float up
      V up;
      std::memcpy(&up, &u, 4);
      return up;
    }
    else
      return vk == std::numeric_limits<V>::max() ? vk : static_cast<V>(vk + 1);
  }

  // The guessed pass of a row p[0, n).  Rows of one distribution have
  // similar k-th best values, so a threshold guessed from an earlier row's group maxima (their
  // (k + kGuessSlack)-th largest) is usually below this row's k-th best, but not far.  One
  // read (nat_guess) finds this row's group maxima and the positions of the elements that
  // reach the guess (and the NaNs, decreasing: NaN is the greatest).  When there are at least
  // k, the k best of the span are among them (each beats every other element), and the sorted
  // network of their composites gives them (4096x1024 float32, k = 8: ~16 candidates, no
  // branch per candidate).  When fewer than k or more than kGuessCap reach the guess, a second
  // read (from cache) takes this row's own k-th largest group maximum instead, which k
  // elements reach, by the tie pass: the elements above it, and the first k equal to it (ties
  // across the k-th value, as in rows of a few distinct values, where many elements reach any
  // threshold: the k best are those above it and then the first equal ones); false when more
  // than kGuessCap are above it: the other passes then take the span.  A row that needed equal
  // values makes the next row's first read the tie pass (not a row whose k best merely end in
  // equal keys: on rows of 0..99 that was faster on one thread, slower on two: M18).  The guess
  // is made again from this row's group maxima after a miss, or when more than 3k reach it.  A
  // row's pass is read (guess_read), then finished (guess_finish; two rows at once:
  // guess_finish2).
  // GuessRow: a read's candidates' positions, the equal ones' (the tie pass), and how many.
  struct GuessRow {
    int32_t idx[kGuessCap + 128], eq[kNetMaxK + 66];
    int64_t c = 0, neq = 0;
  };
  // The read: false when the other passes must take the span (more than kGuessCap reach the
  // guess, or are above it); the guess kept up to date.
  template <class V, bool Inc>
  [[gnu::always_inline]] bool guess_read(const V* p, int64_t len, Guess& g, const NatFns<V>& nf,
                                         GuessRow& gr) const {
    static_assert(sizeof(V) == sizeof(g.bits), "a 32-bit threshold");
    alignas(64) V lanes[L];
    int32_t* idx = gr.idx;
    gr.neq = 0;
    V t = nat_lowest<V>();
    if (g.set) std::memcpy(&t, &g.bits, sizeof(t));
    // the tie pass at t: above t, and equal (only where compares see t's neighbours as they are)
    const auto tie_pass = [&](V t, V* lanes) {
      gr.neq = 0;
      return (g.above <= kSparseAbove ? nf.ties_sparse : nf.ties)(p, len, t, lanes, idx,
                                                                  kGuessCap, gr.eq, &gr.neq, k);
    };
    bool tied = g.ties && exact_compares(t);
    int64_t c = tied ? tie_pass(t, lanes) : nf.guess(p, len, t, lanes, idx, kGuessCap, nullptr,
                                                    nullptr, 0);
    g.rows++;
    const auto enough = [&] { return c >= k || (tied && c >= 0 && c + gr.neq >= k); };
    bool hit = enough();
    if (!g.set || !hit || c > 3 * k) {  // a new guess (kept while it works)
      const V next = nf.kth(lanes, std::min<int64_t>(L, k + kGuessSlack));
      std::memcpy(&g.bits, &next, sizeof(next));
      g.set = true;
    }
    if (!hit) {  // too high (fewer than k reach it), or too low (-1: too many)
      g.misses++;
      // this row's own k-th largest group maximum: k groups hold an element that reaches it
      // (the row is in cache: a second read, cheaper than the other passes)
      alignas(64) V again[L];
      const V tk = nf.kth(lanes, k);
      tied = exact_compares(tk);
      c = tied ? tie_pass(tk, again)
               : nf.guess(p, len, tk, again, idx, kGuessCap, nullptr, nullptr, 0);
      if (!enough()) return false;  // more than kGuessCap reach it (or are above it)
    }
    g.ties = c < k && gr.neq > 1;
    g.above = c;
    gr.c = c;
    return true;
  }
  // The composite of the row's element p[j].
  template <class D>
  [[gnu::always_inline]] uint64_t guess_comp(const void* p, int32_t j) const {
    typename D::UT bits;
    std::memcpy(&bits, static_cast<const char*>(p) + int64_t(j) * sizeof(bits), sizeof(bits));
    return comp<KT>(static_cast<KT>(static_cast<KT>(D::key(bits)) ^ mask), j);
  }
  // The finish: the k best into buf, sorted.  At least k candidates (gr.c >= k): the k best of
  // the span are among them (each beats every other element), and the sorted network of
  // their composites gives them (4096x1024 float32, k = 8: ~16 candidates, no branch per
  // candidate).  Fewer (the tie pass): the c above t, sorted, then the first k - c equal to t:
  // equal keys, so in index order (descending composites) already.
  template <class V, class D>
  [[gnu::always_inline]] void guess_finish(const V* p, const GuessRow& gr, CT* buf) const {
    const int64_t c = gr.c;
    uint64_t cs[kGuessCap];
    for (int64_t q = 0; q < c; q++) cs[q] = guess_comp<D>(p, gr.idx[q]);
    if (c >= k) {
      net(cs, c, buf);
      return;
    }
    if (c > 0) net(cs, c, buf);
    for (int64_t q = c; q < k; q++) buf[q] = guess_comp<D>(p, gr.eq[q - c]);
  }
  // Two rows' finish (both with at least k candidates), their nets at once (net2).
  template <class V, class D>
  [[gnu::always_inline]] void guess_finish2(const V* pa, const GuessRow& ga, CT* oa,
                                            const V* pb, const GuessRow& gb, CT* ob) const {
    const int64_t c = std::max(ga.c, gb.c);
    uint64_t ca[kGuessCap], cb[kGuessCap];
    for (int64_t q = 0; q < ga.c; q++) ca[q] = guess_comp<D>(pa, ga.idx[q]);
    for (int64_t q = 0; q < gb.c; q++) cb[q] = guess_comp<D>(pb, gb.idx[q]);
    std::fill(ca + ga.c, ca + c, uint64_t(0));  // the shorter list padded with zeros
    std::fill(cb + gb.c, cb + c, uint64_t(0));
    net2(ca, cb, c, oa, ob);
  }

  // A part's rows [b, e) of the guessed pass (float32 / int32 rows of kGuessMin to INT32_MAX
  // elements, 1 < k <= kNetMaxK), in pairs: a row whose read leaves at least k candidates
  // waits for the next such row, and their nets run at once (net2).  A row the guess cannot
  // take goes to scan() (the other passes, with their prefetch of a later short row).  Its
  // own function (noinline): its candidate lists on the stack would slow the caller's other
  // paths.
  template <class V, class D, bool Inc>
  [[gnu::noinline]] void guessed_rows(int64_t b, int64_t e, CT* buf, KT* kb,
                                      const NatFns<V>& nf) const {
    Guess g;
    GuessRow gr[2];
    CT out[2][kNetMaxK];
    int pend = -1;  // the slot of a row waiting for its pair
    int64_t prow = 0;
    for (int64_t r = b; r < e; r++) {
      const V* p = reinterpret_cast<const V*>(row(r));
      const int s = pend == 0 ? 1 : 0;
      if (!g.on() || !guess_read<V, Inc>(p, n, g, nf, gr[s])) {
        const bool short_row = n * esize <= kPrefetchRowMax;
        scan(row(r), 0, n, buf, kb,
             short_row && r + kPrefetchRows < e ? row(r + kPrefetchRows) : nullptr);
        emit(r, buf, k <= kSortedMaxK);
        continue;
      }
      if (gr[s].c < k) {  // the tie pass's rows alone
        guess_finish<V, D>(p, gr[s], out[s]);
        emit(r, out[s], true);
      } else if (pend < 0) {
        pend = s;
        prow = r;
      } else {
        guess_finish2<V, D>(reinterpret_cast<const V*>(row(prow)), gr[pend], out[pend], p, gr[s],
                            out[s]);
        emit(prow, out[pend], true);
        emit(r, out[s], true);
        pend = -1;
      }
    }
    if (pend >= 0) {
      guess_finish<V, D>(reinterpret_cast<const V*>(row(prow)), gr[pend], out[pend]);
      emit(prow, out[pend], true);
    }
  }

  // scan() for float32 and int32 (V) with the native-order pass; D their key.  A block with a
  // NaN takes the key pass (block_keys), like scan().
  template <class V, class D, bool Inc>
  int64_t scan_native(const char* rp, int64_t s0, int64_t s1, CT* buf, KT* kb, const char* pf,
                      const NatFns<V>& nf) const {
    const V* p = reinterpret_cast<const V*>(rp);
    KT* lanes = kb + KB;
    V vl[L];
    int64_t m = 0;
    if (k <= kNetMaxK) std::fill(buf, buf + kNetMaxK, CT(0));  // insert_net's start
    KT floor = 0;
    bool have = false;
    V vfloor = nat_lowest<V>();  // with have: no transformed value below it can enter
    uint64_t words[KB / 64];
    int64_t pos = s0;  // everything before is done
    // An element (its position in the row) into the k best, the floors kept; false when no
    // key can be greater.
    auto offer_at = [&](int64_t j) [[gnu::always_inline]] {
      typename D::UT bits;
      std::memcpy(&bits, p + j, sizeof(bits));
      const KT key = static_cast<KT>(static_cast<KT>(D::key(bits)) ^ mask);
      const KT before = floor;
      if (!offer(buf, m, key, j, floor, have)) return false;
      if (have && floor != before) vfloor = native_floor<V, Inc>(p, buf);
      return true;
    };
    // What a value must reach to be offered: the bound, or the floor once that is higher.
    const auto threshold = [&](V bound) { return have && vfloor > bound ? vfloor : bound; };
    // The second pass over [b, b + len), whose words' maxima wm the first pass wrote (see
    // nat_lanes): only the words whose maximum reaches the threshold are compared, in order,
    // each with the threshold as it has risen (32x50257, k = 50: about 52 of 786 words).  pf
    // (unless null): the same span of a later row, prefetched up to each visited word as the
    // pass goes, the rest at the end.  False when no key can be greater.
    auto words_pass = [&](int64_t b, int64_t len, const V* wm, V bound) {
      const int64_t nw = (len + 63) / 64;
      int64_t fetched = 0;  // words of pf prefetched
      const auto fetch_to = [&](int64_t w) {
        for (; pf && fetched < w; fetched++) prefetch_word(pf + (b + 64 * fetched) * sizeof(V));
      };
      for (int64_t w0 = 0; w0 < nw; w0 += 64) {
        uint64_t sel;
        nf.masks(wm + w0, std::min<int64_t>(64, nw - w0), threshold(bound), &sel, nullptr);
        for (; sel; sel &= sel - 1) {
          const int64_t w = w0 + __builtin_ctzll(sel);
          const V t = threshold(bound);
          if (nat_tr<V, Inc>(wm[w]) < t) continue;  // the threshold rose past it
          fetch_to(w + 1);
          uint64_t bits;
          nf.masks(p + b + 64 * w, std::min<int64_t>(64, len - 64 * w), t, &bits, nullptr);
          for (; bits; bits &= bits - 1)
            if (!offer_at(b + 64 * w + __builtin_ctzll(bits))) return false;
        }
      }
      fetch_to(nw);
      return true;
    };
    // A span of several blocks that fits in cache: first every block's L group maxima and every
    // word's maximum (one read); the k-th largest group maximum bounds the k-th best of the
    // span (k groups hold a value that large), so that the second pass visits about k words
    // and offers little more than k candidates instead of ~k ln(n / k) (32x50257, k = 50: ~53
    // instead of ~420 a row).  The second read is from cache.  Only for k > kNetMaxK, whose
    // insertions cost enough to pay for it (M20 in docs/benchmarks.md, "Measured choices").
    // A span of one block (at most KB) with k >= len / 32 takes the same bound from groups of
    // four (the L groups of every word): about a third of the candidates, faster from k = 32
    // on, slower below (M20).  Not with a NaN (the key pass decides those).
    static_assert(kTwoPassMax / KB * L + kTwoPassMax / 64 <= KB + L,
                  "the group and word maxima fit in the key block");
    static_assert(KB / 64 * L <= kTwoPassMax / KB * L, "a block's groups of four fit too");
    bool bounded = false;
    const int64_t sb = s1 - s0 > KB ? KB : 64;  // the groups' block
    if (k > kNetMaxK && s1 - s0 <= kTwoPassMax && (s1 - s0 > KB || 32 * k >= s1 - s0) &&
        (s1 - s0 + sb - 1) / sb * L >= k) {
      V* g = reinterpret_cast<V*>(kb);
      V* wm = g + kTwoPassMax / KB * L;
      int64_t ng = 0;
      bool ok = true;
      const bool by_words = s1 - s0 >= kWordPassMin;
      for (int64_t s = s0; s < s1 && ok; s += sb, ng += L) {
        const int64_t len = s1 - s < sb ? s1 - s : sb;
        ok = by_words ? nf.lanes_w(p + s, len, g + ng, wm + (s - s0) / 64)
                      : nf.lanes(p + s, len, g + ng, nullptr);
      }
      if (ok) {
        // One block: the sample's bound is enough (the selection that tightens it costs more
        // than the candidates it saves there, not on longer spans: M21 in docs/benchmarks.md).
        const V bound = kth_largest(g, ng, k, /*exact=*/s1 - s0 > KB);
        if (by_words) {
          if (!words_pass(s0, s1 - s0, wm, bound)) return m;
          pos = s1;
        } else {
          vfloor = bound;  // the filtering pass below, from s0
        }
        bounded = true;
      }
    }
    // Until the k best so far are known: blocks, their bound and candidate masks.
    for (int64_t s = pos; s < s1 && !have && !bounded; s += KB) {
      const int64_t len = s1 - s < KB ? s1 - s : KB;
      pos = s + len;
      if (nf.lanes(p + s, len, vl, nullptr)) {
        V bound = nat_lowest<V>();
        if (k <= L && len >= L) bound = nf.kth(vl, k);
        // the masks a chunk at a time: one word without a bound, else kChunk
        for (int64_t c = 0, cl; c < len; c += cl) {
          cl = std::min(len - c, bound != nat_lowest<V>() ? kChunk : int64_t(64));
          nf.masks(p + s + c, cl, threshold(bound), words,
                   pf ? pf + (s + c) * sizeof(V) : nullptr);
          for (int64_t w = 0; w * 64 < cl; w++)
            for (uint64_t b = words[w]; b; b &= b - 1)
              if (!offer_at(s + c + w * 64 + __builtin_ctzll(b))) return m;
          if (have) {  // the rest of the row by the filtering pass
            pos = s + c + cl;
            break;
          }
        }
        continue;
      }
      // a NaN in the block: its keys
      kf(rp, s, len, mask, kb, lanes);
      const int64_t nw = (len + 63) / 64;
      if (len % 64) std::fill(kb + len, kb + nw * 64, KT(0));
      mf(kb, nw * 64, KT(0), words);
      if (len % 64) words[nw - 1] &= (uint64_t(1) << (len % 64)) - 1;
      for (int64_t w = 0; w < nw; w++) {
        for (uint64_t b = words[w]; b; b &= b - 1) {
          const int64_t j = s + w * 64 + __builtin_ctzll(b);
          const KT before = floor;
          if (!offer(buf, m, kb[j - s], j, floor, have)) return m;
          if (have && floor != before) vfloor = native_floor<V, Inc>(p, buf);
        }
      }
    }
    // Then one filtering pass: vector compares against the floor; the rare candidates (and
    // any NaN, whose key decides) are offered.
    int32_t idx[64 + 16];
    while (pos < s1) {
      int64_t nc = 0;
      pos = nf.next(p, pos, s1, vfloor, idx, &nc, pf ? pf - rp : 0);
      for (int64_t q = 0; q < nc; q++)
        if (!offer_at(idx[q])) return m;
    }
    if (m > k) select_k(buf, m, k);
    return m < k ? m : k;
  }

  // Sort the k winners of row r (in buf; `sorted`: they already are) and write them: values
  // copied from the row at the index, indices in the index dtype, at [r / inner, j, r % inner]
  // of the outputs.
  void emit(int64_t r, CT* buf, bool sorted) const {
    const int64_t o0 = inner == 1 ? r * k : (r / inner) * k * inner + r % inner;
    if (!sorted) sort_desc(buf, k);
    // one loop per value size and index width (int32 and uint32 indices share their bits)
    if (index_dtype == ScalarType::Int || index_dtype == ScalarType::UInt32)
      emit_sized<uint32_t>(row(r), buf, o0);
    else
      emit_sized<uint64_t>(row(r), buf, o0);
  }
  template <class IT>
  void emit_sized(const char* rp, const CT* buf, int64_t o0) const {
    switch (esize) {
      case 1: return emit_as<uint8_t, IT>(rp, buf, o0);
      case 2: return emit_as<uint16_t, IT>(rp, buf, o0);
      case 4: return emit_as<uint32_t, IT>(rp, buf, o0);
      default: return emit_as<uint64_t, IT>(rp, buf, o0);
    }
  }
  template <class VT, class IT>
  void emit_as(const char* rp, const CT* buf, int64_t o0) const {
    VT* ov = reinterpret_cast<VT*>(out_v);
    IT* oi = static_cast<IT*>(out_i);
    const int64_t kk = k, step = inner;
    for (int64_t j = 0; j < kk; j++) {
      const int64_t i = index_of<KT>(buf[j]);
      const int64_t o = o0 + j * step;
      std::memcpy(ov + o, rp + i * static_cast<int64_t>(sizeof(VT)), sizeof(VT));
      oi[o] = static_cast<IT>(i);
    }
  }

  // Every row of [0, rows): spread over the threads, or, with fewer rows than threads, split
  // into segments whose candidates are merged.
  void run(int64_t rows) {
    const int64_t threads = parts_for(kMaxThreads, 1);  // torch's thread count, capped
    int64_t segs = std::min(n / kSegMin, (threads + rows - 1) / rows);
    if (rows < threads && segs >= 2 && k < n) {
      // A segment yields at most min(k, its length) candidates.
      const int64_t longest = (n + segs - 1) / segs;
      const int64_t slot = std::min(k, longest);
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
          emit(r, base, false);
        }
      });
      return;
    }
    // a row costs ~n (k == 1) to ~4n (k > 1, short rows) element-steps, kStepGrain's unit
    const int64_t work = k == 1 ? n : 4 * n;
    const int parts = parts_for(rows, (kStepGrain + work - 1) / work);
    Scratch sc(*this, parts);
    parallel_parts(rows, parts, [&](int64_t b, int64_t e, int part) {
      CT* buf = sc.buf[part].get();
      KT* kb = sc.kb[part].get();
      // This part's rows, in order, guess their threshold from the row before (guessed_rows):
      // its first row has none and reads its data twice (the guess pass, then the others),
      // which pays when the row is short, or over several rows that fit in L2 (longer rows
      // are as fast without: M22 in docs/benchmarks.md, "Measured choices").
      const bool guessing =
          n * esize <= kPrefetchRowMax || (e - b >= 8 && n * esize <= kGuessRowMax);
      if constexpr (std::is_same_v<CT, uint64_t>)
        if (guessing && native != ScalarType::Undefined && k > 1 && k <= kNetMaxK &&
            n >= kGuessMin && n <= INT32_MAX) {
          const bool inc = mask != 0;
          if (native == ScalarType::Float)
            inc ? guessed_rows<float, KeyF32, true>(b, e, buf, kb, nat_f)
                : guessed_rows<float, KeyF32, false>(b, e, buf, kb, nat_f);
          else
            inc ? guessed_rows<int32_t, KeyI32, true>(b, e, buf, kb, nat_i)
                : guessed_rows<int32_t, KeyI32, false>(b, e, buf, kb, nat_i);
          return;
        }
      for (int64_t r = b; r < e; r++) {
        // a short row: fetch a later one while this one's candidates are worked on (the
        // hardware prefetcher alone stays too close), so that its pass reads from cache
        const bool short_row = n * esize <= kPrefetchRowMax;
        if (short_row && r + 1 < e && (native == ScalarType::Undefined || k == 1))
          for (int64_t o = 0; o < n * esize; o += 64) __builtin_prefetch(row(r + 1) + o);
        scan(row(r), 0, n, buf, kb,
             short_row && r + kPrefetchRows < e ? row(r + kPrefetchRows) : nullptr);
        emit(r, buf, k <= kSortedMaxK);
      }
    });
  }
};

}  // namespace
}  // namespace tdo
