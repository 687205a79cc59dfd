// The atomic operation × datatype table (§3.15.4, digest §10) and its arithmetic.
#pragma once

#include <portals4.h>

#include <cstddef>
#include <cstdint>

namespace ptl::atomics {

enum class Call { Atomic, FetchAtomic, Swap };

// Size in bytes of one element of `dt`; 0 for an unknown datatype.
inline size_t datatype_size(ptl_datatype_t dt) {
    switch (dt) {
        case PTL_INT8_T:
        case PTL_UINT8_T: return 1;
        case PTL_INT16_T:
        case PTL_UINT16_T: return 2;
        case PTL_INT32_T:
        case PTL_UINT32_T:
        case PTL_FLOAT: return 4;
        case PTL_INT64_T:
        case PTL_UINT64_T:
        case PTL_DOUBLE:
        case PTL_FLOAT_COMPLEX: return 8;
        case PTL_DOUBLE_COMPLEX: return 16;
        case PTL_LONG_DOUBLE: return sizeof(long double);
        case PTL_LONG_DOUBLE_COMPLEX: return 2 * sizeof(long double);
        default: return 0;
    }
}

// Whether `op` on `dt` is legal for the given call (Table 3-4, digest §10.2).
bool legal(ptl_op_t op, ptl_datatype_t dt, Call call);

// Applies `op` element by element to `len` bytes at `target`, with initiator data `src`
// and, for the CSWAP family and MSWAP, the single `operand` element. `target` and `src`
// need no alignment. Integer arithmetic wraps (two's complement).
void apply(ptl_op_t op, ptl_datatype_t dt, void *target, const void *src, const void *operand,
           size_t len);

// Whether apply_in_place can do `dt` at `target`: elements of at most 8 bytes, naturally
// aligned. Every path that applies atomics to memory other processes reach directly asks this
// same question, so one entry's atomics use one mechanism whichever path they took.
inline bool in_place_capable(ptl_datatype_t dt, const void *target, size_t len) {
    const size_t n = datatype_size(dt);
    return n != 0 && n <= 8 && len % n == 0 && reinterpret_cast<uintptr_t>(target) % n == 0;
}

// As apply, each element by one CPU compare-and-swap on the memory itself, so it is atomic with
// respect to other processes doing the same on a shared mapping; `fetched` (if not null)
// receives the values before. Only where in_place_capable.
void apply_in_place(ptl_op_t op, ptl_datatype_t dt, void *target, const void *src, const void *operand,
                    size_t len, void *fetched);

// Fetch-and-add and compare-and-swap on one aligned 8-byte word, done by something other than
// this CPU (an RDMA device, whose atomics are atomic only with its own); false if it failed.
class WordAtomics {
public:
    virtual bool fetch_add(uint64_t *word, uint64_t add, uint64_t *old) = 0;
    virtual bool compare_swap(uint64_t *word, uint64_t expect, uint64_t desired, uint64_t *old) = 0;

protected:
    ~WordAtomics() = default;
};

// As apply_in_place for a datatype of 8 bytes, every change made by `dev`: integer sum and
// difference as fetch-and-add, integer compare-and-swap as itself, every other operation as a
// compare-and-swap loop. False (memory partly changed) if `dev` failed.
bool apply_by_word_atomics(ptl_op_t op, ptl_datatype_t dt, void *target, const void *src, const void *operand,
                           size_t len, void *fetched, WordAtomics &dev);

}  // namespace ptl::atomics
