// Device detection that never throws and never leaves a sticky error behind.

#include <cuda_runtime_api.h>

#include "kernels/backend.h"

namespace kvsim::kernels {

bool cuda_device_available() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear: no driver / no device / insufficient driver
    return false;
  }
  return count > 0;
}

}  // namespace kvsim::kernels
