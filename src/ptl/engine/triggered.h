// A triggered operation (§3.16): the arguments of a data movement or CT call, kept until the
// trigger CT's success count reaches the threshold. The payload is read when it fires (TR3).
#pragma once

#include <portals4.h>

#include <cstdint>
#include <cstring>

namespace ptl {

enum class TrigKind : uint8_t { Put, Get, Atomic, FetchAtomic, Swap, CtInc, CtSet };

inline const char *trig_kind_name(TrigKind k) {
    static const char *const names[] = {"put", "get", "atomic", "fetch-atomic", "swap", "ct-inc", "ct-set"};
    return names[static_cast<unsigned>(k)];
}

struct DataOpArgs {
    ptl_handle_md_t md = PTL_INVALID_HANDLE;      // put md (or the only md)
    ptl_size_t local_offset = 0;
    ptl_handle_md_t get_md = PTL_INVALID_HANDLE;  // reply md for get/fetch/swap
    ptl_size_t local_get_offset = 0;
    ptl_size_t length = 0;
    ptl_ack_req_t ack_req = PTL_NO_ACK_REQ;
    ptl_process_t target{};
    ptl_pt_index_t pt_index = 0;
    ptl_match_bits_t match_bits = 0;
    ptl_size_t remote_offset = 0;
    void *user_ptr = nullptr;
    ptl_hdr_data_t hdr_data = 0;
    ptl_op_t op = 0;
    ptl_datatype_t datatype = 0;
    // One element, up to long double complex; read only for the operand_len bytes PtlSwap set.
    unsigned char operand[32];
};

struct TrigOp {
    TrigKind kind;
    DataOpArgs args;          // data movement
    ptl_handle_ct_t ct = 0;   // CtInc / CtSet target
    ptl_ct_event_t value{};   // CtInc increment / CtSet value
};

}  // namespace ptl
