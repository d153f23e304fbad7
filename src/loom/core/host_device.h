// LOOM_HD marks a function that device code may call too (CUDA's __host__ __device__); for
// the host compiler it is nothing.
#pragma once
#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__
#else
#define LOOM_HD
#endif
