// A vector of trivially copyable elements with inline room for N, so the per-message paths
// (iovec lists, small reply buffers, poll arrays) do not touch the heap.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

namespace ptl {

template <typename T, size_t N>
class SmallVec {
    static_assert(std::is_trivially_copyable_v<T>);

public:
    SmallVec() = default;
    explicit SmallVec(size_t n) { resize(n); }
    SmallVec(const SmallVec &o) { assign(o.data(), o.size()); }
    SmallVec &operator=(const SmallVec &o) {
        if (this != &o) {
            size_ = 0;
            assign(o.data(), o.size());
        }
        return *this;
    }
    ~SmallVec() {
        if (heap_) std::free(heap_);
    }

    T *data() { return heap_ ? heap_ : reinterpret_cast<T *>(inline_); }
    const T *data() const { return heap_ ? heap_ : reinterpret_cast<const T *>(inline_); }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    T *begin() { return data(); }
    T *end() { return data() + size_; }
    const T *begin() const { return data(); }
    const T *end() const { return data() + size_; }
    T &operator[](size_t i) { return data()[i]; }
    const T &operator[](size_t i) const { return data()[i]; }
    void clear() { size_ = 0; }

    void push_back(const T &v) {
        reserve(size_ + 1);
        data()[size_++] = v;
    }
    void resize(size_t n) {
        reserve(n);
        if (n > size_) std::memset(static_cast<void *>(data() + size_), 0, (n - size_) * sizeof(T));
        size_ = n;
    }
    void assign(const T *p, size_t n) {
        reserve(n);
        if (n) std::memcpy(static_cast<void *>(data()), p, n * sizeof(T));
        size_ = n;
    }
    void reserve(size_t n) {
        if (n <= capacity_) return;
        size_t cap = capacity_ * 2 > n ? capacity_ * 2 : n;
        T *p = static_cast<T *>(std::malloc(cap * sizeof(T)));
        if (!p) throw std::bad_alloc();
        if (size_) std::memcpy(static_cast<void *>(p), data(), size_ * sizeof(T));
        if (heap_) std::free(heap_);
        heap_ = p;
        capacity_ = cap;
    }

private:
    alignas(T) unsigned char inline_[N * sizeof(T)];
    T *heap_ = nullptr;
    size_t size_ = 0;
    size_t capacity_ = N;
};

}  // namespace ptl
