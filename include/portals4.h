/*
 * portals4.h — the Portals 4.3 network programming interface (portals-ucx).
 *
 * Constant values and type widths follow the widely used reference header
 * (sandialabs/portals4) wherever the specification leaves them open, so programs
 * written against it compile and link unchanged.  Names the 2024 reference header
 * lacks (PTL_DIFF, PTL_EVENT_ERROR, the version macros) are appended after its
 * values.
 *
 * Older clients: the names removed in 4.3 (PTL_INTERRUPTED, PTL_LE_ACK_DISABLE,
 * PTL_ME_ACK_DISABLE) are defined, at values no 4.3 name uses, so code written for
 * earlier headers (Open MPI's portals4 components, GASNet's portals4-conduit) compiles
 * unchanged.  They are accepted and have no effect: 4.3 targets can no longer
 * suppress acknowledgments, and PTL_INTERRUPTED is never returned.  Define
 * PTL_STRICT_4_3 before including this header to leave them out.  (PTL_COMPAT_PRE_4_3,
 * which used to enable them, is still accepted.)
 */
#ifndef PORTALS4_H
#define PORTALS4_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PTL_MAJOR_VERSION 4
#define PTL_MINOR_VERSION 3

/* Return codes (Table 3-7). */
enum ptl_retvals {
    PTL_OK = 0,
    PTL_ARG_INVALID = 1,
    PTL_CT_NONE_REACHED = 2,
    PTL_EQ_DROPPED = 3,
    PTL_EQ_EMPTY = 4,
    PTL_FAIL = 5,
    PTL_IGNORED = 6,
    PTL_IN_USE = 7,
    PTL_LIST_TOO_LONG = 8,
    PTL_NO_INIT = 9,
    PTL_NO_SPACE = 10,
    PTL_PID_IN_USE = 11,
    PTL_PT_FULL = 12,
    PTL_PT_EQ_NEEDED = 13,
    PTL_PT_IN_USE = 14,
    PTL_ABORTED = 15
};
#ifndef PTL_STRICT_4_3
#define PTL_INTERRUPTED 16 /* deprecated in 4.3; never returned */
#endif

/* Base types (§3.3). */
typedef uint64_t ptl_size_t;
typedef uint32_t ptl_pt_index_t;
typedef uint64_t ptl_match_bits_t;
typedef uint64_t ptl_hdr_data_t;
typedef unsigned int ptl_time_t;
typedef unsigned int ptl_interface_t;
typedef uint32_t ptl_nid_t;
typedef uint32_t ptl_pid_t;
typedef uint32_t ptl_rank_t;
typedef uint32_t ptl_uid_t;

typedef enum {
    PTL_SR_DROP_COUNT = 0,
    PTL_SR_PERMISSION_VIOLATIONS = 1,
    PTL_SR_OPERATION_VIOLATIONS = 2,
    /* implementation-defined registers (README) */
    PTL_SR_MALFORMED_MESSAGES = 3
} ptl_sr_index_t;
#define PTL_SR_LAST 4
/* spelling used by older reference headers */
#define PTL_SR_PERMISSIONS_VIOLATIONS PTL_SR_PERMISSION_VIOLATIONS
typedef int ptl_sr_value_t;

typedef uint32_t ptl_handle_any_t;
typedef ptl_handle_any_t ptl_handle_ni_t;
typedef ptl_handle_any_t ptl_handle_eq_t;
typedef ptl_handle_any_t ptl_handle_ct_t;
typedef ptl_handle_any_t ptl_handle_md_t;
typedef ptl_handle_any_t ptl_handle_le_t;
typedef ptl_handle_any_t ptl_handle_me_t;

typedef union {
    ptl_rank_t rank;
    struct {
        ptl_nid_t nid;
        ptl_pid_t pid;
    } phys;
} ptl_process_t;

typedef unsigned char ptl_list_t;
typedef unsigned char ptl_search_op_t;
typedef unsigned char ptl_ack_req_t;
typedef unsigned char ptl_event_kind_t;
typedef unsigned char ptl_ni_fail_t;
typedef unsigned char ptl_op_t;
typedef unsigned char ptl_datatype_t;

