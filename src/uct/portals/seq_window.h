// The operations of an endpoint in flight, by sequence number: which are still incomplete,
// and the oldest of them (a flush waits until everything before its point completes).
// Operations complete mostly in order, so a window of done flags from the oldest incomplete
// one to the newest started costs no allocation per operation (a std::set did).
#pragma once

#include <cstdint>
#include <deque>

namespace uct_portals {

class SeqWindow {
public:
    uint64_t start() {
        done_.push_back(false);
        return next_++;
    }
    // Marks `seq` complete; a sequence number outside the window (already finished) is ignored.
    void finish(uint64_t seq) {
        if (seq < oldest_ || seq >= next_) return;
        done_[size_t(seq - oldest_)] = true;
        while (!done_.empty() && done_.front()) {
            done_.pop_front();
            ++oldest_;
        }
    }
    bool empty() const { return oldest_ == next_; }
    // The oldest incomplete sequence number (== next() when none is).
    uint64_t oldest() const { return oldest_; }
    uint64_t next() const { return next_; }

private:
    uint64_t oldest_ = 0, next_ = 0;
    std::deque<bool> done_;
};

}  // namespace uct_portals
