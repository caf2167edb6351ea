/*
 * kernels.c: the fake GPUs' time model: kernel launches occupy a GPU one after another.
 *
 * A launch of `blocks` thread blocks runs ceil(blocks / SMs) waves of `ns_per_wave` each, starting when
 * the GPU's queue drains (start = max(now, busy_until)). Every execution is recorded in a per-GPU ring of
 * (pid, start, end) so utilization over any recent window can be computed for the GPU or one process.
 */
#include <stddef.h>

#include "fakestate.h"

struct kernel_op {
    unsigned gpu;
    pid_t pid;
    uint64_t blocks, ns_per_wave, since, now, result;
};

static int do_submit(void *arg, fake_gpu_state_t *st)
{
    struct kernel_op *op = arg;
    const fake_gpu_t *gpus;
    unsigned n;
    if (fake_topology(&gpus, &n, NULL) != 0 || op->gpu >= n)
        return -1;
    uint64_t sms = gpus[op->gpu].model->multiprocessors;
    uint64_t blocks = op->blocks ? op->blocks : 1; /* an empty grid still costs a launch */
    uint64_t waves = (blocks + sms - 1) / sms;
    uint64_t start = op->now > st->busy_until_ns ? op->now : st->busy_until_ns;
    uint64_t end = start + waves * op->ns_per_wave;
    st->busy_until_ns = end;
    fake_proc_slot_t *p = fake_proc_slot(st, op->pid, 1);
    fake_kernel_rec_t *r = &st->ring[st->ring_next];
    r->pid = op->pid;
    r->pidns = fake_self_pidns();
    r->slot = p ? (uint32_t)(p - st->procs) + 1 : 0;
    r->start_ns = start;
    r->end_ns = end;
    st->ring_next = (st->ring_next + 1) % FAKE_KERNEL_RING;
    if (st->ring_count < FAKE_KERNEL_RING)
        st->ring_count++;
    if (p)
        p->last_kernel_end = end;
    op->result = end;
    return 0;
}

FAKE_EXPORT uint64_t fake_kernel_submit(unsigned gpu, pid_t pid, uint64_t blocks, uint64_t ns_per_wave)
{
    struct kernel_op op = {.gpu = gpu, .pid = pid, .blocks = blocks, .ns_per_wave = ns_per_wave,
                           .now = fake_now_ns()};
    return fake_state_locked(gpu, do_submit, &op) == 0 ? op.result : op.now;
}

static int do_last_end(void *arg, fake_gpu_state_t *st)
{
    struct kernel_op *op = arg;
    fake_proc_slot_t *p = fake_proc_slot(st, op->pid, 0);
    op->result = p ? p->last_kernel_end : 0;
    /* The slot may have been dropped with its memory: the ring still knows, newest first. */
    for (uint32_t k = 0; !op->result && k < st->ring_count; k++) {
        const fake_kernel_rec_t *r = &st->ring[(st->ring_next + FAKE_KERNEL_RING - 1 - k) % FAKE_KERNEL_RING];
        if (r->pid == op->pid && r->pidns == fake_self_pidns())
            op->result = r->end_ns;
    }
    return 0;
}

FAKE_EXPORT uint64_t fake_kernel_last_end(unsigned gpu, pid_t pid)
{
    struct kernel_op op = {.gpu = gpu, .pid = pid};
    return fake_state_locked(gpu, do_last_end, &op) == 0 ? op.result : 0;
}

/* Busy time of [since, now] covered by kernels (of one pid when pid > 0). Kernels never overlap on one
 * GPU, so the sum of clipped intervals is the busy time. */
static int do_utilization(void *arg, fake_gpu_state_t *st)
{
    struct kernel_op *op = arg;
    uint64_t busy = 0;
    for (uint32_t k = 0; k < st->ring_count; k++) {
        const fake_kernel_rec_t *r = &st->ring[(st->ring_next + FAKE_KERNEL_RING - 1 - k) % FAKE_KERNEL_RING];
        if (r->end_ns <= op->since)
            break; /* kernels never overlap, so older entries ended earlier still */
        if (op->pid > 0 && (r->pid != op->pid || r->pidns != fake_self_pidns()))
            continue;
        uint64_t s = r->start_ns > op->since ? r->start_ns : op->since;
        uint64_t e = r->end_ns < op->now ? r->end_ns : op->now;
        if (e > s)
            busy += e - s;
    }
    uint64_t window = op->now - op->since;
    uint64_t pct = (busy * 100 + window / 2) / window;
    op->result = pct > 100 ? 100 : pct;
    return 0;
}

FAKE_EXPORT unsigned fake_utilization(unsigned gpu, pid_t pid, uint64_t since_ns)
{
    struct kernel_op op = {.gpu = gpu, .pid = pid, .since = since_ns, .now = fake_now_ns()};
    if (op.since >= op.now)
        return 0;
    return fake_state_locked(gpu, do_utilization, &op) == 0 ? (unsigned)op.result : 0;
}
