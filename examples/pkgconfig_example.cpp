// Built with nothing but pkg-config:
//   c++ pkgconfig_example.cpp $(pkg-config --cflags --libs ejk) -o pkgconfig_example
// Multiplies two small integer matrices with ejk::matmul on the CPU; the product is exact.
#include <cstdio>
#include <exception>
#include <vector>

#include <ejk/ejk.hpp>

int main() try {
  ejk::Context ctx("cpu");
  const std::vector<double> a{1, 2, 3, 4, 5, 6};     // 2 x 3
  const std::vector<double> b{7, 8, 9, 10, 11, 12};  // 3 x 2
  const std::vector<double> want{58, 64, 139, 154};
  ejk::Tensor c = ejk::matmul(ctx, ctx.from({2, 3}, ejk::DType::f32, a), ctx.from({3, 2}, ejk::DType::f32, b));
  ctx.device().synchronize();
  const std::vector<double> got = c.read();
  std::printf("ejk %s: [[%g, %g], [%g, %g]]\n", std::string(ejk::tool_version()).c_str(), got[0], got[1], got[2], got[3]);
  if (got != want) {
    std::printf("FAILED: expected [[58, 64], [139, 154]]\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::printf("FAILED: %s\n", e.what());
  return 1;
}
