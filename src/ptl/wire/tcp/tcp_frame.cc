#include "tcp_frame.h"

#include <algorithm>
#include <cstring>

namespace ptl::tcp {

namespace {
constexpr size_t kBigStep = 1 << 20;   // a large frame's buffer grows by at least this
constexpr size_t kBigKeep = 4u << 20;  // and is kept for the next one up to this size
}  // namespace

FrameReader::FrameReader(uint64_t max_payload, size_t stage_bytes)
    : max_payload_(max_payload), stage_(std::max<size_t>(stage_bytes, 2 * sizeof(FrameHead) + kMaxHeader)) {}

void FrameReader::assume_peer(uint32_t nid, uint32_t pid) {
    hello_ = {kHelloMagic, kVersion, 0, nid, pid};
    hello_done_ = true;
}

char *FrameReader::space(size_t *len) {
    if (failed_) {
        *len = 0;
        return stage_.data();
    }
    if (big_total_) {
        if (big_fill_ == big_.size()) {
            // Grow with what really arrived, so a lying length costs the liar's own bytes.
            const uint64_t want = std::max<uint64_t>(big_.size() * 2, big_.size() + kBigStep);
            big_.resize(size_t(std::min<uint64_t>(want, big_total_)));
        }
        *len = size_t(big_.size() - big_fill_);
        return big_.data() + big_fill_;
    }
    *len = stage_.size() - used_;
    return stage_.data() + used_;
}

bool FrameReader::commit(size_t n, const Deliver &deliver) {
    if (failed_) return false;
    if (big_total_) {
        big_fill_ += n;
        if (big_fill_ < big_total_) return true;
        const size_t hl = big_header_len_;
        deliver(big_.data(), hl, big_.data() + hl, size_t(big_total_ - hl));
        big_total_ = big_fill_ = 0;
        if (big_.capacity() > kBigKeep)
            std::vector<char>().swap(big_);
        else
            big_.clear();
        return true;
    }
    used_ += n;
    return parse_staged(deliver);
}

bool FrameReader::parse_staged(const Deliver &deliver) {
    size_t off = 0;
    auto fail = [this] {
        failed_ = true;
        used_ = 0;
        return false;
    };
    if (!hello_done_) {
        if (used_ < sizeof(Hello)) return true;
        std::memcpy(&hello_, stage_.data(), sizeof hello_);
        if (hello_.magic != kHelloMagic || hello_.version == 0 || hello_.version > kVersion ||
            hello_.reserved != 0)
            return fail();
        hello_done_ = true;
        off = sizeof(Hello);
    }
    while (used_ - off >= sizeof(FrameHead)) {
        FrameHead fh;
        std::memcpy(&fh, stage_.data() + off, sizeof fh);
        if (bye_) return fail();
        if (fh.header_len == 0 && fh.reserved == kByeMark && fh.reserved2 == 0 && fh.payload_len == 0) {
            bye_ = true;
            off += sizeof fh;
            continue;
        }
        if (fh.header_len == 0 || fh.header_len > kMaxHeader || fh.reserved || fh.reserved2 ||
            fh.payload_len > max_payload_)
            return fail();
        const uint64_t total = uint64_t(fh.header_len) + fh.payload_len;
        const size_t have = used_ - off - sizeof fh;
        if (sizeof fh + total > stage_.size()) {
            start_big(fh, stage_.data() + off + sizeof fh, have);
            off = used_;
            break;
        }
        if (have < total) break;
        const char *h = stage_.data() + off + sizeof fh;
        deliver(h, fh.header_len, h + fh.header_len, size_t(fh.payload_len));
        off += sizeof fh + size_t(total);
    }
    if (off) {
        std::memmove(stage_.data(), stage_.data() + off, used_ - off);
        used_ -= off;
    }
    return true;
}

void FrameReader::start_big(const FrameHead &fh, const char *have, size_t have_len) {
    big_total_ = uint64_t(fh.header_len) + fh.payload_len;
    big_header_len_ = fh.header_len;
    big_fill_ = have_len;
    big_.resize(size_t(std::min<uint64_t>(big_total_, std::max<uint64_t>(have_len, kBigStep))));
    std::memcpy(big_.data(), have, have_len);
}

}  // namespace ptl::tcp
