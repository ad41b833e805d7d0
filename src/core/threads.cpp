#include "core/threads.h"

#include <omp.h>

extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
int openblas_get_parallel(void);
}

namespace tformer {

void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

std::string blas_config() { return openblas_get_config(); }

int blas_parallel_model() { return openblas_get_parallel(); }

}  // namespace tformer
