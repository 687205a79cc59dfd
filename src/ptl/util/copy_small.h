// A copy of a few bytes without a call into libc: most messages' payloads are a word or two,
// and a call to memcpy costs more than the copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ptl {

inline void copy_small(void *to, const void *from, size_t len) {
    char *t = static_cast<char *>(to);
    const char *f = static_cast<const char *>(from);
    if (len > 16) {
        std::memcpy(t, f, len);
    } else if (len >= 8) {  // two words, overlapping when fewer than 16 bytes
        uint64_t a, b;
        std::memcpy(&a, f, 8);
        std::memcpy(&b, f + len - 8, 8);
        std::memcpy(t, &a, 8);
        std::memcpy(t + len - 8, &b, 8);
    } else {
        for (size_t i = 0; i < len; ++i) t[i] = f[i];
    }
}

}  // namespace ptl
