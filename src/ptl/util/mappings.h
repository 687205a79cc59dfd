// The process's own memory mappings over an address range, as /proc/self/maps describes them.
// Linux 6.11 and later answer one mapping per PROCMAP_QUERY ioctl, found by address; older
// kernels only print the whole list as text, which costs time in proportion to the number of
// mappings (and an adopted range is a mapping of its own: thousands of registered buffers make
// thousands of mappings). The ioctl is used where the kernel has it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptl {

struct Mapping {
    uintptr_t lo, hi;
    uint64_t offset, inode;
    char perms[8];     // as in /proc/self/maps: "rw-p", "rw-s", ...
    std::string name;  // "" for anonymous memory, "[heap]", "/memfd:NAME (deleted)", a path
};

// The mappings that cover [base, end), in address order, appended to `out`; false if a hole
// lies in between (or the list cannot be read). With `holes`, every mapping that overlaps the
// range, holes or not (true then).
bool read_mappings(uintptr_t base, uintptr_t end, std::vector<Mapping> *out, bool holes = false);

// The two ways read_mappings() chooses from, for tests that compare them: by address
// (PROCMAP_QUERY; -1 where the kernel has no such query, else 1 or 0 as read_mappings()) and
// from the text.
int read_mappings_by_query(uintptr_t base, uintptr_t end, std::vector<Mapping> *out, bool holes);
bool read_mappings_as_text(uintptr_t base, uintptr_t end, std::vector<Mapping> *out, bool holes);

}  // namespace ptl
