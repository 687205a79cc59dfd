// Two tcp wires in one process, talking over 127.0.0.1, each keeping what it received (the
// message headers, as strings). Used by the tcp wire's batching and duplex tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "../src/ptl/util/clock.h"
#include "../src/ptl/wire/tcp/tcp_wire.h"

namespace ptltest {

class TcpWirePair : public ::testing::Test {
protected:
    static constexpr uint32_t kLoopbackNid = 0x7f000001;
    static constexpr uint32_t kPortBase = 20000;

    void SetUp() override {
        // Ports are port_base + pid: try pid pairs until two listeners come up.
        ptl::tcp::TcpConfig cfg;
        cfg.port_base = kPortBase;
        for (uint32_t attempt = 0; attempt < 64 && !b_; ++attempt) {
            const uint32_t pid = 10000 + (uint32_t(getpid()) * 2 + attempt * 2) % 30000;
            std::string err;
            a_id_ = {kLoopbackNid, pid};
            b_id_ = {kLoopbackNid, pid + 1};
            a_ = ptl::tcp::TcpWire::create(
                a_id_, cfg, [] {}, &err);
            if (a_)
                b_ = ptl::tcp::TcpWire::create(
                    b_id_, cfg, [] {}, &err);
            if (!b_) a_.reset();
        }
        ASSERT_TRUE(a_ && b_) << "no free pair of listening ports";
    }

    // Progresses B (and A unless told not to) at least once and until A holds `at_a` and B
    // `at_b` messages, or `timeout_ms` passed. True if both counts were reached.
    bool poll_until(size_t at_a, size_t at_b, long timeout_ms, bool progress_a = true) {
        const auto keep = [](std::vector<std::string> &into) {
            return [&into](const ptl::InMessage &m) {
                into.emplace_back(static_cast<const char *>(m.header), m.header_len);
            };
        };
        const auto to_a = keep(got_a_), to_b = keep(got_b_);
        const uint64_t end = ptl::monotonic_ns() + uint64_t(timeout_ms) * 1000000ull;
        do {
            if (progress_a && a_) a_->progress(to_a);
            if (b_) b_->progress(to_b);
        } while ((got_a_.size() < at_a || got_b_.size() < at_b) && ptl::monotonic_ns() < end);
        return got_a_.size() >= at_a && got_b_.size() >= at_b;
    }

    ptl::PeerId a_id_{}, b_id_{};
    std::unique_ptr<ptl::tcp::TcpWire> a_, b_;
    std::vector<std::string> got_a_, got_b_;
};

}  // namespace ptltest
