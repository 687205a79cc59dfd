// The key-value space of launchers that only move fixed-size blocks (ptlrun's segment, a job of
// one): each rank's puts since the last fence are serialised and carried in allgather rounds of
// PTLRT_MAX_GATHER bytes, as many rounds as the longest contribution needs.
#include <portals4_rt.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "launcher.h"

namespace ptl::rt {
namespace {

void append_field(std::string &out, const std::string &field) {
    const auto len = uint32_t(field.size());
    out.append(reinterpret_cast<const char *>(&len), sizeof len);
    out += field;
}

bool take_field(const char *&p, const char *end, std::string &field) {
    uint32_t len;
    if (size_t(end - p) < sizeof len) return false;
    std::memcpy(&len, p, sizeof len);
    p += sizeof len;
    if (size_t(end - p) < len) return false;
    field.assign(p, len);
    p += len;
    return true;
}

}  // namespace

bool Launcher::kvs_put(const std::string &key, const std::string &value) {
    kvs_unpublished_[key] = value;
    kvs_published_[key] = value;  // a rank reads its own puts at once
    return true;
}

bool Launcher::kvs_get(const std::string &key, std::string &value) {
    const auto it = kvs_published_.find(key);
    if (it == kvs_published_.end()) return false;
    value = it->second;
    return true;
}

bool Launcher::kvs_fence() {
    std::string mine;
    for (const auto &[k, v] : kvs_unpublished_) {
        append_field(mine, k);
        append_field(mine, v);
    }
    const size_t n = size_t(size());
    std::vector<uint64_t> lengths(n);
    const uint64_t my_length = mine.size();
    if (!allgather(&my_length, lengths.data(), sizeof my_length)) return false;
    uint64_t longest = 0;
    for (uint64_t l : lengths) longest = std::max(longest, l);
    std::vector<std::string> blobs(n);
    std::vector<char> round(n * PTLRT_MAX_GATHER);
    for (uint64_t off = 0; off < longest; off += PTLRT_MAX_GATHER) {
        char chunk[PTLRT_MAX_GATHER] = {};
        if (off < mine.size()) mine.copy(chunk, PTLRT_MAX_GATHER, off);
        if (!allgather(chunk, round.data(), PTLRT_MAX_GATHER)) return false;
        for (size_t r = 0; r < n; ++r) {
            if (off < lengths[r])
                blobs[r].append(&round[r * PTLRT_MAX_GATHER],
                                std::min<uint64_t>(PTLRT_MAX_GATHER, lengths[r] - off));
        }
    }
    for (const std::string &blob : blobs) {
        const char *p = blob.data();
        const char *end = p + blob.size();
        std::string k, v;
        while (p < end && take_field(p, end, k) && take_field(p, end, v)) kvs_published_[k] = v;
    }
    kvs_unpublished_.clear();
    return true;
}

}  // namespace ptl::rt
