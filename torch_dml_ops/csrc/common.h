// Shared code of the C++ CPU kernels: torch's stable ABI, the library's error types and message
// formatting, index loading, and the parallel loop (torch's own thread pool).
//
// Built against the stable ABI only (torch/csrc/stable, torch/headeronly): no ATen, c10 or
// Python headers, so one binary serves every CPython and every torch release that keeps the
// stable ABI of TORCH_TARGET_VERSION (setup.py).
//
// Errors: a kernel throws std::invalid_argument (torch turns it into a Python ValueError),
// std::out_of_range (IndexError) or std::runtime_error (RuntimeError), with the same message the
// Python validation layer (torch_dml_ops/_checks.py) gives for the same rule.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <sys/mman.h>

namespace tdo {

using torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;
using Shape = std::vector<int64_t>;

// ------------------------------------------------------------------------------------------
// torch versions: only what torch 2.10's stable headers have (TORCH_TARGET_VERSION, setup.py)
// ------------------------------------------------------------------------------------------

// A shim call's error code to an exception.  STABLE_TORCH_ERROR_CODE_CHECK (torch 2.13's
// headers on) carries libtorch's own message where the running torch offers it; 2.10-2.12's
// headers have only the header-only TORCH_ERROR_CODE_CHECK (2.13's macro for a 2.10 target).
#ifdef STABLE_TORCH_ERROR_CODE_CHECK
#define TDO_SHIM_CHECK(call) STABLE_TORCH_ERROR_CODE_CHECK(call)
#else
#define TDO_SHIM_CHECK(call) TORCH_ERROR_CODE_CHECK(call)
#endif

// Whether `t` has the strided layout (Tensor::layout() is not in torch 2.10's headers; the
// shim call it wraps is).
inline bool is_strided(const Tensor& t) {
  int32_t layout = 0;
  TDO_SHIM_CHECK(aoti_torch_get_layout(t.get(), &layout));
  return layout == aoti_torch_layout_strided();
}

// Whether `a` and `b` have the same sizes (torch 2.10's HeaderOnlyArrayRef has no operator==).
inline bool same_sizes(const Tensor& a, const Tensor& b) {
  const auto x = a.sizes(), y = b.sizes();
  return std::equal(x.begin(), x.end(), y.begin(), y.end());
}

// "no bad index found": the one home of this sentinel on the C++ side (_tables() reports it).
constexpr int64_t kNoError = INT64_MAX;
// At most this many parallel parts (per-part scratch is sized by it).
constexpr int kMaxThreads = 64;
// Minimum work per thread of the gather and scatter loops, in units of about one tuple plus one
// 64-byte line of slice: 2048 lines is torch's own grain (32768 float32 elements).  Smaller
// calls run on the calling thread alone.
constexpr int64_t kGrain = int64_t(1) << 11;

// ------------------------------------------------------------------------------------------
// SIMD level, chosen at run time
// ------------------------------------------------------------------------------------------

// x86-64 with GCC or clang: kernels are also compiled for AVX2 and AVX-512 (function target
// attributes) and picked at run time; elsewhere only the portable (compiler-vectorized) code.
#if defined(__x86_64__) && defined(__GNUC__)
#define TDO_X86_SIMD 1
#define TDO_TARGET_AVX2 __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt,fma,f16c")))
// GCC also takes the vector width (its generic tuning would keep 256 bits); clang ignores a
// target string it does not know whole, so it gets the features only.
#if defined(__clang__)
#define TDO_AVX512_WIDTH ""
#else
#define TDO_AVX512_WIDTH ",prefer-vector-width=512"
#endif
#define TDO_TARGET_AVX512                                                                   \
  __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt,fma,f16c,avx512f,avx512bw,avx512dq,"   \
                        "avx512vl" TDO_AVX512_WIDTH)))
#endif

// The widest instruction set the kernels use: the CPU's (AVX-512 means F, BW, DQ and VL),
// capped by the environment variable TORCH_DML_OPS_CPU_ISA ("scalar", "avx2" or "avx512",
// read once, at the first call; anything else is ignored) so that each path can be tested and
// compared on one machine.  "scalar" is the portable code (SSE2, the x86-64 baseline, there).
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };
Isa cpu_isa();
const char* isa_name(Isa isa);

// ------------------------------------------------------------------------------------------
// str arguments
// ------------------------------------------------------------------------------------------

