// One thread pool: OpenMP's. OpenBLAS is Debian's OpenMP build, so its sgemm runs on the same
// threads as our loops; set_num_threads sets both.
#pragma once

#include <string>

namespace tformer {

// n <= 0 means "all cores". Applies to our OpenMP loops and to OpenBLAS.
void set_num_threads(int n);
int num_threads();
// OpenBLAS's build description (core type, threading model), for logs and the threading test.
std::string blas_config();
// 0 = sequential, 1 = pthreads, 2 = OpenMP (OpenBLAS's openblas_get_parallel()).
int blas_parallel_model();

}  // namespace tformer
