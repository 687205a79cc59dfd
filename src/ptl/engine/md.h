// Memory descriptor (§3.10): an initiator-side region with its EQ/CT and options. It counts
// operations whose SEND or REPLY is still due, which block PtlMDRelease (§3.10.4).
#pragma once

#include <portals4.h>

#include <cstdint>

#include "region.h"

namespace ptl {

class Ni;
struct Eq;
struct Ct;

struct Md {
    Ni *ni = nullptr;
    uint32_t handle = 0;
    ptl_md_t desc{};
    Region region;
    Eq *eq = nullptr;
    Ct *ct = nullptr;
    uint32_t pending = 0;
};

}  // namespace ptl