// A str argument of the op schema.  torch's own conversion for a std::string parameter
// (ToImpl<std::string> in torch/csrc/stable/stableivalue_conversions.h, as of torch 2.13) leaks
// the std::string object it allocates: 48 bytes a call, and the leaked objects can split the
// heap so that a small call's freed output is never reused (measured: +33 KB of RSS and 30-40 us
// more per call of a 32 KB gather, in some processes).  This conversion copies the characters
// (no allocation up to 15 of them) and frees torch's string.
struct StrArg {
  std::string value;
};

}  // namespace tdo


HIDDEN_NAMESPACE_BEGIN(torch, stable, detail)
template <>
struct ToImpl<tdo::StrArg> {
  static tdo::StrArg call(StableIValue val, [[maybe_unused]] uint64_t extension_build_version,
                          [[maybe_unused]] bool is_internal) {
    StringHandle handle = to<StringHandle>(val);
    size_t length = 0;
    const char* data = nullptr;
    const bool ok = torch_string_length(handle, &length) == AOTI_TORCH_SUCCESS &&
                    torch_string_c_str(handle, &data) == AOTI_TORCH_SUCCESS;
    tdo::StrArg arg{ok ? std::string(data, length) : std::string()};
    TDO_SHIM_CHECK(torch_delete_string(handle));
    STD_TORCH_CHECK(ok, "cannot read a str argument");
    return arg;
  }
};
HIDDEN_NAMESPACE_END(torch, stable, detail)

namespace tdo {

// ------------------------------------------------------------------------------------------
// Errors
// ------------------------------------------------------------------------------------------

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream ss;
  (ss << ... << args);
  return ss.str();
}

// ConstraintError and ConstraintTypeError of the Python layer: ValueError through torch.ops.
template <typename... Args>
[[noreturn]] void value_error(const Args&... args) {
  throw std::invalid_argument(cat(args...));
}

// IndexError (an index value, or an axis, out of range).
template <typename... Args>
[[noreturn]] void index_error(const Args&... args) {
  throw std::out_of_range(cat(args...));
}

// RuntimeError (memory overlap, storage too small: what torch raises for those).
template <typename... Args>
[[noreturn]] void runtime_error(const Args&... args) {
  throw std::runtime_error(cat(args...));
}

// ------------------------------------------------------------------------------------------
// Python-style formatting (messages equal the Python layer's f-strings)
// ------------------------------------------------------------------------------------------

template <typename Seq>
std::string py_tuple(const Seq& xs) {
  std::ostringstream ss;
  ss << '(';
  size_t n = 0;
  for (auto x : xs) {
    if (n++) ss << ", ";
    ss << x;
  }
  if (n == 1) ss << ',';
  ss << ')';
  return ss.str();
}

