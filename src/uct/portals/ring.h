// A FIFO in one growing power-of-two array. Each element keeps the position it was pushed at
// for its whole life (ids count pushes), so others can refer to it by id while it grows. A
// std::deque of receive events allocated and freed a block every couple of messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace uct_portals {

template <class T>
class Ring {
public:
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    T &front() { return slot(head_); }
    T &back() { return slot(head_ + size_ - 1); }
    T &operator[](size_t i) { return slot(head_ + i); }
    const T &operator[](size_t i) const { return slot(head_ + i); }

    // A fresh element at the back.
    T &emplace_back() {
        if (size_ == buf_.size()) grow();
        T &t = slot(head_ + size_++);
        t = T{};
        return t;
    }
    void push_back(const T &t) { emplace_back() = t; }
    void pop_front() {
        ++head_;
        --size_;
    }
    // The id of an element in the ring.
    uint64_t id_of(const T &t) const {
        const uint64_t mask = buf_.size() - 1;
        return head_ + ((uint64_t(&t - buf_.data()) - head_) & mask);
    }
    // The element pushed as `id`, or null once it is popped.
    T *find(uint64_t id) { return id >= head_ && id < head_ + size_ ? &slot(id) : nullptr; }

    template <class R, class E>
    struct Iter {
        R *ring;
        uint64_t id;
        E &operator*() const { return ring->slot(id); }
        Iter &operator++() {
            ++id;
            return *this;
        }
        bool operator!=(const Iter &o) const { return id != o.id; }
    };
    Iter<Ring, T> begin() { return {this, head_}; }
    Iter<Ring, T> end() { return {this, head_ + size_}; }
    Iter<const Ring, const T> begin() const { return {this, head_}; }
    Iter<const Ring, const T> end() const { return {this, head_ + size_}; }

private:
    T &slot(uint64_t id) { return buf_[id & (buf_.size() - 1)]; }
    const T &slot(uint64_t id) const { return buf_[id & (buf_.size() - 1)]; }
    void grow() {
        std::vector<T> bigger(buf_.empty() ? 16 : buf_.size() * 2);
        for (uint64_t id = head_; id < head_ + size_; ++id)
            bigger[id & (bigger.size() - 1)] = std::move(slot(id));
        buf_ = std::move(bigger);
    }

    std::vector<T> buf_;
    uint64_t head_ = 0;
    size_t size_ = 0;
};

}  // namespace uct_portals
