#pragma once
// OpenCL C sources as CUDA C++ for NVRTC: the kernels' GPU code runs on the CUDA backend as it
// is (the issue of sharing one source, not rewriting it per backend).
#include <string>
#include <string_view>
#include <vector>

namespace ejk::cuda {

struct Translated {
  std::string source;                // the CUDA C++ text: the prelude, then the rewritten source
  std::vector<std::string> options;  // NVRTC options from the OpenCL build options
};

// `source` (includes already spliced in) as CUDA C++ for NVRTC, with the options it needs. What
// the preprocessor cannot do is done on the text: __global and pointer __local qualifiers are
// dropped (NVVM infers shared memory through inlining), __local arrays become __shared__,
// vector literals "(float4)(a, b, c, d)" become calls, and a source with
// "#pragma OPENCL FP_CONTRACT OFF" is compiled without contraction (-fmad=false).
Translated translate_opencl_c(std::string_view source);

// OpenCL build options ("-DX=1 -cl-mad-enable") as NVRTC's. Throws InvalidArgument for an option
// with no counterpart.
std::vector<std::string> translate_options(std::string_view options);

// Where compile() puts the -D options, as #define lines: after the prelude, whose templates name
// parameters T and N that a source's options may define (NVRTC applies -D before its own headers
// too, which breaks them the same way).
inline constexpr std::string_view kDefinesHere = "// ejk: build options\n";

// The prelude's text (opencl_c_prelude.cuh).
std::string_view opencl_c_prelude();

}  // namespace ejk::cuda