// Python's repr() of a str: the quote Python picks; backslash escapes of that quote, backslash,
// newline, return and tab; other ASCII controls and the non-printable Latin-1 code points
// (U+0080..U+00A0, U+00AD) as \xNN.  Other non-ASCII characters are kept (Python escapes a few
// more).
inline std::string py_repr(std::string_view s) {
  const bool single = s.find('\'') != std::string_view::npos;
  const bool dbl = s.find('"') != std::string_view::npos;
  const char q = single && !dbl ? '"' : '\'';
  static const char* hex = "0123456789abcdef";
  std::string out(1, q);
  for (size_t i = 0; i < s.size(); i++) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    unsigned code = c;
    if (c == 0xC2 && i + 1 < s.size()) {  // UTF-8 of U+0080..U+00BF
      unsigned char d = static_cast<unsigned char>(s[i + 1]);
      if ((d >= 0x80 && d <= 0xA0) || d == 0xAD) {
        code = d;
        i++;
      }
    }
    if (code == static_cast<unsigned char>(q) || code == '\\') {
      out += '\\';
      out += static_cast<char>(code);
    } else if (code == '\n') {
      out += "\\n";
    } else if (code == '\r') {
      out += "\\r";
    } else if (code == '\t') {
      out += "\\t";
    } else if (code < 0x20 || code == 0x7F || code != c) {
      out += "\\x";
      out += hex[code >> 4];
      out += hex[code & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

inline Shape shape_of(const Tensor& t) {
  auto s = t.sizes();
  return Shape(s.begin(), s.end());
}

inline Shape strides_of(const Tensor& t) {
  auto s = t.strides();
  return Shape(s.begin(), s.end());
}

// The product of s[begin:end]: 0 when any size is 0 (whatever the others), an error when it
// does not fit in int64 (a shape passed as a list, e.g. gather_nd_backward's input_shape, can
// describe more elements than any tensor holds).
inline int64_t prod(const Shape& s, size_t begin = 0, size_t end = SIZE_MAX) {
  end = std::min(end, s.size());
  for (size_t i = begin; i < end; i++)
    if (s[i] == 0) return 0;
  int64_t p = 1;
  for (size_t i = begin; i < end; i++)
    if (__builtin_mul_overflow(p, s[i], &p))
      value_error("sizes ", py_tuple(s), " describe more than 2**63 - 1 elements");
  return p;
}

// Up to this many dimensions, a Dims lives on the stack (a small call allocates nothing).
constexpr size_t kInlineDims = 16;

// A list of sizes or strides: inline up to kInlineDims, on the heap beyond.
class Dims {
 public:
  Dims() = default;
  Dims(const Dims&) = delete;
  Dims& operator=(const Dims&) = delete;
  void resize(size_t n) {
    n_ = n;
    if (n > kInlineDims) {
      heap_.resize(n);
      p_ = heap_.data();
    } else {
      p_ = inline_;
    }
  }
  void assign(const int64_t* b, const int64_t* e) {
    resize(static_cast<size_t>(e - b));
    std::copy(b, e, p_);
  }
  int64_t& operator[](size_t i) { return p_[i]; }
  int64_t operator[](size_t i) const { return p_[i]; }
  const int64_t* data() const { return p_; }
  size_t size() const { return n_; }
  Shape vec() const { return Shape(p_, p_ + n_); }

 private:
  int64_t inline_[kInlineDims];
  std::vector<int64_t> heap_;
  int64_t* p_ = inline_;
  size_t n_ = 0;
};

// torch's spelling of a dtype: "torch.float32".
const char* dtype_name(ScalarType t);
// DirectML's name of a dtype: "FLOAT32", "BOOL (no DML equivalent)".
const char* dml_type_name(ScalarType t);
// torch's spelling of a tensor's device: "cpu", "cuda:0", "meta".
std::string device_name(const Tensor& t);

// ------------------------------------------------------------------------------------------
// Index dtypes
// ------------------------------------------------------------------------------------------

enum IndexKind { kI32 = 0, kI64 = 1, kU32 = 2, kU64 = 3 };

// The kind of an index dtype, or -1.
inline int index_kind(ScalarType t) {
  switch (t) {
    case ScalarType::Int: return kI32;
    case ScalarType::Long: return kI64;
    case ScalarType::UInt32: return kU32;
    case ScalarType::UInt64: return kU64;
    default: return -1;
  }
}

inline bool index_signed(int kind) { return kind == kI32 || kind == kI64; }

// f(std::integral_constant<int, K>{}) for the index kind K of `kind`: one instantiation of a
// kernel loop per index dtype, chosen once per call.
template <class F>
decltype(auto) with_index_kind(int kind, F&& f) {
  switch (kind) {
    case kI32: return f(std::integral_constant<int, kI32>{});
    case kU32: return f(std::integral_constant<int, kU32>{});
    case kU64: return f(std::integral_constant<int, kU64>{});
    default: return f(std::integral_constant<int, kI64>{});
  }
}

// Index i of an index array as a signed 64-bit value; uint64 values of 2**63 or more come back
// negative, which callers treat as out of range for an unsigned kind (they never wrap).
inline int64_t load_index(const void* p, int kind, int64_t i) {
  switch (kind) {
    case kI32: return static_cast<const int32_t*>(p)[i];
    case kU32: return static_cast<int64_t>(static_cast<const uint32_t*>(p)[i]);
    case kU64: return static_cast<int64_t>(static_cast<const uint64_t*>(p)[i]);
    default: return static_cast<const int64_t*>(p)[i];
  }
}

// A negative index of a signed kind counts from the end: the position in [0, size), or -1.
inline int64_t wrap_check(int64_t v, int64_t size, bool is_signed) {
  if (v < 0) {
    if (!is_signed) return -1;
    v += size;
    if (v < 0) return -1;
  }
  return v < size ? v : -1;
}

// Atomic min of a shared first-error position (kNoError when nothing was found).
inline void record_error(std::atomic<int64_t>& first_bad, int64_t pos) {
  int64_t cur = first_bad.load(std::memory_order_relaxed);
  while (pos < cur && !first_bad.compare_exchange_weak(cur, pos, std::memory_order_relaxed)) {
  }
}

// ------------------------------------------------------------------------------------------
// Parallel loop on torch's thread pool
// ------------------------------------------------------------------------------------------

// Parts [0, n) is split into: at most torch.get_num_threads() (and kMaxThreads), none with
// fewer than `grain` items; 1 means "run on the calling thread".
inline int parts_for(int64_t n, int64_t grain) {
  int64_t threads = static_cast<int64_t>(torch::stable::get_num_threads());
  threads = std::max<int64_t>(1, std::min<int64_t>(threads, kMaxThreads));
  int64_t p = n / std::max<int64_t>(grain, 1);
  return static_cast<int>(std::max<int64_t>(1, std::min(p, threads)));
}

// fn(begin, end, part) for `parts` contiguous ranges of [0, n) (part numbers are stable, for
// per-part scratch), on torch's intra-op pool: torch.set_num_threads governs it and no thread
// is started per call.  fn must not throw.
template <class F>
void parallel_parts(int64_t n, int parts, const F& fn) {
  if (n <= 0) return;
  if (parts <= 1) {
    fn(int64_t(0), n, 0);
    return;
  }
  torch::stable::parallel_for(0, parts, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; p++) fn(n * p / parts, n * (p + 1) / parts, static_cast<int>(p));
  });
}

// ------------------------------------------------------------------------------------------
// Fresh outputs
// ------------------------------------------------------------------------------------------

// Outputs at least this large are hinted to be backed by transparent huge pages before their
// first write: first-touch page faults otherwise cost more than the gather or scatter that
// fills them (3.6 GB/s with 4 KiB pages, about twice that with 2 MiB pages, measured).
constexpr int64_t kHugepageMinBytes = int64_t(8) << 20;

inline void hugepage_hint(void* p, int64_t len) {
#ifdef MADV_HUGEPAGE
  if (len < kHugepageMinBytes) return;
  const uintptr_t huge = uintptr_t(1) << 21;
  uintptr_t s = (reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1);
  uintptr_t e = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(len)) & ~(huge - 1);
  if (e > s) madvise(reinterpret_cast<void*>(s), e - s, MADV_HUGEPAGE);
#else
  (void)p;
  (void)len;
#endif
}

