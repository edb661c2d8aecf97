/* Creating an object that uses another races destroying that other, from two threads: the
 * destroy must either fail with EBUSY (the new object counts) or win, and then the create must
 * fail with EINVAL. What must never happen is both succeeding: an MR on a freed PD, a QP on a
 * freed CQ or SRQ, a CQ on a freed completion channel (the kernel's uobject locks serialise
 * these; so must softrdma).
 *
 * Thread "user" creates and destroys the using object as fast as it can; thread "destroyer"
 * tries to destroy the used one until it succeeds. Each of the ROUNDS rounds uses fresh used
 * objects. Exit status 0 and a last line "races: all checks passed" on success. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#define ROUNDS 200

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			printf("FAIL line %d: %s: ", __LINE__, #cond);         \
			printf(__VA_ARGS__);                                   \
			printf(" (errno %d %s)\n", errno, strerror(errno));    \
			exit(1);                                               \
		}                                                              \
	} while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static atomic_int gone;	      /* the destroyer's call returned 0 */
static atomic_int user_ready; /* the user thread is in its loop */
static uint64_t buf[512];

static void *pd_user(void *arg)
{
	(void)arg;
	atomic_store(&user_ready, 1);
	for (;;) {
		int was_gone = atomic_load(&gone);
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		if (!mr) {
			CHECK(errno == EINVAL, "reg_mr on a PD being deallocated");
			return NULL;
		}
		CHECK(!was_gone, "an MR on a PD deallocated before the registration began");
		/* The PD cannot have gone while this MR counts as its user. */
		CHECK(!atomic_load(&gone), "ibv_dealloc_pd succeeded with an MR registered");
		CHECK(ibv_dereg_mr(mr) == 0, "dereg");
	}
}

static void *pd_destroyer(void *arg)
{
	(void)arg;
	while (!atomic_load(&user_ready))
		;
	for (;;) {
		int r = ibv_dealloc_pd(pd);
		if (r == 0) {
			atomic_store(&gone, 1);
			return NULL;
		}
		CHECK(r == EBUSY, "dealloc_pd: %d", r);
	}
}

static void *cq_user(void *arg)
{
	struct ibv_pd *qpd = arg;
	atomic_store(&user_ready, 1);
	for (;;) {
		struct ibv_qp_init_attr ia = {
			.send_cq = cq,
			.recv_cq = cq,
			.qp_type = IBV_QPT_RC,
			.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
		};
		int was_gone = atomic_load(&gone);
		struct ibv_qp *qp = ibv_create_qp(qpd, &ia);
		if (!qp) {
			CHECK(errno == EINVAL, "create_qp on a CQ being destroyed");
			return NULL;
		}
		CHECK(!was_gone, "a QP on a CQ destroyed before the creation began");
		CHECK(!atomic_load(&gone), "ibv_destroy_cq succeeded with a QP using the CQ");
		CHECK(ibv_destroy_qp(qp) == 0, "destroy_qp");
	}
}

static void *cq_destroyer(void *arg)
{
	(void)arg;
	while (!atomic_load(&user_ready))
		;
	for (;;) {
		int r = ibv_destroy_cq(cq);
		if (r == 0) {
			atomic_store(&gone, 1);
			return NULL;
		}
		CHECK(r == EBUSY, "destroy_cq: %d", r);
	}
}

static struct ibv_srq *srq;
static struct ibv_comp_channel *channel;

static void *srq_user(void *arg)
{
	struct ibv_pd *qpd = arg;
	atomic_store(&user_ready, 1);
	for (;;) {
		struct ibv_qp_init_attr ia = {
			.send_cq = cq,
			.recv_cq = cq,
			.srq = srq,
			.qp_type = IBV_QPT_RC,
			.cap = {.max_send_wr = 1, .max_send_sge = 1},
		};
		int was_gone = atomic_load(&gone);
		struct ibv_qp *qp = ibv_create_qp(qpd, &ia);
		if (!qp) {
			CHECK(errno == EINVAL, "create_qp on an SRQ being destroyed");
			return NULL;
		}
		CHECK(!was_gone, "a QP on an SRQ destroyed before the creation began");
		CHECK(!atomic_load(&gone), "ibv_destroy_srq succeeded with a QP using the SRQ");
		CHECK(ibv_destroy_qp(qp) == 0, "destroy_qp");
	}
}

static void *srq_destroyer(void *arg)
{
	(void)arg;
	while (!atomic_load(&user_ready))
		;
	for (;;) {
		int r = ibv_destroy_srq(srq);
		if (r == 0) {
			atomic_store(&gone, 1);
			return NULL;
		}
		CHECK(r == EBUSY, "destroy_srq: %d", r);
	}
}

static void *channel_user(void *arg)
{
	(void)arg;
	atomic_store(&user_ready, 1);
	for (;;) {
		int was_gone = atomic_load(&gone);
		struct ibv_cq *c = ibv_create_cq(ctx, 4, NULL, channel, 0);
		if (!c) {
			CHECK(errno == EINVAL, "create_cq on a channel being destroyed");
			return NULL;
		}
		CHECK(!was_gone, "a CQ on a channel destroyed before the creation began");
		CHECK(!atomic_load(&gone), "ibv_destroy_comp_channel succeeded with a CQ on it");
		CHECK(ibv_destroy_cq(c) == 0, "destroy_cq");
	}
}

static void *channel_destroyer(void *arg)
{
	(void)arg;
	while (!atomic_load(&user_ready))
		;
	for (;;) {
		int r = ibv_destroy_comp_channel(channel);
		if (r == 0) {
			atomic_store(&gone, 1);
			return NULL;
		}
		CHECK(r == EBUSY, "destroy_comp_channel: %d", r);
	}
}

static void race(void *(*user)(void *), void *user_arg, void *(*destroyer)(void *))
{
	pthread_t u, d;
	atomic_store(&gone, 0);
	atomic_store(&user_ready, 0);
	CHECK(pthread_create(&u, NULL, user, user_arg) == 0, "thread");
	CHECK(pthread_create(&d, NULL, destroyer, NULL) == 0, "thread");
	pthread_join(u, NULL);
	pthread_join(d, NULL);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "a device");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	ibv_free_device_list(list);
	struct ibv_pd *qpd = ibv_alloc_pd(ctx);
	CHECK(qpd, "alloc_pd");
	for (int round = 0; round < ROUNDS; round++) {
		pd = ibv_alloc_pd(ctx);
		CHECK(pd, "alloc_pd, round %d", round);
		race(pd_user, NULL, pd_destroyer);
		cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		CHECK(cq, "create_cq, round %d", round);
		race(cq_user, qpd, cq_destroyer);
		cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
		srq = ibv_create_srq(qpd, &sa);
		CHECK(cq && srq, "create_cq, create_srq, round %d", round);
		race(srq_user, qpd, srq_destroyer);
		CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq, round %d", round);
		channel = ibv_create_comp_channel(ctx);
		CHECK(channel, "create_comp_channel, round %d", round);
		race(channel_user, NULL, channel_destroyer);
	}
	CHECK(ibv_dealloc_pd(qpd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("races: all checks passed\n");
	return 0;
}
