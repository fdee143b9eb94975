#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#define CK(x) do { cl_int e_ = (x); if (e_) { std::printf("%s -> %d\n", #x, e_); std::exit(1); } } while (0)
int main(int argc, char** argv) {
  std::ifstream f(argv[1]); std::stringstream ss; ss << f.rdbuf(); std::string src = ss.str();
  const char* outdir = argc > 2 ? argv[2] : ".";
  cl_uint np; CK(clGetPlatformIDs(0, nullptr, &np)); std::vector<cl_platform_id> ps(np); CK(clGetPlatformIDs(np, ps.data(), nullptr));
  for (auto p : ps) {
    char name[256]; clGetPlatformInfo(p, CL_PLATFORM_NAME, 256, name, nullptr);
    if (!std::string(name).starts_with("NVIDIA")) continue;
    cl_device_id d; CK(clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 1, &d, nullptr));
    cl_int e; cl_context ctx = clCreateContext(nullptr, 1, &d, nullptr, nullptr, &e); CK(e);
    cl_command_queue q = clCreateCommandQueue(ctx, d, 0, &e); CK(e);
    const char* s = src.c_str(); size_t len = src.size();
    cl_program prog = clCreateProgramWithSource(ctx, 1, &s, &len, &e); CK(e);
    e = clBuildProgram(prog, 1, &d, "-cl-std=CL1.2", nullptr, nullptr);
    char log[65536] = {0}; clGetProgramBuildInfo(prog, d, CL_PROGRAM_BUILD_LOG, sizeof log, log, nullptr);
    std::printf("build %d\n%s\n", e, log); if (e) return 1;
    size_t bs; clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof bs, &bs, nullptr);
    std::vector<unsigned char> bin(bs); unsigned char* bp = bin.data(); clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bp, &bp, nullptr);
    std::ofstream(std::string(outdir) + "/probe.ptx").write((char*)bin.data(), bs);
    { cl_kernel k = clCreateKernel(prog, "addr_kinds", &e); CK(e);
      cl_mem o = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 8 * 8, nullptr, &e); CK(e);
      CK(clSetKernelArg(k, 0, sizeof o, &o)); size_t g = 64, l = 64;
      CK(clEnqueueNDRangeKernel(q, k, 1, nullptr, &g, &l, 0, nullptr, nullptr));
      unsigned long long r[8]; CK(clEnqueueReadBuffer(q, o, CL_TRUE, 0, sizeof r, r, 0, nullptr, nullptr));
      std::printf("addr_kinds: p=%#llx isshared=%llu isglobal=%llu cvta=%#llx s32=%#llx ld.shared(raw)=%llu ld.shared(cvta)=%llu ld(generic)=%llu (expect 4)\n", r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]); }
    { cl_kernel k = clCreateKernel(prog, "ldm", &e); CK(e);
      std::vector<cl_uint> in(64); for (int i = 0; i < 64; ++i) in[i] = 1000 + i;
      cl_mem ib = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 256, in.data(), &e); CK(e);
      cl_mem o = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 128, nullptr, &e); CK(e);
      for (int mode = atoi(argv[3]); mode <= atoi(argv[3]); ++mode) { if (argv[4][0] != 'l') break;
        CK(clSetKernelArg(k, 0, sizeof ib, &ib)); CK(clSetKernelArg(k, 1, sizeof o, &o)); CK(clSetKernelArg(k, 2, sizeof mode, &mode));
        size_t g = 32, l = 32; e = clEnqueueNDRangeKernel(q, k, 1, nullptr, &g, &l, 0, nullptr, nullptr);
        cl_uint r[32] = {0}; cl_int e2 = clEnqueueReadBuffer(q, o, CL_TRUE, 0, 128, r, 0, nullptr, nullptr);
        int ok = 0; for (int i = 0; i < 32; ++i) ok += r[i] == 1000u + i;
        std::printf("ldmatrix mode %d: enqueue %d read %d, %d/32 right, r[0..3]=%u %u %u %u r[5]=%u\n", mode, e, e2, ok, r[0], r[1], r[2], r[3], r[5]);
        if (e2) break;
      } }
    { cl_kernel k = clCreateKernel(prog, "cpa", &e); CK(e);
      std::vector<cl_uint> in(128); for (int i = 0; i < 128; ++i) in[i] = 5000 + i;
      cl_mem ib = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 512, in.data(), &e); CK(e);
      cl_mem o = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 512, nullptr, &e); CK(e);
      for (int mode = atoi(argv[3]); mode <= atoi(argv[3]); ++mode) { if (argv[4][0] != 'c') break;
        CK(clSetKernelArg(k, 0, sizeof ib, &ib)); CK(clSetKernelArg(k, 1, sizeof o, &o)); CK(clSetKernelArg(k, 2, sizeof mode, &mode));
        size_t g = 32, l = 32; e = clEnqueueNDRangeKernel(q, k, 1, nullptr, &g, &l, 0, nullptr, nullptr);
        cl_uint r[128] = {0}; cl_int e2 = clEnqueueReadBuffer(q, o, CL_TRUE, 0, 512, r, 0, nullptr, nullptr);
        int ok = 0; for (int i = 0; i < 32; ++i) for (int w = 0; w < 4; ++w) ok += r[i * 4 + w] == 5000u + (31 - i) * 4 + w;
        std::printf("cp.async mode %d: enqueue %d read %d, %d/128 right, r[0]=%u\n", mode, e, e2, ok, r[0]);
        if (e2) break;
      } }
  }
}
