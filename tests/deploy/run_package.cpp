// run_package: run an AOTInductor package (.pt2) that calls torch_dml_ops ops, with no Python.
//
//   run_package MODEL.pt2 DIR [RUNS] [--as-given]
//
// Reads the inputs from DIR/inputs.txt (one line per tensor: "<dtype> <ndim> <sizes...>", dtype
// as c10 names it: Float, Long, Int, ...; optionally followed by "strides <strides...>": the
// tensor is then built with those strides, as a view such as ids[:, 0] is) and DIR/in<i>.bin (its
// values, contiguous little-endian bytes), runs the model RUNS times (default 1; a model with a
// mutated buffer, such as a KV cache, carries its state from one run to the next), and writes
// each run's outputs the same way: DIR/outputs<run>.txt and DIR/out<run>_<i>.bin.
// tests/test_deploy.py builds and runs it.
//
// Input strides: a package reads every input as if it had the strides of the example input it
// was exported with, without checking them, so a strided view with the right values gives wrong
// results, silently.  Hence (README "Deploy"): every input is made contiguous, the layout of the
// example inputs of the packages exported here (a note on stderr for each that was not), and
// AOTI_RUNTIME_CHECK_INPUTS=1 is set unless already set, so that the package itself refuses an
// input whose dtype, sizes or strides (those fixed at compile time) differ from its example's.
// --as-given passes the inputs with their own strides (then that check is what catches them).
//
// Build (tests/test_deploy.py; README "Deploy"): link libtorch and torch_dml_ops/_C.abi3.so, the
// latter with -Wl,--no-as-needed: nothing here names a symbol of it, and its static
// initializers are what define the torch_dml_ops ops (schemas and CPU kernels) in this process.
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace {

c10::ScalarType parse_dtype(const std::string& name) {
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    auto t = static_cast<c10::ScalarType>(i);
    if (name == c10::toString(t)) return t;
  }
  throw std::runtime_error("unknown dtype " + name);
}

std::vector<at::Tensor> read_tensors(const std::string& dir) {
  std::ifstream header(dir + "/inputs.txt");
  if (!header) throw std::runtime_error("cannot open " + dir + "/inputs.txt");
  std::vector<at::Tensor> tensors;
  std::string line;
  while (std::getline(header, line)) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string dtype;
    int64_t ndim = 0;
    fields >> dtype >> ndim;
    std::vector<int64_t> sizes(ndim);
    for (auto& s : sizes) fields >> s;
    if (!fields) throw std::runtime_error("bad line in inputs.txt: " + line);
    auto options = at::TensorOptions().dtype(parse_dtype(dtype));
    at::Tensor t = at::empty(sizes, options);
    std::string path = dir + "/in" + std::to_string(tensors.size()) + ".bin";
    std::ifstream data(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(data)),
                            std::istreambuf_iterator<char>());
    if (bytes.size() != t.nbytes()) throw std::runtime_error(path + ": wrong size");
    std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    std::string word;
    if (fields >> word) {
      std::vector<int64_t> strides(ndim);
      for (auto& s : strides) fields >> s;
      if (word != "strides" || !fields) throw std::runtime_error("bad line in inputs.txt: " + line);
      t = at::empty_strided(sizes, strides, options).copy_(t);
    }
    tensors.push_back(t);
  }
  return tensors;
}

void write_tensors(const std::string& dir, int run, const std::vector<at::Tensor>& tensors) {
  std::ofstream header(dir + "/outputs" + std::to_string(run) + ".txt");
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor t = tensors[i].contiguous();
    header << c10::toString(t.scalar_type()) << ' ' << t.dim();
    for (int64_t s : t.sizes()) header << ' ' << s;
    header << '\n';
    std::ofstream data(dir + "/out" + std::to_string(run) + "_" + std::to_string(i) + ".bin",
                       std::ios::binary);
    data.write(static_cast<const char*>(t.const_data_ptr()), t.nbytes());
  }
}

// Every input contiguous, as the example inputs were; a note for each that was not.
void make_contiguous(std::vector<at::Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_contiguous()) continue;
    std::cerr << "run_package: input " << i << ": strides (";
    for (size_t d = 0; d < inputs[i].strides().size(); ++d)
      std::cerr << (d ? ", " : "") << inputs[i].strides()[d];
    std::cerr << ") made contiguous\n";
    inputs[i] = inputs[i].contiguous();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || (argc > 4 && std::string(argv[4]) != "--as-given") || argc > 5) {
    std::cerr << "usage: " << argv[0] << " MODEL.pt2 DIR [RUNS] [--as-given]\n";
    return 2;
  }
  // Read by the package at its first run: it then checks every input against its example's
  // dtype, sizes and compile-time strides.
  setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", /*overwrite=*/0);
  try {
    torch::inductor::AOTIModelPackageLoader loader(argv[1]);
    std::vector<at::Tensor> inputs = read_tensors(argv[2]);
    int runs = argc > 3 ? std::stoi(argv[3]) : 1;
    if (argc <= 4) make_contiguous(inputs);
    for (int run = 0; run < runs; ++run) write_tensors(argv[2], run, loader.run(inputs));
  } catch (const std::exception& e) {
    std::cerr << "run_package: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