/* Special values. */
#define PTL_EQ_NONE ((ptl_handle_eq_t)0x3fffffff)
#define PTL_CT_NONE ((ptl_handle_ct_t)0x5fffffff)
#define PTL_INVALID_HANDLE ((ptl_handle_any_t)0xffffffff)
#define PTL_IFACE_DEFAULT ((ptl_interface_t)0xffffffff)
#define PTL_PID_ANY ((ptl_pid_t)0xffff)
#define PTL_NID_ANY ((ptl_nid_t)0xffff)
#define PTL_PID_MAX 1024
#define PTL_UID_ANY ((ptl_uid_t)0xffffffff)
#define PTL_PT_ANY ((ptl_pt_index_t)0xffffffff)
#define PTL_RANK_ANY ((ptl_rank_t)0xffffffff)
#define PTL_TIME_FOREVER ((ptl_time_t)0xffffffff)
#define PTL_SIZE_MAX ((ptl_size_t)0xffffffffffffffffULL)

/* NI options (§3.6.2). */
#define PTL_NI_MATCHING 1
#define PTL_NI_NO_MATCHING 2
#define PTL_NI_LOGICAL 4
#define PTL_NI_PHYSICAL 8

/* NI features (§3.6.1). */
#define PTL_TARGET_BIND_INACCESSIBLE 1
#define PTL_TOTAL_DATA_ORDERING 2
#define PTL_COHERENT_ATOMICS 4

/* PT options (§3.7.1). */
#define PTL_PT_ONLY_USE_ONCE 1
#define PTL_PT_FLOWCTRL 2
#define PTL_PT_ONLY_TRUNCATE 4
#define PTL_PT_ALLOC_DISABLED 16

/* Shared by MD, LE and ME options. */
#define PTL_IOVEC (1)

/* MD options (§3.10.1). */
#define PTL_MD_EVENT_CT_SEND (1 << 1)
#define PTL_MD_EVENT_CT_REPLY (1 << 2)
#define PTL_MD_EVENT_CT_ACK (1 << 3)
#define PTL_MD_UNORDERED (1 << 4)
#define PTL_MD_EVENT_SUCCESS_DISABLE (1 << 5)
#define PTL_MD_VOLATILE (1 << 6)
#define PTL_MD_EVENT_SEND_DISABLE (1 << 7)
#define PTL_MD_UNRELIABLE (1 << 8)
#define PTL_MD_EVENT_CT_BYTES (1 << 14)

/* ME options (§3.12.1); LE options share their bits. */
#define PTL_ME_OP_PUT (1 << 1)
#define PTL_ME_OP_GET (1 << 2)
#define PTL_ME_USE_ONCE (1 << 3)
#define PTL_ME_UNEXPECTED_HDR_DISABLE (1 << 4)
#define PTL_ME_IS_ACCESSIBLE (1 << 5)
#define PTL_ME_EVENT_LINK_DISABLE (1 << 6)
#define PTL_ME_EVENT_COMM_DISABLE (1 << 7)
#define PTL_ME_EVENT_FLOWCTRL_DISABLE (1 << 8)
#define PTL_ME_EVENT_SUCCESS_DISABLE (1 << 9)
#define PTL_ME_EVENT_OVER_DISABLE (1 << 10)
#define PTL_ME_EVENT_UNLINK_DISABLE (1 << 11)
#define PTL_ME_EVENT_CT_COMM (1 << 12)
#define PTL_ME_EVENT_CT_OVERFLOW (1 << 13)
#define PTL_ME_EVENT_CT_BYTES (1 << 14)
#define PTL_ME_MANAGE_LOCAL (1 << 15)
#define PTL_ME_NO_TRUNCATE (1 << 16)
#define PTL_ME_MAY_ALIGN (1 << 17)
#define PTL_ME_LOCAL_INC_UH_RLENGTH (1 << 18)

