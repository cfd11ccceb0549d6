// Main of test_validate_gpu: exits 77 (ctest SKIP_RETURN_CODE) when no CUDA device is usable.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "kernels/backend.h"

int main(int argc, char** argv) {
  if (!kvsim::kernels::cuda_device_available()) {
    std::puts("test_validate_gpu: no CUDA device available, skipping (exit 77)");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
