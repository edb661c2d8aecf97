/* Two RC QPs of one device connected to each other over the device's address, for the C
 * test programs: the QP state changes with the attributes perftest uses, and polling and
 * posting one work request. `gid` is the device's GID 1, which the program queries first. */
#ifndef SOFTRDMA_TEST_RC_H
#define SOFTRDMA_TEST_RC_H

#include <stdint.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "check.h"

static union ibv_gid gid;

static inline int modify_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_ACCESS_FLAGS);
}

static inline int modify_rtr(struct ibv_qp *qp, uint32_t dest_qpn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = dest_qpn,
		.rq_psn = 100,
		.max_dest_rd_atomic = 16,
		.min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1,
			.port_num = 1,
			.grh = { .dgid = gid, .sgid_index = 1, .hop_limit = 64 },
		},
	};
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static inline int modify_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.sq_psn = 100,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.max_rd_atomic = 16,
	};
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_MAX_QP_RD_ATOMIC);
}

static inline void connect_pair(struct ibv_qp *a, struct ibv_qp *b)
{
	CHECK(modify_init(a) == 0, "INIT");
	CHECK(modify_init(b) == 0, "INIT");
	CHECK(modify_rtr(a, b->qp_num) == 0, "RTR");
	CHECK(modify_rtr(b, a->qp_num) == 0, "RTR");
	CHECK(modify_rts(a) == 0, "RTS");
	CHECK(modify_rts(b) == 0, "RTS");
	CHECK(a->state == IBV_QPS_RTS, "ibv_modify_qp updates qp->state");
}

/* Two RC QPs of `pd` on `send_cq` and `recv_cq`, `depth` requests of one SGE each way,
 * connected to each other. */
static inline void rc_pair(struct ibv_pd *pd, struct ibv_cq *send_cq, struct ibv_cq *recv_cq,
			   uint32_t depth, struct ibv_qp **a, struct ibv_qp **b)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = send_cq,
		.recv_cq = recv_cq,
		.cap = { .max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	*a = ibv_create_qp(pd, &ia);
	*b = ibv_create_qp(pd, &ia);
	CHECK(*a && *b, "create_qp");
	connect_pair(*a, *b);
}

/* Polls `cq` (busy, through the inline ibv_poll_cq) until one completion arrives. */
static inline struct ibv_wc poll_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	time_t start = time(NULL);
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(time(NULL) - start < 10, "no completion within 10 s");
	CHECK(n == 1, "ibv_poll_cq returned %d", n);
	return wc;
}

static inline void post_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;

	CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "post_recv");
}

static inline void post_one(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, wr, &bad);

	CHECK(rc == 0, "ibv_post_send returned %d", rc);
}

#endif