#define PTL_LE_OP_PUT PTL_ME_OP_PUT
#define PTL_LE_OP_GET PTL_ME_OP_GET
#define PTL_LE_USE_ONCE PTL_ME_USE_ONCE
#define PTL_LE_UNEXPECTED_HDR_DISABLE PTL_ME_UNEXPECTED_HDR_DISABLE
#define PTL_LE_IS_ACCESSIBLE PTL_ME_IS_ACCESSIBLE
#define PTL_LE_EVENT_LINK_DISABLE PTL_ME_EVENT_LINK_DISABLE
#define PTL_LE_EVENT_COMM_DISABLE PTL_ME_EVENT_COMM_DISABLE
#define PTL_LE_EVENT_FLOWCTRL_DISABLE PTL_ME_EVENT_FLOWCTRL_DISABLE
#define PTL_LE_EVENT_SUCCESS_DISABLE PTL_ME_EVENT_SUCCESS_DISABLE
#define PTL_LE_EVENT_OVER_DISABLE PTL_ME_EVENT_OVER_DISABLE
#define PTL_LE_EVENT_UNLINK_DISABLE PTL_ME_EVENT_UNLINK_DISABLE
#define PTL_LE_EVENT_CT_COMM PTL_ME_EVENT_CT_COMM
#define PTL_LE_EVENT_CT_OVERFLOW PTL_ME_EVENT_CT_OVERFLOW
#define PTL_LE_EVENT_CT_BYTES PTL_ME_EVENT_CT_BYTES

#ifndef PTL_STRICT_4_3
/* Removed in 4.3 (targets may no longer disable acks); accepted and ignored. */
#define PTL_ME_ACK_DISABLE (1 << 19)
#define PTL_LE_ACK_DISABLE PTL_ME_ACK_DISABLE
#endif

/* ptl_list_t */
#define PTL_PRIORITY_LIST 0
#define PTL_OVERFLOW_LIST 1

/* ptl_search_op_t */
#define PTL_SEARCH_ONLY 0
#define PTL_SEARCH_DELETE 1

/* ptl_ack_req_t */
#define PTL_NO_ACK_REQ 0
#define PTL_ACK_REQ 1
#define PTL_CT_ACK_REQ 2
#define PTL_OC_ACK_REQ 3

/* ptl_event_kind_t */
#define PTL_EVENT_GET 0
#define PTL_EVENT_GET_OVERFLOW 1
#define PTL_EVENT_PUT 2
#define PTL_EVENT_PUT_OVERFLOW 3
#define PTL_EVENT_ATOMIC 4
#define PTL_EVENT_ATOMIC_OVERFLOW 5
#define PTL_EVENT_FETCH_ATOMIC 6
#define PTL_EVENT_FETCH_ATOMIC_OVERFLOW 7
#define PTL_EVENT_REPLY 8
#define PTL_EVENT_SEND 9
#define PTL_EVENT_ACK 10
#define PTL_EVENT_PT_DISABLED 11
#define PTL_EVENT_LINK 12
#define PTL_EVENT_AUTO_UNLINK 13
#define PTL_EVENT_AUTO_FREE 14
#define PTL_EVENT_SEARCH 15
#define PTL_EVENT_ERROR 16

/* ptl_ni_fail_t */
#define PTL_NI_OK 0
#define PTL_NI_UNDELIVERABLE 1
#define PTL_NI_DROPPED 2
#define PTL_NI_PT_DISABLED 3
#define PTL_NI_PERM_VIOLATION 4
#define PTL_NI_OP_VIOLATION 5
#define PTL_NI_NO_MATCH 6
#define PTL_NI_SEGV 7

/* ptl_op_t */
#define PTL_MIN 0
#define PTL_MAX 1
#define PTL_SUM 2
#define PTL_PROD 3
#define PTL_LOR 4
#define PTL_LAND 5
#define PTL_BOR 6
#define PTL_BAND 7
#define PTL_LXOR 8
#define PTL_BXOR 9
#define PTL_SWAP 10
#define PTL_CSWAP 11
#define PTL_CSWAP_NE 12
#define PTL_CSWAP_LE 13
#define PTL_CSWAP_LT 14
#define PTL_CSWAP_GE 15
#define PTL_CSWAP_GT 16
#define PTL_MSWAP 17
#define PTL_DIFF 18

