/* Creating an object that uses another races destroying that other, from two threads: the
 * destroy must either fail with EBUSY (the new object counts) or win, and then the create must
 * fail with EINVAL. What must never happen is both succeeding: an MR on a freed PD, a QP on a
 * freed CQ or SRQ, a CQ on a freed completion channel (the kernel's uobject locks serialise
 * these; so must softrdma).
 *
 * For each pairing, thread "user" creates and destroys the using object as fast as it can;
 * thread "destroyer" tries to destroy the used one until it succeeds. Each of the ROUNDS rounds
 * uses fresh used objects. Exit status 0 and a last line "races: all checks passed" on
 * success. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "check.h"

#define ROUNDS 200

static struct ibv_context *ctx;
static struct ibv_pd *qpd; /* the PD of the QPs, which no round destroys */
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_srq *srq;
static struct ibv_comp_channel *channel;
static uint64_t buf[512];

/* One pairing: the used object's destruction, and the using object's creation (NULL with
 * errno on failure) and destruction. */
struct pairing {
	const char *what;
	int (*destroy_used)(void);
	void *(*create_user)(void);
	int (*destroy_user)(void *);
};

static atomic_int gone;	      /* the destroyer's call returned 0 */
static atomic_int user_ready; /* the user thread is in its loop */

static void *user(void *arg)
{
	const struct pairing *p = arg;
	atomic_store(&user_ready, 1);
	for (;;) {
		int was_gone = atomic_load(&gone);
		void *obj = p->create_user();
		if (!obj) {
			CHECK(errno == EINVAL, "%s: creation refused otherwise", p->what);
			return NULL;
		}
		CHECK(!was_gone, "%s: created on an object destroyed before the creation began",
		      p->what);
		/* The used object cannot have gone while this one counts as its user. */
		CHECK(!atomic_load(&gone), "%s: the destruction succeeded with a user", p->what);
		CHECK(p->destroy_user(obj) == 0, "%s: destroying the user", p->what);
	}
}

static void *destroyer(void *arg)
{
	const struct pairing *p = arg;
	while (!atomic_load(&user_ready))
		;
	for (;;) {
		int r = p->destroy_used();
		if (r == 0) {
			atomic_store(&gone, 1);
			return NULL;
		}
		CHECK(r == EBUSY, "%s: destruction: %d", p->what, r);
	}
}

static void race(const struct pairing *p)
{
	pthread_t u, d;
	atomic_store(&gone, 0);
	atomic_store(&user_ready, 0);
	CHECK(pthread_create(&u, NULL, user, (void *)p) == 0, "thread");
	CHECK(pthread_create(&d, NULL, destroyer, (void *)p) == 0, "thread");
	pthread_join(u, NULL);
	pthread_join(d, NULL);
}

static int dealloc_pd(void) { return ibv_dealloc_pd(pd); }
static int destroy_cq(void) { return ibv_destroy_cq(cq); }
static int destroy_srq(void) { return ibv_destroy_srq(srq); }
static int destroy_channel(void) { return ibv_destroy_comp_channel(channel); }

static void *reg_mr(void) { return ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE); }
static int dereg_mr(void *mr) { return ibv_dereg_mr(mr); }

static void *create_qp(void)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.srq = srq,
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 1, .max_recv_wr = srq ? 0 : 1, .max_send_sge = 1,
			.max_recv_sge = srq ? 0 : 1},
	};
	return ibv_create_qp(qpd, &ia);
}
static int destroy_qp(void *qp) { return ibv_destroy_qp(qp); }

static void *create_cq(void) { return ibv_create_cq(ctx, 4, NULL, channel, 0); }
static int destroy_user_cq(void *c) { return ibv_destroy_cq(c); }

static const struct pairing mr_on_pd = {"MR on PD", dealloc_pd, reg_mr, dereg_mr};
static const struct pairing qp_on_cq = {"QP on CQ", destroy_cq, create_qp, destroy_qp};
static const struct pairing qp_on_srq = {"QP on SRQ", destroy_srq, create_qp, destroy_qp};
static const struct pairing cq_on_channel = {"CQ on channel", destroy_channel, create_cq,
					     destroy_user_cq};

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "a device");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	ibv_free_device_list(list);
	qpd = ibv_alloc_pd(ctx);
	CHECK(qpd, "alloc_pd");
	for (int round = 0; round < ROUNDS; round++) {
		pd = ibv_alloc_pd(ctx);
		CHECK(pd, "alloc_pd, round %d", round);
		race(&mr_on_pd);
		cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		CHECK(cq, "create_cq, round %d", round);
		race(&qp_on_cq);
		cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
		srq = ibv_create_srq(qpd, &sa);
		CHECK(cq && srq, "create_cq, create_srq, round %d", round);
		race(&qp_on_srq);
		srq = NULL;
		CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq, round %d", round);
		channel = ibv_create_comp_channel(ctx);
		CHECK(channel, "create_comp_channel, round %d", round);
		race(&cq_on_channel);
		channel = NULL;
	}
	CHECK(ibv_dealloc_pd(qpd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("races: all checks passed\n");
	return 0;
}
