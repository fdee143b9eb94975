#pragma once
// EJK_API marks what libejk.so and libejk_mpi.so export. The libraries are built with hidden
// visibility, so everything else in them (their internals, the kernels' host code, the template
// instances of fmt, nlohmann::json and the standard library they use) stays out of their dynamic
// symbol tables: programs bind only to this API, and its internals can change without a new ABI.
// Classes with virtual functions and the exception classes are exported whole, so their vtables
// and type_info are one across the libraries and programs (throwing, catching and dynamic_cast
// across the boundary rely on that).
#if defined(__GNUC__) || defined(__clang__)
#define EJK_API __attribute__((visibility("default")))
#else
#define EJK_API
#endif