/* ptl_datatype_t */
#define PTL_INT8_T 0
#define PTL_UINT8_T 1
#define PTL_INT16_T 2
#define PTL_UINT16_T 3
#define PTL_INT32_T 4
#define PTL_UINT32_T 5
#define PTL_FLOAT 6
#define PTL_INT64_T 7
#define PTL_UINT64_T 8
#define PTL_DOUBLE 9
#define PTL_FLOAT_COMPLEX 10
#define PTL_DOUBLE_COMPLEX 11
#define PTL_LONG_DOUBLE 12
#define PTL_LONG_DOUBLE_COMPLEX 13

/* Structures (§3.6.1, §3.10.1, §3.10.2, §3.11.1, §3.12.1, §3.13.4, §3.14.1). */
typedef struct {
    int max_entries;
    int max_unexpected_headers;
    int max_mds;
    int max_cts;
    int max_eqs;
    int max_pt_index;
    int max_iovecs;
    int max_list_size;
    int max_triggered_ops;
    ptl_size_t max_msg_size;
    ptl_size_t max_atomic_size;
    ptl_size_t max_fetch_atomic_size;
    ptl_size_t max_waw_ordered_size;
    ptl_size_t max_war_ordered_size;
    ptl_size_t max_volatile_size;
    unsigned int features;
} ptl_ni_limits_t;

typedef struct {
    void *start;
    ptl_size_t length;
    unsigned int options;
    ptl_handle_eq_t eq_handle;
    ptl_handle_ct_t ct_handle;
} ptl_md_t;

typedef struct {
    void *iov_base;
    ptl_size_t iov_len;
} ptl_iovec_t;

typedef struct {
    void *start;
    ptl_size_t length;
    ptl_handle_ct_t ct_handle;
    ptl_uid_t uid;
    unsigned int options;
} ptl_le_t;

typedef struct {
    void *start;
    ptl_size_t length;
    ptl_handle_ct_t ct_handle;
    ptl_uid_t uid;
    unsigned int options;
    ptl_process_t match_id;
    ptl_match_bits_t match_bits;
    ptl_match_bits_t ignore_bits;
    ptl_size_t min_free;
} ptl_me_t;

typedef struct {
    void *start;
    void *user_ptr;
    ptl_hdr_data_t hdr_data;
    ptl_match_bits_t match_bits;
    ptl_size_t rlength;
    ptl_size_t mlength;
    ptl_size_t remote_offset;
    ptl_process_t initiator;
    ptl_uid_t uid;
    ptl_pt_index_t pt_index;
    ptl_event_kind_t type;
    ptl_list_t ptl_list;
    ptl_ni_fail_t ni_fail_type;
    ptl_op_t atomic_operation;
    ptl_datatype_t atomic_type;
} ptl_event_t;

typedef struct {
    ptl_size_t success;
    ptl_size_t failure;
} ptl_ct_event_t;

/* Initialization and cleanup (§3.5). */
int PtlInit(void);
void PtlFini(void);
void PtlAbort(void);

/* Network interfaces (§3.6). */
int PtlNIInit(ptl_interface_t iface, unsigned int options, ptl_pid_t pid,
              const ptl_ni_limits_t *desired, ptl_ni_limits_t *actual,
              ptl_handle_ni_t *ni_handle);
int PtlNIFini(ptl_handle_ni_t ni_handle);
int PtlNIStatus(ptl_handle_ni_t ni_handle, ptl_sr_index_t status_register,
                ptl_sr_value_t *status);
int PtlNIHandle(ptl_handle_any_t handle, ptl_handle_ni_t *ni_handle);
int PtlSetMap(ptl_handle_ni_t ni_handle, ptl_size_t map_size, const ptl_process_t *mapping);
int PtlGetMap(ptl_handle_ni_t ni_handle, ptl_size_t map_size, ptl_process_t *mapping,
              ptl_size_t *actual_map_size);

