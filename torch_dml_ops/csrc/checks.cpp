// The C++ kernels' checks (checks.h); the messages are _data.MESSAGES (msg::*, filled by fill()).
#include "checks.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace tdo {

namespace {

const DtypeRow* find_dtype(ScalarType t) {
  for (const auto& r : kDtypes)
    if (r.t == t) return &r;
  return nullptr;
}

std::string type_list() {
  std::string s;
  for (const auto& r : kDtypes) {
    if (!s.empty()) s += ", ";
    s += r.torch_name + 6;  // drop "torch."
  }
  return s;
}

template <size_t N>
bool in(ScalarType t, const ScalarType (&dtypes)[N]) {
  return std::find(std::begin(dtypes), std::end(dtypes), t) != std::end(dtypes);
}

int64_t extent(const Tensor& t) {
  // elements from the first to one past the last (t has elements)
  if (t.is_contiguous()) return t.numel();
  int64_t e = 1;
  auto sizes = t.sizes();
  auto strides = t.strides();
  for (size_t d = 0; d < sizes.size(); d++) e += (sizes[d] - 1) * strides[d];
  return e;
}

std::pair<uintptr_t, uintptr_t> byte_span(const Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  auto start = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {start, start + static_cast<uintptr_t>(extent(t)) * t.element_size()};
}

// Whether two strided tensors share a byte (_checks._overlap_within, step for step: the same
// answers, "too hard" after the same kOverlapWork steps).
enum Overlap { kOverlapNo = 0, kOverlapYes = 1, kOverlapTooHard = 2 };

// (byte stride, size - 1) of each dim that moves, and (1, element size - 1).
void overlap_terms(const Tensor& t, std::vector<std::pair<int64_t, int64_t>>& terms) {
  const int64_t es = static_cast<int64_t>(t.element_size());
  auto sizes = t.sizes();
  auto strides = t.strides();
  for (size_t d = 0; d < sizes.size(); d++)
    if (sizes[d] > 1 && strides[d] != 0)
      terms.emplace_back(std::abs(strides[d]) * es, sizes[d] - 1);
  if (es > 1) terms.emplace_back(1, es - 1);
}

int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    const int64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

// sum(a * x) == rhs with 0 <= x <= u, every a > 0 (_checks._solve_bounded: merged equal
// coefficients, bounds trimmed to rhs / a, a depth-first search from the largest coefficient
// whose remainders must lie within reach of the smaller terms and be multiples of their gcd).
// Every value stays below 2 * rhs + 2 < 2**63 (rhs < 2**62).
struct BoundedSearch {
  std::vector<std::pair<int64_t, int64_t>> E;  // (a, u), a decreasing
  std::vector<int64_t> reach, gcds;
  int64_t work = 0;

