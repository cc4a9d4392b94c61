/* The pipeline's messages between stages, as Megatron-LM sends them
 * (SC'21 section 4.1, on by default in its code):
 *
 * - Scatter/gather.  On a tensor-parallel mesh (t > 1) a message is the
 *   same on the t ranks of a tensor group: the stage's last operator's
 *   output after its all-reduce (forward), the gradient of the stage's input
 *   after its first operator's (backward).  Sending it whole from every
 *   rank moves t copies over the link between stages.  Instead tensor rank
 *   r sends piece r (osdp_pipe_piece_of) to tensor rank r of the other
 *   stage, and the receiving group all-gathers the pieces in place in the
 *   receive buffer over its in-node link.  It moves data only: the numbers
 *   are the same bits, the buffers the same bytes.  Always on (Megatron's
 *   default): nothing is traded, 1/t of the bytes cross the slow link and
 *   the gather runs on the fast one.
 * - A forward message under a bf16 residual stream crosses in bf16: the
 *   operator rounded its output to bf16 values (osdp/gpt.h), so narrowing
 *   it is exact.  The sender narrows its piece in place at the start of the
 *   piece's own bytes and widens it back after the send's wait; the
 *   receiver receives and gathers bf16 into the first half of its fp32
 *   buffer and widens it in place (runtime.c's bf16 all-reduce does the
 *   same): no byte added.  The gradient crosses in fp32: it is not rounded
 *   to bf16 anywhere (the backward runs in fp32 over the stream), and its
 *   rounding would change the numbers.
 *
 * osdp/schedule.h waits an activation send before anything reads or writes
 * its buffer again (the stage's last operator's recomputed forward or its
 * backward), right after the gradient of that micro-batch has come back. */
#include "runtime_internal.h"

#include <stdint.h>

#define TRY(expr) do { osdp_status s_ = (expr); if (s_ != OSDP_OK) return s_; } while (0)

/* the tensor group the message is cut for: t 1 (whole) without one */
static int group_size(const osdp_runtime *rt) { return rt->tp_comm && rt->tp_size > 1 ? rt->tp_size : 1; }

static osdp_pipe_piece own_piece(const osdp_runtime *rt, size_t n)
{
    return osdp_pipe_piece_of(n, group_size(rt), group_size(rt) > 1 ? rt->tp_rank : 0);
}

osdp_status osdp_stage_message_send(osdp_runtime *rt, osdp_comm *pp, float *buf, size_t n, int narrow, int peer,
                                    osdp_request *req)
{
    const osdp_pipe_piece p = own_piece(rt, n);
    if (!narrow) return osdp_comm_send(pp, buf + p.at, p.count, OSDP_FLOAT32, peer, req);
    osdp_runtime_narrow_in_place(rt->backend, buf + p.at, p.count);
    return osdp_comm_send(pp, buf + p.at, p.count, OSDP_BFLOAT16, peer, req);
}

osdp_status osdp_stage_message_sent(osdp_runtime *rt, osdp_comm *pp, float *buf, size_t n, int narrow,
                                    osdp_request *req)
{
    TRY(osdp_comm_wait(pp, req));
    if (narrow) {
        const osdp_pipe_piece p = own_piece(rt, n);
        osdp_runtime_widen_in_place(rt->backend, buf + p.at, p.count);
    }
    return OSDP_OK;
}

osdp_status osdp_stage_message_receive(osdp_runtime *rt, osdp_comm *pp, float *buf, size_t n, int narrow, int peer)
{
    const osdp_dtype type = narrow ? OSDP_BFLOAT16 : OSDP_FLOAT32;
    const size_t width = osdp_dtype_size(type);
    char *bytes = (char *)buf;   /* the message as it crosses: n elements of `width` from the start */
    const osdp_pipe_piece p = own_piece(rt, n);
    TRY(osdp_comm_recv(pp, bytes + p.at * width, p.count, type, peer, NULL));
    /* the t equal pieces make the whole message (t divides it on every layout: osdp_pipe_piece_of) */
    if (group_size(rt) > 1) TRY(osdp_comm_all_gather(rt->tp_comm, bytes + p.at * width, bytes, p.count, type, NULL));
    if (narrow) osdp_runtime_widen_in_place(rt->backend, buf, n);
    return OSDP_OK;
}
