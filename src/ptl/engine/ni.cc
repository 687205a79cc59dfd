#include "ni.h"

namespace ptl {

Ni::Ni(Engine *e, uint32_t idx, unsigned opts, const ptl_ni_limits_t &lim)
    : engine(e),
      index(idx),
      options(opts),
      handle(0),
      limits(lim),
      pts(size_t(lim.max_pt_index) + 1),
      mds(uint32_t(lim.max_mds)),
      entries(uint32_t(lim.max_entries)),
      eqs(uint32_t(lim.max_eqs)),
      cts(uint32_t(lim.max_cts)) {}

Ni::~Ni() {
    // Unexpected headers are owned by their PT's list.
    for (Pt &pt : pts)
        while (UnexpectedHeader *u = pt.unexpected.all.front()) {
            pt.unexpected.remove(u);
            delete u;
        }
}

ptl_rank_t Ni::rank_of(PeerId p) const {
    for (size_t r = 0; r < map.size(); ++r)
        if (map[r].phys.nid == p.nid && map[r].phys.pid == p.pid) return ptl_rank_t(r);
    return PTL_RANK_ANY;
}

}  // namespace ptl
