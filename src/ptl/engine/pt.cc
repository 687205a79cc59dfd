#include "pt.h"

namespace ptl {

void MatchList::add(Entry *e) {
    if (e->exact)
        exact[e->desc.match_bits].push_back(e);
    else
        wildcard.push_back(e);
    ++size;
}

void MatchList::remove(Entry *e) {
    EntryList::erase(e);
    if (e->exact) {
        auto it = exact.find(e->desc.match_bits);
        if (it != exact.end() && it->second.empty()) exact.erase(it);
    }
    --size;
}

void UnexpectedList::add(UnexpectedHeader *u) {
    all.push_back(u);
    by_bits[u->match_bits].push_back(u);
    ++size;
}

void UnexpectedList::remove(UnexpectedHeader *u) {
    UhList::erase(u);
    UhBucket::erase(u);
    auto it = by_bits.find(u->match_bits);
    if (it != by_bits.end() && it->second.empty()) by_bits.erase(it);
    --size;
}

}  // namespace ptl
