#include "atomic_ops.h"

#include <complex>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ptl::atomics {

namespace {

enum class Kind { Integral, Floating, Complex, Invalid };

Kind kind_of(ptl_datatype_t dt) {
    switch (dt) {
        case PTL_INT8_T: case PTL_UINT8_T: case PTL_INT16_T: case PTL_UINT16_T:
        case PTL_INT32_T: case PTL_UINT32_T: case PTL_INT64_T: case PTL_UINT64_T:
            return Kind::Integral;
        case PTL_FLOAT: case PTL_DOUBLE: case PTL_LONG_DOUBLE:
            return Kind::Floating;
        case PTL_FLOAT_COMPLEX: case PTL_DOUBLE_COMPLEX: case PTL_LONG_DOUBLE_COMPLEX:
            return Kind::Complex;
        default:
            return Kind::Invalid;
    }
}

template <typename T>
T load(const void *p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

template <typename T>
void store(void *p, T v) {
    std::memcpy(p, &v, sizeof v);
}

// Integer arithmetic through uint64_t so that overflow wraps instead of being undefined.
template <typename T>
T wrap(uint64_t v) {
    return static_cast<T>(v);
}

template <typename T>
T combine(ptl_op_t op, T t, T i, T o) {
    constexpr bool integral = std::is_integral_v<T>;
    switch (op) {
        case PTL_MIN:
            if constexpr (!std::is_class_v<T>) return i < t ? i : t;
            break;
        case PTL_MAX:
            if constexpr (!std::is_class_v<T>) return i > t ? i : t;
            break;
        case PTL_SUM:
            if constexpr (integral) return wrap<T>(uint64_t(t) + uint64_t(i));
            else return t + i;
        case PTL_DIFF:
            if constexpr (integral) return wrap<T>(uint64_t(t) - uint64_t(i));
            else return t - i;
        case PTL_PROD:
            if constexpr (integral) return wrap<T>(uint64_t(t) * uint64_t(i));
            else return t * i;
        case PTL_SWAP:
            return i;
        case PTL_CSWAP:
            return o == t ? i : t;
        case PTL_CSWAP_NE:
            return o != t ? i : t;
        default:
            break;
    }
    if constexpr (!std::is_class_v<T>) {
        switch (op) {
            case PTL_CSWAP_LE: return o <= t ? i : t;
            case PTL_CSWAP_LT: return o < t ? i : t;
            case PTL_CSWAP_GE: return o >= t ? i : t;
            case PTL_CSWAP_GT: return o > t ? i : t;
            default: break;
        }
    }
    if constexpr (integral) {
        switch (op) {
            case PTL_LOR: return T((i != 0) || (t != 0));
            case PTL_LAND: return T((i != 0) && (t != 0));
            case PTL_LXOR: return T((i != 0) != (t != 0));
            case PTL_BOR: return T(i | t);
            case PTL_BAND: return T(i & t);
            case PTL_BXOR: return T(i ^ t);
            case PTL_MSWAP: return T((i & o) | (t & ~o));
            default: break;
        }
    }
    return t;
}

template <typename T>
void apply_typed(ptl_op_t op, void *target, const void *src, const void *operand, size_t len) {
    const T o = operand ? load<T>(operand) : T{};
    char *tp = static_cast<char *>(target);
    const char *sp = static_cast<const char *>(src);
    for (size_t k = 0; k + sizeof(T) <= len; k += sizeof(T))
        store<T>(tp + k, combine<T>(op, load<T>(tp + k), load<T>(sp + k), o));
}

// One element, one locked instruction where the CPU has one for the operation (integers):
// the cache line, which another process may hold, moves here once.
template <typename Word>
bool native_element(ptl_op_t op, ptl_datatype_t dt, Word *t, Word v, Word operand, Word *old) {
    if (dt == PTL_FLOAT || dt == PTL_DOUBLE || dt == PTL_FLOAT_COMPLEX) return false;
    switch (op) {
        case PTL_SUM: *old = __atomic_fetch_add(t, v, __ATOMIC_ACQ_REL); return true;
        case PTL_DIFF: *old = __atomic_fetch_sub(t, v, __ATOMIC_ACQ_REL); return true;
        case PTL_BOR: *old = __atomic_fetch_or(t, v, __ATOMIC_ACQ_REL); return true;
        case PTL_BAND: *old = __atomic_fetch_and(t, v, __ATOMIC_ACQ_REL); return true;
        case PTL_BXOR: *old = __atomic_fetch_xor(t, v, __ATOMIC_ACQ_REL); return true;
        case PTL_SWAP: *old = __atomic_exchange_n(t, v, __ATOMIC_ACQ_REL); return true;
        case PTL_CSWAP:
            *old = operand;
            __atomic_compare_exchange_n(t, old, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            return true;
        default: return false;
    }
}

template <typename Word>
void cas_elements(ptl_op_t op, ptl_datatype_t dt, void *target, const void *src, const void *operand,
                  size_t len, void *fetched) {
    Word *t = static_cast<Word *>(target);
    const char *sp = static_cast<const char *>(src);
    char *fp = static_cast<char *>(fetched);
    Word o = 0;
    if (operand) std::memcpy(&o, operand, sizeof o);
    for (size_t k = 0; k < len / sizeof(Word); ++k) {
        Word v, old;
        std::memcpy(&v, sp + k * sizeof(Word), sizeof v);
        if (!native_element(op, dt, t + k, v, o, &old)) {
            // No plain load first: the failing compare-and-swap fetches the line for writing,
            // where a load would fetch it shared and the swap again.
            old = 0;
            for (;;) {
                Word next = old;
                apply(op, dt, &next, sp + k * sizeof(Word), operand, sizeof(Word));
                if (__atomic_compare_exchange_n(t + k, &old, next, true, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
                    break;
            }
        }
        if (fp) std::memcpy(fp + k * sizeof(Word), &old, sizeof old);
    }
}

}  // namespace

void apply_in_place(ptl_op_t op, ptl_datatype_t dt, void *target, const void *src, const void *operand,
                    size_t len, void *fetched) {
    switch (datatype_size(dt)) {
        case 1: return cas_elements<uint8_t>(op, dt, target, src, operand, len, fetched);
        case 2: return cas_elements<uint16_t>(op, dt, target, src, operand, len, fetched);
        case 4: return cas_elements<uint32_t>(op, dt, target, src, operand, len, fetched);
        case 8: return cas_elements<uint64_t>(op, dt, target, src, operand, len, fetched);
        default: return;
    }
}

bool apply_by_word_atomics(ptl_op_t op, ptl_datatype_t dt, void *target, const void *src, const void *operand,
                           size_t len, void *fetched, WordAtomics &dev) {
    if (datatype_size(dt) != 8) return false;
    const bool integral = dt == PTL_INT64_T || dt == PTL_UINT64_T;
    uint64_t *t = static_cast<uint64_t *>(target);
    const char *sp = static_cast<const char *>(src);
    char *fp = static_cast<char *>(fetched);
    for (size_t k = 0; k < len / 8; ++k) {
        uint64_t v, old = 0;
        std::memcpy(&v, sp + k * 8, 8);
        bool ok;
        if (integral && (op == PTL_SUM || op == PTL_DIFF)) {
            ok = dev.fetch_add(t + k, op == PTL_SUM ? v : uint64_t(0) - v, &old);
        } else if (integral && op == PTL_CSWAP && operand) {
            uint64_t expect;
            std::memcpy(&expect, operand, 8);
            ok = dev.compare_swap(t + k, expect, v, &old);
        } else {
            // A first guess from memory; each failed swap returns the word as it is.
            uint64_t seen = __atomic_load_n(t + k, __ATOMIC_RELAXED);
            for (;;) {
                uint64_t next = seen;
                apply(op, dt, &next, sp + k * 8, operand, 8);
                if (!(ok = dev.compare_swap(t + k, seen, next, &old)) || old == seen) break;
                seen = old;
            }
        }
        if (!ok) return false;
        if (fp) std::memcpy(fp + k * 8, &old, 8);
    }
    return true;
}

bool legal(ptl_op_t op, ptl_datatype_t dt, Call call) {
    const Kind k = kind_of(dt);
    if (k == Kind::Invalid) return false;
    const bool is_swap = op >= PTL_SWAP && op <= PTL_MSWAP;
    if (op > PTL_DIFF) return false;
    if (is_swap != (call == Call::Swap)) return false;
    switch (op) {
        case PTL_MIN: case PTL_MAX:
            return k != Kind::Complex;
        case PTL_SUM: case PTL_PROD: case PTL_DIFF:
        case PTL_SWAP: case PTL_CSWAP: case PTL_CSWAP_NE:
            return true;
        case PTL_LOR: case PTL_LAND: case PTL_LXOR:
        case PTL_BOR: case PTL_BAND: case PTL_BXOR: case PTL_MSWAP:
            return k == Kind::Integral;
        case PTL_CSWAP_LE: case PTL_CSWAP_LT: case PTL_CSWAP_GE: case PTL_CSWAP_GT:
            return k != Kind::Complex;
        default:
            return false;
    }
}

void apply(ptl_op_t op, ptl_datatype_t dt, void *target, const void *src, const void *operand,
           size_t len) {
    switch (dt) {
        case PTL_INT8_T: return apply_typed<int8_t>(op, target, src, operand, len);
        case PTL_UINT8_T: return apply_typed<uint8_t>(op, target, src, operand, len);
        case PTL_INT16_T: return apply_typed<int16_t>(op, target, src, operand, len);
        case PTL_UINT16_T: return apply_typed<uint16_t>(op, target, src, operand, len);
        case PTL_INT32_T: return apply_typed<int32_t>(op, target, src, operand, len);
        case PTL_UINT32_T: return apply_typed<uint32_t>(op, target, src, operand, len);
        case PTL_INT64_T: return apply_typed<int64_t>(op, target, src, operand, len);
        case PTL_UINT64_T: return apply_typed<uint64_t>(op, target, src, operand, len);
        case PTL_FLOAT: return apply_typed<float>(op, target, src, operand, len);
        case PTL_DOUBLE: return apply_typed<double>(op, target, src, operand, len);
        case PTL_LONG_DOUBLE: return apply_typed<long double>(op, target, src, operand, len);
        case PTL_FLOAT_COMPLEX:
            return apply_typed<std::complex<float>>(op, target, src, operand, len);
        case PTL_DOUBLE_COMPLEX:
            return apply_typed<std::complex<double>>(op, target, src, operand, len);
        case PTL_LONG_DOUBLE_COMPLEX:
            return apply_typed<std::complex<long double>>(op, target, src, operand, len);
        default: return;
    }
}

}  // namespace ptl::atomics
