// Device detection and naming that never throw and never leave a sticky error behind.

#include <cuda_runtime_api.h>

#include <string>

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

std::string cuda_device_name() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return "cuda device";
  }
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ")";
}

}  // namespace kvsim::kernels