  Overlap search(size_t k, int64_t rem) {
    if (rem == 0) return kOverlapYes;
    if (k == E.size() || rem > reach[k] || rem % gcds[k] != 0) return kOverlapNo;
    const auto [a, u] = E[k];
    if (k + 1 == E.size()) return kOverlapYes;  // rem is a multiple of a, at most a * u
    const int64_t below = rem - reach[k + 1];
    const int64_t lo = below > 0 ? (below + a - 1) / a : 0;
    int64_t x = std::min(u, rem / a);
    const int64_t g = gcds[k + 1];
    while (x >= lo && (rem - a * x) % g != 0) {  // the largest x the rest can complete
      x--;
      if (++work > kOverlapWork) return kOverlapTooHard;
    }
    const int64_t step = g / gcd64(a, g);
    while (x >= lo) {
      const Overlap found = search(k + 1, rem - a * x);
      if (found != kOverlapNo) return found;
      x -= step;
      if (++work > kOverlapWork) return kOverlapTooHard;
    }
    return kOverlapNo;
  }
};

Overlap solve_bounded(std::vector<std::pair<int64_t, int64_t>> terms, int64_t rhs) {
  if (rhs < 0) return kOverlapNo;
  if (rhs >= (int64_t{1} << 62)) return kOverlapTooHard;
  std::sort(terms.begin(), terms.end(),
            [](const auto& l, const auto& r) { return l.first > r.first; });
  BoundedSearch s;
  for (const auto& [a, u] : terms) {
    const int64_t cap = rhs / a;
    if (!s.E.empty() && s.E.back().first == a)
      s.E.back().second = std::min(s.E.back().second + std::min(u, cap), cap);
    else
      s.E.emplace_back(a, std::min(u, cap));
  }
  s.E.erase(std::remove_if(s.E.begin(), s.E.end(), [](const auto& e) { return e.second == 0; }),
            s.E.end());
  const size_t n = s.E.size();
  s.reach.assign(n + 1, 0);
  s.gcds.assign(n + 1, 0);
  for (size_t k = n; k-- > 0;) {
    s.reach[k] = std::min(s.reach[k + 1] + s.E[k].first * s.E[k].second, rhs + 1);
    s.gcds[k] = gcd64(s.gcds[k + 1], s.E[k].first);
  }
  return s.search(0, rhs);
}

// Whether a and b share a byte, given their byte spans (_checks._overlap_within).
Overlap overlap_within(const Tensor& a, std::pair<uintptr_t, uintptr_t> a_span, const Tensor& b,
                       std::pair<uintptr_t, uintptr_t> b_span) {
  const auto [a_start, a_end] = a_span;
  const auto [b_start, b_end] = b_span;
  if (!(a_start < b_end && b_start < a_end)) return kOverlapNo;
  const int64_t rhs = static_cast<int64_t>(std::min(b_end - 1 - a_start, a_end - 1 - b_start));
  std::vector<std::pair<int64_t, int64_t>> terms;
  overlap_terms(a, terms);
  overlap_terms(b, terms);
  return solve_bounded(std::move(terms), rhs);
}

std::string layout_text(const Tensor& t) {
  return fill(msg::layout, {{"sizes", py_tuple(t.sizes())}, {"strides", py_tuple(t.strides())},
                            {"offset", t.storage_offset()}, {"itemsize", t.element_size()}});
}

bool has_internal_overlap(const Tensor& t) {
  if (t.is_contiguous() || t.numel() <= 1) return false;
  auto sizes = t.sizes();
  auto strides = t.strides();
  std::vector<std::pair<int64_t, int64_t>> dims;  // (|stride|, size) of dims with size > 1
  for (size_t d = 0; d < sizes.size(); d++)
    if (sizes[d] > 1) dims.emplace_back(std::abs(strides[d]), sizes[d]);
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // the largest offset reachable with the dims so far
  bool simple = true;
  for (auto [st, sz] : dims) {
    if (st <= reach) {
      simple = false;
      break;
    }
    reach += (sz - 1) * st;
  }
  if (simple) return false;
  if (dims[0].first == 0) return true;
  // Rare interleaved or overlapping layouts: count the distinct offsets.
  std::set<int64_t> offsets{0};
  for (auto [st, sz] : dims) {
    std::set<int64_t> next;
    for (int64_t o : offsets)
      for (int64_t i = 0; i < sz; i++) next.insert(o + i * st);
    offsets.swap(next);
  }
  return static_cast<int64_t>(offsets.size()) < t.numel();
}

}  // namespace

const char* dtype_name(ScalarType t) {
  const DtypeRow* r = find_dtype(t);
  if (r) return r->torch_name;
  switch (t) {
    case ScalarType::ComplexFloat: return "torch.complex64";
    case ScalarType::ComplexDouble: return "torch.complex128";
    case ScalarType::ComplexHalf: return "torch.complex32";
    case ScalarType::Float8_e5m2: return "torch.float8_e5m2";
    case ScalarType::Float8_e4m3fn: return "torch.float8_e4m3fn";
    case ScalarType::Float8_e5m2fnuz: return "torch.float8_e5m2fnuz";
    case ScalarType::Float8_e4m3fnuz: return "torch.float8_e4m3fnuz";
    case ScalarType::Float8_e8m0fnu: return "torch.float8_e8m0fnu";
    default: return "an unsupported dtype";
  }
}

const char* dml_type_name(ScalarType t) {
  const DtypeRow* r = find_dtype(t);
  return r ? r->dml_name : dtype_name(t);
}

