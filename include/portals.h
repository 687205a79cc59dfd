/* portals.h — the same interface as portals4.h (spec §3.1, rule G1). */
#ifndef PORTALS_H
#define PORTALS_H
#include <portals4.h>
#endif