// A new contiguous CPU tensor of `sizes` (IntRef, Dims or Shape) with `like`'s dtype and device:
// aoti_torch_empty_strided allocates without a dispatcher round-trip.  A shape whose contiguous
// strides overflow (sizes next to an empty dimension can) is refused as torch refuses it.
// Hinted as above when large.
template <class Sizes>
Tensor empty_contiguous(const Tensor& like, const Sizes& sizes) {
  const size_t nd = sizes.size();
  Dims strides;
  strides.resize(nd);
  int64_t s = 1;
  for (size_t d = nd; d-- > 0;) {
    strides[d] = s;
    if (d > 0 && __builtin_mul_overflow(s, std::max<int64_t>(sizes[d], 1), &s))
      runtime_error("Stride calculation overflowed");
  }
  int32_t dtype = 0;
  TDO_SHIM_CHECK(aoti_torch_get_dtype(like.get(), &dtype));
  AtenTensorHandle h = nullptr;
  TDO_SHIM_CHECK(aoti_torch_empty_strided(static_cast<int64_t>(nd), sizes.data(), strides.data(),
                                          dtype, aoti_torch_device_type_cpu(),
                                          like.get_device_index(), &h));
  Tensor t(h);
  hugepage_hint(t.data_ptr(), t.numel() * static_cast<int64_t>(t.element_size()));
  return t;
}

// A new contiguous CPU tensor of `shape` and another `dtype` than any input's (through the
// dispatcher: top_k1's indices, the backward's float accumulator), hinted as above when large.
inline Tensor new_output(const Tensor& like, const Shape& shape, ScalarType dtype) {
  Tensor t = torch::stable::new_empty(like, shape, dtype);
  hugepage_hint(t.data_ptr(), t.numel() * static_cast<int64_t>(t.element_size()));
  return t;
}

}  // namespace tdo