std::string device_name(const Tensor& t) {
  auto dev = t.device();
  const char* type;
  switch (dev.type()) {
    case torch::headeronly::DeviceType::CPU: type = "cpu"; break;
    case torch::headeronly::DeviceType::CUDA: type = "cuda"; break;
    case torch::headeronly::DeviceType::Meta: type = "meta"; break;
    case torch::headeronly::DeviceType::XPU: type = "xpu"; break;
    case torch::headeronly::DeviceType::MPS: type = "mps"; break;
    case torch::headeronly::DeviceType::HIP: type = "hip"; break;
    default: return cat("device type ", static_cast<int>(dev.type()));
  }
  if (dev.has_index() && dev.type() != torch::headeronly::DeviceType::CPU)
    return cat(type, ':', static_cast<int>(dev.index()));
  return type;
}

std::string fill(const char* message, std::initializer_list<Field> fields) {
  std::string out;
  for (const char* p = message; *p;) {
    const char* open = std::strchr(p, '{');
    if (!open) {
      out += p;
      break;
    }
    out.append(p, open);
    const char* close = std::strchr(open, '}');
    const std::string_view key(open + 1, close ? close - open - 1 : 0);
    const Field* f = nullptr;
    for (const Field& x : fields)
      if (key == x.key) f = &x;
    if (!close || !f) throw std::logic_error(cat("tdo::fill: no field ", key, " for ", message));
    out += f->value;
    p = close + 1;
  }
  return out;
}

std::string dtype_list(const ScalarType* begin, const ScalarType* end) {
  std::string s;
  for (auto t = begin; t != end; t++) {
    if (!s.empty()) s += ", ";
    s += dtype_name(*t) + 6;  // drop "torch."
  }
  return s;
}

void check_data_dtype(const char* op, const char* tensor_name, ScalarType dtype) {
  if (find_dtype(dtype)) return;
  value_error(fill(msg::data_dtype, {{"op", op}, {"name", tensor_name}, {"dtype", dtype_name(dtype)},
                                     {"dml_type", dml_type_name(dtype)}, {"level", kPermissiveName},
                                     {"supported", type_list()}}));
}

void check_index_dtype(const char* op, const char* tensor_name, ScalarType dtype) {
  if (in(dtype, kIndexDtypes)) return;
  value_error(fill(msg::index_dtype,
                   {{"op", op}, {"name", tensor_name}, {"dtype", dtype_name(dtype)},
                    {"dml_type", dml_type_name(dtype)}, {"level", kPermissiveName},
                    {"supported", dtype_list(kIndexDtypes)}, {"hint", ""}}));
}

namespace {
Isa detect_isa() {
  Isa hw = Isa::Scalar;
#ifdef TDO_X86_SIMD
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c"))
    hw = Isa::Avx2;
  if (hw == Isa::Avx2 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    hw = Isa::Avx512;
#endif
  const char* want = std::getenv("TORCH_DML_OPS_CPU_ISA");
  Isa cap = Isa::Avx512;
  if (want) {
    const std::string w(want);
    if (w == "scalar") cap = Isa::Scalar;
    else if (w == "avx2") cap = Isa::Avx2;
  }
  return static_cast<int>(cap) < static_cast<int>(hw) ? cap : hw;
}
}  // namespace

Isa cpu_isa() {
  static const Isa isa = detect_isa();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "scalar";
  }
}

void check_cpu_strided(const char* op, const std::vector<Named>& tensors) {
  const Named& first = tensors[0];
  auto dev = first.t->device();
  for (size_t i = 1; i < tensors.size(); i++)
    if (tensors[i].t->device() != dev)
      value_error(fill(msg::same_device,
                       {{"op", op}, {"name", tensors[i].name}, {"device", device_name(*tensors[i].t)},
                        {"first", first.name}, {"first_device", device_name(*first.t)}}));
  if (!first.t->is_cpu())
    value_error(op, ": ", first.name, " is on ", device_name(*first.t),
                "; this kernel takes CPU tensors");
  for (const auto& n : tensors)
    if (!is_strided(*n.t)) value_error(fill(msg::dense, {{"op", op}, {"name", n.name}}));
}

