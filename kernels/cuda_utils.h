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

/// Owns `count` elements of T in device memory (cudaMalloc; contents uninitialised). Move-only.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) { resize(count); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { reset(); }

  /// Frees the old allocation and allocates `count` elements (no-op when the size is unchanged).
  void resize(std::size_t count) {
    if (count == count_ && ptr_ != nullptr) return;
    reset();
    if (count == 0) return;
    void* p = nullptr;
    KVSIM_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    count_ = count;
  }
  void reset() noexcept {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  /// Synchronous host -> device copy of `count` elements into the start of the buffer.
  void upload(const T* host, std::size_t count) {
    if (count > count_) resize(count);
    if (count > 0)
      KVSIM_CUDA_CHECK(cudaMemcpy(ptr_, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  /// Synchronous device -> host copy of the first `count` elements.
  void download(T* host, std::size_t count) const {
    if (count > 0)
      KVSIM_CUDA_CHECK(cudaMemcpy(host, ptr_, count * sizeof(T), cudaMemcpyDeviceToHost));
  }

  T* get() const { return ptr_; }
  std::size_t size() const { return count_; }
  std::size_t size_bytes() const { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  std::size_t count_ = 0;
};

/// Owns `count` elements of T in page-locked host memory (cudaHostAlloc: the GPU copies to and
/// from it asynchronously; contents uninitialised). Move-only.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  ~PinnedBuffer() { reset(); }

  /// Frees the old allocation and allocates `count` elements (no-op when the size is unchanged).
  void resize(std::size_t count) {
    if (count == count_ && ptr_ != nullptr) return;
    reset();
    if (count == 0) return;
    void* p = nullptr;
    KVSIM_CUDA_CHECK(cudaHostAlloc(&p, count * sizeof(T), cudaHostAllocDefault));
    ptr_ = static_cast<T*>(p);
    count_ = count;
  }
  void reset() noexcept {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
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

}  // namespace kvsim::kernels