/* Portal table entries (§3.7). */
int PtlPTAlloc(ptl_handle_ni_t ni_handle, unsigned int options, ptl_handle_eq_t eq_handle,
               ptl_pt_index_t pt_index_req, ptl_pt_index_t *pt_index);
int PtlPTFree(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index);
int PtlPTDisable(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index);
int PtlPTEnable(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index);

/* Identification (§3.8, §3.9). */
int PtlGetUid(ptl_handle_ni_t ni_handle, ptl_uid_t *uid);
int PtlGetId(ptl_handle_ni_t ni_handle, ptl_process_t *id);
int PtlGetPhysId(ptl_handle_ni_t ni_handle, ptl_process_t *id);

/* Memory descriptors (§3.10). */
int PtlMDBind(ptl_handle_ni_t ni_handle, const ptl_md_t *md, ptl_handle_md_t *md_handle);
int PtlMDRelease(ptl_handle_md_t md_handle);

/* List entries (§3.11). */
int PtlLEAppend(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index, const ptl_le_t *le,
                ptl_list_t ptl_list, void *user_ptr, ptl_handle_le_t *le_handle);
int PtlLEUnlink(ptl_handle_le_t le_handle);
int PtlLESearch(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index, const ptl_le_t *le,
                ptl_search_op_t ptl_search_op, void *user_ptr);

/* Match list entries (§3.12). */
int PtlMEAppend(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index, const ptl_me_t *me,
                ptl_list_t ptl_list, void *user_ptr, ptl_handle_me_t *me_handle);
int PtlMEUnlink(ptl_handle_me_t me_handle);
int PtlMESearch(ptl_handle_ni_t ni_handle, ptl_pt_index_t pt_index, const ptl_me_t *me,
                ptl_search_op_t ptl_search_op, void *user_ptr);

/* Event queues (§3.13). */
int PtlEQAlloc(ptl_handle_ni_t ni_handle, ptl_size_t count, ptl_handle_eq_t *eq_handle);
int PtlEQFree(ptl_handle_eq_t eq_handle);
int PtlEQGet(ptl_handle_eq_t eq_handle, ptl_event_t *event);
int PtlEQWait(ptl_handle_eq_t eq_handle, ptl_event_t *event);
int PtlEQPoll(const ptl_handle_eq_t *eq_handles, unsigned int size, ptl_time_t timeout,
              ptl_event_t *event, unsigned int *which);

/* Counting events (§3.14). */
int PtlCTAlloc(ptl_handle_ni_t ni_handle, ptl_handle_ct_t *ct_handle);
int PtlCTFree(ptl_handle_ct_t ct_handle);
int PtlCTCancelTriggered(ptl_handle_ct_t ct_handle);
int PtlCTGet(ptl_handle_ct_t ct_handle, ptl_ct_event_t *event);
int PtlCTWait(ptl_handle_ct_t ct_handle, ptl_size_t test, ptl_ct_event_t *event);
int PtlCTPoll(const ptl_handle_ct_t *ct_handles, const ptl_size_t *tests, unsigned int size,
              ptl_time_t timeout, ptl_ct_event_t *event, unsigned int *which);
int PtlCTSet(ptl_handle_ct_t ct_handle, ptl_ct_event_t new_ct);
int PtlCTInc(ptl_handle_ct_t ct_handle, ptl_ct_event_t increment);

/* Data movement (§3.15). */
int PtlPut(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
           ptl_ack_req_t ack_req, ptl_process_t target_id, ptl_pt_index_t pt_index,
           ptl_match_bits_t match_bits, ptl_size_t remote_offset, void *user_ptr,
           ptl_hdr_data_t hdr_data);
int PtlGet(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
           ptl_process_t target_id, ptl_pt_index_t pt_index, ptl_match_bits_t match_bits,
           ptl_size_t remote_offset, void *user_ptr);
int PtlAtomic(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
              ptl_ack_req_t ack_req, ptl_process_t target_id, ptl_pt_index_t pt_index,
              ptl_match_bits_t match_bits, ptl_size_t remote_offset, void *user_ptr,
              ptl_hdr_data_t hdr_data, ptl_op_t operation, ptl_datatype_t datatype);