void check_storage(const char* op, const char* role, const Tensor& t) {
  if (t.numel() == 0) return;
  int64_t have = 0;
  TDO_SHIM_CHECK(aoti_torch_get_storage_size(t.get(), &have));
  int64_t need = (t.storage_offset() + extent(t)) * static_cast<int64_t>(t.element_size());
  if (need > have)
    runtime_error(fill(msg::storage, {{"op", op}, {"name", role}, {"have", have}, {"need", need},
                                      {"shape", py_tuple(t.sizes())},
                                      {"stride", py_tuple(t.strides())},
                                      {"offset", t.storage_offset()},
                                      {"itemsize", t.element_size()}}));
}

bool call_bool(const char* name, const Tensor& t) {
  std::array<StableIValue, 1> stack{torch::stable::detail::from(t)};
  TDO_SHIM_CHECK(
      torch_call_dispatcher(name, "", stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<bool>(stack[0]);
}

bool is_neg(const Tensor& t) {
  // (not aten::is_neg, which reads false for an inference tensor: see resolved)
  return t.numel() > 0 && resolved(t).data_ptr() != t.data_ptr();
}

bool try_mark_written(const Tensor& t) {
  std::array<StableIValue, 2> stack{torch::stable::detail::from(t), torch::stable::detail::from(t)};
  if (torch_call_dispatcher("aten::set_", "source_Tensor", stack.data(), TORCH_ABI_VERSION) !=
      AOTI_TORCH_SUCCESS)
    return false;
  (void)torch::stable::detail::to<Tensor>(stack[0]);  // releases the returned handle
  return true;
}

void mark_written(const char* op, const char* name, const Tensor& t, bool neg) {
  if (try_mark_written(t)) return;
  if (neg || call_bool("aten::is_inference", t))
    runtime_error(fill(msg::inference, {{"op", op}, {"name", name}}));
  runtime_error(op, ": ", name, " cannot be written in place (torch refused to record the write "
                "on its version counter)");
}

Tensor blob(void* data, IntRef sizes, IntRef strides, int32_t dtype, int32_t device_index) {
  AtenTensorHandle h = nullptr;
  TDO_SHIM_CHECK(aoti_torch_create_tensor_from_blob(
      data, static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(), 0, dtype,
      aoti_torch_device_type_cpu(), device_index, &h));
  return Tensor(h);
}

void copy_unrecorded(const Tensor& t, const Tensor& src, bool neg) {
  int32_t dtype = 0;
  TDO_SHIM_CHECK(aoti_torch_get_dtype(t.get(), &dtype));
  Tensor alias = blob(t.data_ptr(), t.sizes(), t.strides(), dtype, t.get_device_index());
  if (neg) {
    std::array<StableIValue, 1> stack{torch::stable::detail::from(alias)};
    TDO_SHIM_CHECK(
        torch_call_dispatcher("aten::_neg_view", "", stack.data(), TORCH_ABI_VERSION));
    alias = torch::stable::detail::to<Tensor>(stack[0]);
  }
  torch::stable::copy_(alias, src);
}

// t with its negative bit materialized (t itself when the bit is clear): one dispatcher call.
// (aten::is_neg, answered through torch's Negative fallback, reads false for an inference
// tensor, which has no Autograd key.)
Tensor resolved(const Tensor& t) {
  std::array<StableIValue, 1> stack{torch::stable::detail::from(t)};
  TDO_SHIM_CHECK(
      torch_call_dispatcher("aten::resolve_neg", "", stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<Tensor>(stack[0]);
}

void check_out(const char* op, const Tensor& out, const Shape& shape, ScalarType dtype,
               const std::vector<Named>& inputs, const char* name) {
  if (out.scalar_type() != dtype)
    value_error(fill(msg::out_dtype, {{"op", op}, {"name", name},
                                      {"dtype", dtype_name(out.scalar_type())},
                                      {"want", dtype_name(dtype)}}));
  if (shape_of(out) != shape)
    value_error(fill(msg::out_shape, {{"op", op}, {"name", name}, {"shape", py_tuple(out.sizes())},
                                      {"want", py_tuple(shape)}}));
  if (!out.is_cpu())
    value_error(fill(msg::out_device,
                     {{"op", op}, {"name", name}, {"device", device_name(out)}, {"want", "cpu"}}));
  if (!is_strided(out)) value_error(fill(msg::dense, {{"op", op}, {"name", name}}));
  if (has_internal_overlap(out))
    runtime_error(fill(msg::internal_overlap, {{"op", op}, {"name", name},
                                               {"sizes", py_tuple(out.sizes())},
                                               {"strides", py_tuple(out.strides())}}));
  const auto o_span = byte_span(out);
  if (o_span.first == o_span.second) return;
  for (const auto& in : inputs) {
    const Overlap status = overlap_within(out, o_span, *in.t, byte_span(*in.t));
    if (status == kOverlapYes)
      runtime_error(fill(msg::overlap, {{"op", op}, {"name", name}, {"input", in.name}}));
    if (status == kOverlapTooHard)
      runtime_error(fill(msg::overlap_too_hard,
                         {{"op", op}, {"name", name}, {"input", in.name}, {"work", kOverlapWork},
                          {"layout", layout_text(out)}, {"input_layout", layout_text(*in.t)}}));
  }
}

// ------------------------------------------------------------------------------------------
// Layout
// ------------------------------------------------------------------------------------------

namespace {

Shape strip_padding(const char* op, const char* name, const char* count_name, const Shape& shape,
                    int64_t count) {
  int64_t n = static_cast<int64_t>(shape.size());
  if (!(1 <= count && count <= n))
    value_error(fill(msg::count_range, {{"op", op}, {"count_name", count_name}, {"name", name},
                                        {"n", n}, {"count", count}}));
  for (int64_t d = 0; d < n - count; d++)
    if (shape[d] != 1)
      value_error(fill(msg::padding_size,
                       {{"op", op}, {"name", name}, {"size", shape[d]}, {"dim", d},
                        {"count_name", count_name}, {"count", count}, {"shape", py_tuple(shape)}}));
  return Shape(shape.begin() + (n - count), shape.end());
}

// Whether a call is in the DML form (both counts given; one alone is an error).
bool dml_form(const char* op, std::optional<int64_t> input_dimension_count,
              std::optional<int64_t> indices_dimension_count) {
  if (!input_dimension_count && !indices_dimension_count) return false;
  auto opt = [](const std::optional<int64_t>& v) { return v ? cat(*v) : std::string("None"); };
  if (!input_dimension_count || !indices_dimension_count)
    value_error(fill(msg::dml_both_counts, {{"op", op},
                                            {"input_count", opt(input_dimension_count)},
                                            {"indices_count", opt(indices_dimension_count)}}));
  return true;
}

}  // namespace

std::string GatherLayout::dim_name(int64_t j, int64_t input_rank) const {
  if (sizes_from) return cat(sizes_from, "[", j, "]");
  int64_t pad = input_rank - static_cast<int64_t>(natural_input_shape.size());
  return cat("InputTensor dimension ", batch_dims + j + pad);
}

GatherLayout gather_layout(const char* op, const Shape& input_shape, const Shape& indices_shape,
                           int64_t batch_dims, std::optional<int64_t> input_dimension_count,
                           std::optional<int64_t> indices_dimension_count,
                           const char* result_name, int64_t min_tuple_size) {
  GatherLayout lay;
  lay.dml_form = dml_form(op, input_dimension_count, indices_dimension_count);
  if (lay.dml_form) {
    size_t n = input_shape.size();
    if (indices_shape.size() != n)
      value_error(fill(msg::dml_indices_rank, {{"op", op}, {"rank", n},
                                               {"got", indices_shape.size()},
                                               {"shape", py_tuple(indices_shape)}}));
    lay.natural_input_shape = strip_padding(op, "InputTensor", "input_dimension_count",
                                            input_shape, *input_dimension_count);
    lay.natural_indices_shape = strip_padding(op, "IndicesTensor", "indices_dimension_count",
                                              indices_shape, *indices_dimension_count);
  } else {
    lay.natural_input_shape = input_shape;
    lay.natural_indices_shape = indices_shape;
  }
  const Shape& ni = lay.natural_input_shape;
  const Shape& nx = lay.natural_indices_shape;
  int64_t r = static_cast<int64_t>(ni.size()), q = static_cast<int64_t>(nx.size());
  if (r < 1) value_error(fill(msg::input_rank, {{"op", op}, {"shape", py_tuple(ni)}}));
  if (q < 1) value_error(fill(msg::indices_rank, {{"op", op}, {"shape", py_tuple(nx)}}));
  if (batch_dims < 0 || batch_dims >= std::min(q, r))
    value_error(fill(msg::batch_dims_range,
                     {{"op", op}, {"q", q}, {"r", r}, {"batch_dims", batch_dims}}));
  int64_t k = nx.back();
  // spec DML_GATHER_ND.md / DML_SCATTER_ND.md: the tuple size cannot exceed the DimensionCount;
  // ONNX GatherND: k >= 1; ONNX ScatterND: k >= 0 (k = 0: every update is the whole input).
  if (!(min_tuple_size <= k && k <= r - batch_dims))
    value_error(fill(msg::tuple_size, {{"op", op}, {"lo", min_tuple_size}, {"hi", r - batch_dims},
                                       {"r", r}, {"batch_dims", batch_dims}, {"k", k},
                                       {"shape", py_tuple(indices_shape)}}));
  for (int64_t d = 0; d < batch_dims; d++)
    if (nx[d] != ni[d])
      value_error(fill(msg::batch_dim_differs, {{"op", op}, {"d", d}, {"indices_size", nx[d]},
                                                {"input_size", ni[d]},
                                                {"batch_dims", batch_dims}}));
  lay.batch_dims = batch_dims;
  lay.k = k;
  lay.natural_out_shape = Shape(nx.begin(), nx.end() - 1);
  lay.natural_out_shape.insert(lay.natural_out_shape.end(), ni.begin() + batch_dims + k, ni.end());
  if (lay.dml_form) {
    size_t n = input_shape.size();
    if (lay.natural_out_shape.size() > n)
      value_error(fill(msg::result_rank, {{"op", op}, {"name", result_name},
                                          {"rank", lay.natural_out_shape.size()},
                                          {"shape", py_tuple(lay.natural_out_shape)}, {"n", n}}));
    lay.out_shape = Shape(n - lay.natural_out_shape.size(), 1);
    lay.out_shape.insert(lay.out_shape.end(), lay.natural_out_shape.begin(),
                         lay.natural_out_shape.end());
  } else {
    lay.out_shape = lay.natural_out_shape;
  }
  lay.batch = prod(ni, 0, batch_dims);
  lay.index_sizes = Shape(ni.begin() + batch_dims, ni.begin() + batch_dims + k);
  lay.slice_len = prod(ni, batch_dims + k);
  lay.n_tuples = prod(lay.natural_out_shape, 0, nx.size() - 1);  // indices.shape[:-1]
  lay.rows = prod(ni, 0, batch_dims + k);  // batch * prod(index_sizes)
  lay.per_batch = lay.batch ? lay.n_tuples / lay.batch : 0;
  return lay;
}

GatherLayout backward_layout(const Shape& grad_shape, const Shape& indices_shape,
                             const Shape& index_sizes, int64_t batch_dims,
                             std::optional<int64_t> input_dimension_count,
                             std::optional<int64_t> indices_dimension_count, Shape& input_shape) {
  const char* op = "gather_nd_backward";
  const int64_t b = batch_dims;
  if (indices_shape.empty())
    value_error(fill(msg::indices_rank, {{"op", "gather_nd"}, {"shape", "()"}}));
  const int64_t n = static_cast<int64_t>(indices_shape.size());
  const bool dml = dml_form("gather_nd", input_dimension_count, indices_dimension_count);
  Shape nat_idx = indices_shape;
  if (dml) {
    nat_idx = strip_padding("gather_nd", "IndicesTensor", "indices_dimension_count",
                            indices_shape, *indices_dimension_count);
    // Its range (the input has the indices' DimensionCount): strip_padding's own check.
    strip_padding("gather_nd", "InputTensor", "input_dimension_count", Shape(n, 1),
                  *input_dimension_count);
  }
  const int64_t q = static_cast<int64_t>(nat_idx.size()), k = nat_idx.back();
  if (!(0 <= b && b < q))
    value_error(fill(msg::batch_dims_range_backward,
                     {{"op", "gather_nd"}, {"q", q}, {"batch_dims", b}}));
  bool sizes_ok = static_cast<int64_t>(index_sizes.size()) == k;
  for (int64_t s : index_sizes) sizes_ok = sizes_ok && s >= 0;
  std::string list = "[";
  for (size_t j = 0; j < index_sizes.size(); j++)
    list += (j ? ", " : "") + cat(index_sizes[j]);
  list += "]";
  if (!sizes_ok) value_error(fill(msg::index_sizes, {{"op", op}, {"k", k}, {"sizes", list}}));
  const int64_t g = static_cast<int64_t>(grad_shape.size());
  int64_t start = 0;  // where the natural-form grad starts
  bool grad_ok = true;
  if (dml) {
    const int64_t trailing = *input_dimension_count - b - k;
    if (trailing < 0)
      value_error(fill(msg::tuple_size, {{"op", "gather_nd"}, {"lo", 1},
                                         {"hi", *input_dimension_count - b},
                                         {"r", *input_dimension_count}, {"batch_dims", b},
                                         {"k", k}, {"shape", py_tuple(indices_shape)}}));
    const int64_t nat_rank = q - 1 + trailing;
    grad_ok = nat_rank <= g;
    start = g - nat_rank;
  }
  grad_ok = grad_ok && g - start >= q - 1;
  for (int64_t d = 0; grad_ok && d < q - 1; d++) grad_ok = grad_shape[start + d] == nat_idx[d];
  if (!grad_ok) {
    Shape lead(nat_idx.begin(), nat_idx.end() - 1);
    value_error(fill(msg::grad_not_output, {{"op", op}, {"shape", py_tuple(grad_shape)},
                                            {"indices_shape", py_tuple(indices_shape)},
                                            {"leading", py_tuple(lead)}}));
  }
  Shape nat_in(grad_shape.begin() + start, grad_shape.begin() + start + b);
  nat_in.insert(nat_in.end(), index_sizes.begin(), index_sizes.end());
  nat_in.insert(nat_in.end(), grad_shape.begin() + start + (q - 1), grad_shape.end());
  input_shape.assign(dml && static_cast<int64_t>(nat_in.size()) < n ? n - nat_in.size() : 0, 1);
  input_shape.insert(input_shape.end(), nat_in.begin(), nat_in.end());
  bool empty = false, too_big = false;
  int64_t numel = 1;
  for (int64_t s : input_shape) {
    empty = empty || s == 0;
    too_big = too_big || __builtin_mul_overflow(numel, s, &numel);
  }
  if (too_big && !empty)
    value_error(fill(msg::grad_too_big, {{"op", op}, {"sizes", list},
                                         {"shape", py_tuple(grad_shape)},
                                         {"input_shape", py_tuple(input_shape)}}));
  GatherLayout lay = gather_layout("gather_nd", input_shape, indices_shape, b,
                                   input_dimension_count, indices_dimension_count);
  lay.sizes_from = "index_sizes";
  if (grad_shape != lay.out_shape)
    value_error(fill(msg::grad_shape, {{"op", op}, {"shape", py_tuple(grad_shape)},
                                       {"want", py_tuple(lay.out_shape)},
                                       {"input_shape", py_tuple(input_shape)},
                                       {"indices_shape", py_tuple(indices_shape)}}));
  return lay;
}

void raise_index_error(const char* op, const void* indices, int kind, int64_t flat,
                       const Shape& index_tensor_shape, const GatherLayout& lay,
                       int64_t input_rank) {
  int64_t j = flat % lay.k;
  bool is_signed = index_signed(kind);
  std::string value = kind == kU64
      ? cat(static_cast<const uint64_t*>(indices)[flat])
      : cat(load_index(indices, kind, flat));
  Shape pos(index_tensor_shape.size());
  int64_t rem = flat;
  for (size_t d = index_tensor_shape.size(); d-- > 0;) {
    pos[d] = rem % index_tensor_shape[d];
    rem /= index_tensor_shape[d];
  }
  int64_t size = lay.index_sizes[j];
  std::string valid = is_signed ? cat('[', -size, ", ", size - 1, ']') : cat("[0, ", size - 1, ']');
  if (size == 0) valid = msg::index_range_empty;
  std::string neg = is_signed ? std::string()
      : fill(msg::index_unsigned, {{"dtype", kind == kU32 ? "torch.uint32" : "torch.uint64"}});
  index_error(fill(msg::index_range, {{"op", op}, {"value", value}, {"position", py_tuple(pos)},
                                      {"dim", lay.dim_name(j, input_rank)}, {"size", size},
                                      {"valid", valid}, {"unsigned", neg}}));
}

}  // namespace tdo
