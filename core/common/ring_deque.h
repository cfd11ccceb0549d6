#pragma once
// RingDeque: a double-ended queue on one power-of-two ring buffer. Unlike std::deque, a steady
// stream of push_back/pop_front (the scheduler's waiting queue) never allocates once the ring has
// reached its high-water size.

#include <cstddef>
#include <iterator>
#include <vector>

#include "core/common/assert.h"

namespace kvsim {

template <class T>
class RingDeque {
 public:
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = const T*;
    using reference = const T&;
    const_iterator(const RingDeque* q, std::size_t i) : q_(q), i_(i) {}
    reference operator*() const { return (*q_)[i_]; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }

   private:
    const RingDeque* q_;
    std::size_t i_;
  };

  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  /// Element i from the front. O(1).
  const T& operator[](std::size_t i) const { return buf_[(head_ + i) & (buf_.size() - 1)]; }
  T& operator[](std::size_t i) { return buf_[(head_ + i) & (buf_.size() - 1)]; }
  const T& front() const { return (*this)[0]; }
  T& front() { return (*this)[0]; }
  const T& back() const { return (*this)[size_ - 1]; }
  T& back() { return (*this)[size_ - 1]; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

  /// Amortized O(1); allocates only when the ring grows past its high-water size.
  void push_back(const T& v) {
    if (size_ == buf_.size()) grow();
    buf_[(head_ + size_) & (buf_.size() - 1)] = v;
    ++size_;
  }
  void push_front(const T& v) {
    if (size_ == buf_.size()) grow();
    head_ = (head_ + buf_.size() - 1) & (buf_.size() - 1);
    buf_[head_] = v;
    ++size_;
  }
  void pop_front() {
    KVSIM_ASSERT(size_ > 0, "pop_front on an empty queue");
    head_ = (head_ + 1) & (buf_.size() - 1);
    --size_;
  }
  void pop_back() {
    KVSIM_ASSERT(size_ > 0, "pop_back on an empty queue");
    --size_;
  }
  /// Removes every element (the ring keeps its capacity). O(1).
  void clear() {
    head_ = 0;
    size_ = 0;
  }
  /// Removes element i, keeping the order of the others. O(size).
  void erase_at(std::size_t i) {
    KVSIM_ASSERT(i < size_);
    for (std::size_t j = i; j + 1 < size_; ++j) (*this)[j] = (*this)[j + 1];
    --size_;
  }

 private:
  void grow() {
    std::vector<T> bigger(buf_.empty() ? 16 : buf_.size() * 2);
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = (*this)[i];
    buf_.swap(bigger);
    head_ = 0;
  }
  std::vector<T> buf_;  // size is a power of two (or 0)
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace kvsim