int PtlFetchAtomic(ptl_handle_md_t get_md_handle, ptl_size_t local_get_offset,
                   ptl_handle_md_t put_md_handle, ptl_size_t local_put_offset,
                   ptl_size_t length, ptl_process_t target_id, ptl_pt_index_t pt_index,
                   ptl_match_bits_t match_bits, ptl_size_t remote_offset, void *user_ptr,
                   ptl_hdr_data_t hdr_data, ptl_op_t operation, ptl_datatype_t datatype);
int PtlSwap(ptl_handle_md_t get_md_handle, ptl_size_t local_get_offset,
            ptl_handle_md_t put_md_handle, ptl_size_t local_put_offset, ptl_size_t length,
            ptl_process_t target_id, ptl_pt_index_t pt_index, ptl_match_bits_t match_bits,
            ptl_size_t remote_offset, void *user_ptr, ptl_hdr_data_t hdr_data,
            const void *operand, ptl_op_t operation, ptl_datatype_t datatype);
int PtlAtomicSync(void);

/* Triggered operations (§3.16). */
int PtlTriggeredPut(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
                    ptl_ack_req_t ack_req, ptl_process_t target_id, ptl_pt_index_t pt_index,
                    ptl_match_bits_t match_bits, ptl_size_t remote_offset, void *user_ptr,
                    ptl_hdr_data_t hdr_data, ptl_handle_ct_t trig_ct_handle,
                    ptl_size_t threshold);
int PtlTriggeredGet(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
                    ptl_process_t target_id, ptl_pt_index_t pt_index,
                    ptl_match_bits_t match_bits, ptl_size_t remote_offset, void *user_ptr,
                    ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);
int PtlTriggeredAtomic(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
                       ptl_ack_req_t ack_req, ptl_process_t target_id,
                       ptl_pt_index_t pt_index, ptl_match_bits_t match_bits,
                       ptl_size_t remote_offset, void *user_ptr, ptl_hdr_data_t hdr_data,
                       ptl_op_t operation, ptl_datatype_t datatype,
                       ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);
int PtlTriggeredFetchAtomic(ptl_handle_md_t get_md_handle, ptl_size_t local_get_offset,
                            ptl_handle_md_t put_md_handle, ptl_size_t local_put_offset,
                            ptl_size_t length, ptl_process_t target_id,
                            ptl_pt_index_t pt_index, ptl_match_bits_t match_bits,
                            ptl_size_t remote_offset, void *user_ptr, ptl_hdr_data_t hdr_data,
                            ptl_op_t operation, ptl_datatype_t datatype,
                            ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);
int PtlTriggeredSwap(ptl_handle_md_t get_md_handle, ptl_size_t local_get_offset,
                     ptl_handle_md_t put_md_handle, ptl_size_t local_put_offset,
                     ptl_size_t length, ptl_process_t target_id, ptl_pt_index_t pt_index,
                     ptl_match_bits_t match_bits, ptl_size_t remote_offset, void *user_ptr,
                     ptl_hdr_data_t hdr_data, const void *operand, ptl_op_t operation,
                     ptl_datatype_t datatype, ptl_handle_ct_t trig_ct_handle,
                     ptl_size_t threshold);
int PtlTriggeredCTInc(ptl_handle_ct_t ct_handle, ptl_ct_event_t increment,
                      ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);
int PtlTriggeredCTSet(ptl_handle_ct_t ct_handle, ptl_ct_event_t new_ct,
                      ptl_handle_ct_t trig_ct_handle, ptl_size_t threshold);

/* Deferred communication (§3.17). */
int PtlStartBundle(ptl_handle_ni_t ni_handle);
int PtlEndBundle(ptl_handle_ni_t ni_handle);

/* Handles (§3.18). */
int PtlHandleIsEqual(ptl_handle_any_t handle1, ptl_handle_any_t handle2);

#ifdef __cplusplus
}
#endif

#endif /* PORTALS4_H */
