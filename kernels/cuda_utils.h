#pragma once
// CUDA host helpers: KVSIM_CUDA_CHECK and a move-only device buffer. Include only in code built
// when KVSIM_KERNELS_HAVE_CUDA is defined (it needs the CUDA runtime headers).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

/// Evaluates a cudaError_t expression and throws std::runtime_error on failure (API boundary only;
/// launchers themselves return cudaError_t).
#define KVSIM_CUDA_CHECK(expr)                                                                   \
  do {                                                                                           \
    const cudaError_t kvsim_cuda_err_ = (expr);                                                  \
    if (kvsim_cuda_err_ != cudaSuccess) [[unlikely]]                                             \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(kvsim_cuda_err_) + \
                               " (" __FILE__ ":" + std::to_string(__LINE__) + ")");              \
  } while (0)

namespace kvsim::kernels {

/// Where a CudaBuffer's memory lives: device memory (cudaMalloc) or page-locked host memory
/// (cudaHostAlloc: the GPU copies to and from it asynchronously).
struct DeviceMemory {
  static void* allocate(std::size_t bytes) {
    void* p = nullptr;
    KVSIM_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  static void release(void* p) noexcept { cudaFree(p); }
};
struct PinnedHostMemory {
  static void* allocate(std::size_t bytes) {
    void* p = nullptr;
    KVSIM_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    return p;
  }
  static void release(void* p) noexcept { cudaFreeHost(p); }
};

/// Owns `count` elements of T in `Memory` (contents uninitialised). Move-only.
template <typename T, typename Memory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  explicit CudaBuffer(std::size_t count) { resize(count); }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  CudaBuffer(CudaBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  ~CudaBuffer() { reset(); }

  /// Frees the old allocation and allocates `count` elements (no-op when the size is unchanged).
  void resize(std::size_t count) {
    if (count == count_ && ptr_ != nullptr) return;
    reset();
    if (count == 0) return;
    ptr_ = static_cast<T*>(Memory::allocate(count * sizeof(T)));
    count_ = count;
  }
  void reset() noexcept {
    if (ptr_ != nullptr) Memory::release(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }

  T* get() const { return ptr_; }
  std::size_t size() const { return count_; }
  std::size_t size_bytes() const { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

/// `count` elements of T in device memory, with synchronous copies from and to the host.
template <typename T>
class DeviceBuffer : public CudaBuffer<T, DeviceMemory> {
 public:
  using CudaBuffer<T, DeviceMemory>::CudaBuffer;
  /// Synchronous host -> device copy of `count` elements into the start of the buffer.
  void upload(const T* host, std::size_t count) {
    if (count > this->size()) this->resize(count);
    if (count > 0)
      KVSIM_CUDA_CHECK(cudaMemcpy(this->get(), host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  /// Synchronous device -> host copy of the first `count` elements.
  void download(T* host, std::size_t count) const {
    if (count > 0)
      KVSIM_CUDA_CHECK(cudaMemcpy(host, this->get(), count * sizeof(T), cudaMemcpyDeviceToHost));
  }
};

/// `count` elements of T in page-locked host memory.
template <typename T>
using PinnedBuffer = CudaBuffer<T, PinnedHostMemory>;

}  // namespace kvsim::kernels
