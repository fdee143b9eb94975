#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <algorithm>
#include <cmath>
#define CK(x) do { cl_int e_ = (x); if (e_) { std::printf("%s -> %d\n", #x, e_); std::exit(1); } } while (0)
static std::string slurp(const char* p) { std::ifstream f(p); std::stringstream ss; ss << f.rdbuf(); return ss.str(); }
// probe2 FILE "OPTIONS" [peak]
int main(int argc, char** argv) {
  std::string src = slurp(argv[1]);
  std::string opts = std::string(argv[2]) + " -cl-nv-verbose -cl-std=CL1.2";
  cl_platform_id ps[8]; cl_uint np; CK(clGetPlatformIDs(8, ps, &np));
  for (cl_uint pi = 0; pi < np; ++pi) {
    char name[256]; clGetPlatformInfo(ps[pi], CL_PLATFORM_NAME, 256, name, nullptr);
    if (!std::string(name).starts_with("NVIDIA")) continue;
    cl_device_id d; CK(clGetDeviceIDs(ps[pi], CL_DEVICE_TYPE_GPU, 1, &d, nullptr));
    cl_ulong lm; clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lm, &lm, nullptr);
    std::printf("local mem %llu\n", (unsigned long long)lm);
    cl_int e; cl_context ctx = clCreateContext(nullptr, 1, &d, nullptr, nullptr, &e); CK(e);
    cl_command_queue q = clCreateCommandQueue(ctx, d, CL_QUEUE_PROFILING_ENABLE, &e); CK(e);
    const char* s = src.c_str(); size_t len = src.size();
    cl_program prog = clCreateProgramWithSource(ctx, 1, &s, &len, &e); CK(e);
    e = clBuildProgram(prog, 1, &d, opts.c_str(), nullptr, nullptr);
    static char log[1 << 20]; clGetProgramBuildInfo(prog, d, CL_PROGRAM_BUILD_LOG, sizeof log, log, nullptr);
    std::printf("build %d\n%s\n", e, log); if (e) return 1;
    if (argc > 3 && std::string(argv[3]) == "gemm") {
      int BM = atoi(argv[4]), BN = atoi(argv[5]), WM = atoi(argv[6]), WN = atoi(argv[7]);
      int M = 4096, N = 4096, K = 4096;
      cl_kernel k = clCreateKernel(prog, "gemm_mma", &e); CK(e);
      size_t bytes = (size_t)M * K * 2;
      std::vector<unsigned short> h(bytes / 2);
      for (size_t i = 0; i < h.size(); ++i) h[i] = 0x3c00 ^ (unsigned short)((i * 2654435761u) >> 20 & 0x3ff);
      cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, h.data(), &e); CK(e);
      cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, h.data(), &e); CK(e);
      cl_mem c = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, nullptr, &e); CK(e);
      float alpha = 1, beta = 0; long long zero = 0;
      int ai = 0;
      CK(clSetKernelArg(k, ai++, 4, &M)); CK(clSetKernelArg(k, ai++, 4, &N)); CK(clSetKernelArg(k, ai++, 4, &K));
      CK(clSetKernelArg(k, ai++, 4, &alpha)); CK(clSetKernelArg(k, ai++, 4, &beta));
      CK(clSetKernelArg(k, ai++, sizeof a, &a)); CK(clSetKernelArg(k, ai++, 4, &K)); CK(clSetKernelArg(k, ai++, 8, &zero));
      CK(clSetKernelArg(k, ai++, sizeof b, &b)); CK(clSetKernelArg(k, ai++, 4, &N)); CK(clSetKernelArg(k, ai++, 8, &zero));
      CK(clSetKernelArg(k, ai++, sizeof c, &c)); CK(clSetKernelArg(k, ai++, 4, &N)); CK(clSetKernelArg(k, ai++, 8, &zero));
      size_t local[2] = {(size_t)WM * WN * 32, 1}, global[2] = {(size_t)(M / BM) * (N / BN) * local[0], 1};
      std::vector<double> ms;
      for (int rep = 0; rep < 15; ++rep) {
        cl_event ev; CK(clEnqueueNDRangeKernel(q, k, 2, nullptr, global, local, 0, nullptr, &ev)); CK(clWaitForEvents(1, &ev));
        cl_ulong t0, t1; clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, 8, &t0, nullptr); clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, 8, &t1, nullptr);
        ms.push_back((t1 - t0) * 1e-6);
      }
      {  // sampled check of C = A B (A and B the same buffer h, row-major, f16 out)
        std::vector<unsigned short> hc(bytes / 2);
        CK(clEnqueueReadBuffer(q, c, CL_TRUE, 0, bytes, hc.data(), 0, nullptr, nullptr));
        auto f = [](unsigned short x) { int e = (x >> 10) & 31, m = x & 1023; double v = e ? std::ldexp(1.0 + m / 1024.0, e - 15) : std::ldexp(m / 1024.0, -14); return (x & 0x8000) ? -v : v; };
        double worst = 0;
        for (int s = 0; s < 64; ++s) {
          const int i = (s * 977) % M, j = (s * 1543 + 7) % N;
          double ref = 0;
          for (int kk = 0; kk < K; ++kk) ref += f(h[(size_t)i * K + kk]) * f(h[(size_t)kk * N + j]);
          worst = std::max(worst, std::fabs(f(hc[(size_t)i * N + j]) - ref) / std::fabs(ref));
        }
        std::printf("check: max relative error of 64 sampled entries %.2e\n", worst);
      }
      std::sort(ms.begin(), ms.end());
      std::printf("GEMM %s: %.1f TFLOP/s (%.3f ms)\n", argv[2], 2.0 * M * N * K / (ms[7] * 1e-3) / 1e12, ms[7]);
    } else if (argc > 3) {
      cl_kernel k = clCreateKernel(prog, "peak", &e); CK(e);
      size_t local = 128, global = 132 * 16 * local;
      cl_mem o = clCreateBuffer(ctx, CL_MEM_READ_WRITE, global * 4, nullptr, &e); CK(e);
      int iters = 20000;
      CK(clSetKernelArg(k, 0, sizeof o, &o)); CK(clSetKernelArg(k, 1, sizeof iters, &iters));
      for (int rep = 0; rep < 3; ++rep) {
        cl_event ev; CK(clEnqueueNDRangeKernel(q, k, 1, nullptr, &global, &local, 0, nullptr, &ev)); CK(clWaitForEvents(1, &ev));
        cl_ulong t0, t1; clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, 8, &t0, nullptr); clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, 8, &t1, nullptr);
        double flops = (double)(global / 32) * iters * 8 * 4096.0;
        std::printf("mma.sync peak: %.1f TFLOP/s (%.3f ms)\n", flops / ((t1 - t0) * 1e-9) / 1e12, (t1 - t0) * 1e-6);
      }
    }
  }
}
