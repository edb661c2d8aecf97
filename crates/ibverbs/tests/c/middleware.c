/* What middleware (UCX, libfabric, Open MPI) reads from a device before and while it uses
 * it, checked against the system <infiniband/verbs.h> on softrdma's libibverbs.so.1:
 *
 * - the GID table: index 0 (what programs take by default) and index 1 (the IPv4 GID's index
 *   on rxe) are both the device's IPv4-mapped address, index 2 a link-local GID, all RoCE v2
 *   by ibv_query_gid_type, ibv_query_gid_ex and ibv_query_gid_table alike; an address handle
 *   from index 0 or 1 works, one from index 2 is EINVAL; indices 3 to 15 are empty (the zero
 *   GID, ENODATA from ibv_query_gid_ex, no address handle), 16 is beyond the table;
 * - the device attributes UCX and libfabric test: atomic_cap, max_qp_rd_atom, max_srq;
 * - one completion vector per CPU (UCX passes the CPU it runs on as comp_vector), one more is
 *   EINVAL;
 * - an extended CQ with IBV_WC_STANDARD_FLAGS taking a UD receive through ibv_start_poll and
 *   the read_* functions, and an ordinary CQ taking the same through ibv_poll_cq: the GRH
 *   flag, the source QP, and sl 2 (an IPv4 network header, as RoCE NICs code it), which
 *   UCX's ud_verbs reads to find the destination address in the last 4 bytes of the GRH
 *   area; an RC receive has sl 0;
 * - completion timestamps in that extended CQ: on the device clock (CLOCK_MONOTONIC, as
 *   ibv_query_rt_values_ex reads it) between the send and the poll, and on the wall clock
 *   likewise;
 * - ibv_query_rt_values_ex: a raw clock that advances at hca_core_clock;
 * - a non-blocking async_fd: ibv_get_async_event answers EAGAIN when nothing is pending.
 *
 * Exit status 0 and a last line "middleware: all checks passed" on success. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "check.h"
#include "rc.h"

/* ibv_query_gid_type is libibverbs' private symbol (IBVERBS_PRIVATE_34, declared in
   rdma-core's driver.h, which Debian does not install): ibv_devinfo and perftest call it.
   Its type values are enum ibv_gid_type_sysfs's. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type);
#define GID_TYPE_SYSFS_ROCE_V2 1

#define QKEY 0x11111111
#define MSG 64
#define GRH 40

static struct ibv_qp *ud_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq,
		.recv_cq = rcq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "create UD QP");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0,
	      "UD INIT");
	a.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "UD RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD RTS");
	return qp;
}

/* Sends MSG bytes from `from` to `to` through an address handle from GID index `sgid`. */
static void ud_send(struct ibv_pd *pd, struct ibv_qp *from, struct ibv_qp *to, int sgid,
		    void *buf, uint32_t lkey)
{
	struct ibv_ah_attr aa = {
		.is_global = 1,
		.port_num = 1,
		.grh = { .dgid = gid, .sgid_index = sgid, .hop_limit = 64 },
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "address handle from GID index %d", sgid);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = MSG, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = 7,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.ud = { .ah = ah, .remote_qpn = to->qp_num, .remote_qkey = QKEY },
	};
	post_one(from, &wr);
	struct ibv_wc wc = poll_one(from->send_cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7, "UD send completes");
	CHECK(ibv_destroy_ah(ah) == 0, "destroy ah");
}

/* The device clock in its own ticks, as mlx5 reports it (whole count in tv_nsec). */
static uint64_t raw_clock(struct ibv_context *ctx)
{
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	CHECK(ibv_query_rt_values_ex(ctx, &v) == 0, "query_rt_values_ex");
	CHECK(v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK, "raw clock written");
	return (uint64_t)v.raw_clock.tv_sec * 1000000000ull + (uint64_t)v.raw_clock.tv_nsec;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "a device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	ibv_free_device_list(list);

	/* The GID table. */
	const char *ip = getenv("SOFTRDMA_IP");
	struct in_addr v4;
	CHECK(ip && inet_pton(AF_INET, ip, &v4) == 1, "SOFTRDMA_IP is IPv4");
	struct ibv_port_attr port;
	CHECK(ibv_query_port(ctx, 1, &port) == 0, "query_port");
	CHECK(port.gid_tbl_len == 16, "a table of 16, got %d", port.gid_tbl_len);
	for (int i = 0; i < 2; i++) {
		union ibv_gid g;
		CHECK(ibv_query_gid(ctx, 1, i, &g) == 0, "gid %d", i);
		CHECK(g.global.subnet_prefix == 0 && g.raw[8] == 0 && g.raw[9] == 0 &&
			      g.raw[10] == 0xff && g.raw[11] == 0xff && !memcmp(&g.raw[12], &v4, 4),
		      "GID %d is the IPv4-mapped address", i);
		int type = -1;
		CHECK(ibv_query_gid_type(ctx, 1, i, &type) == 0 && type == GID_TYPE_SYSFS_ROCE_V2,
		      "GID %d type RoCE v2 (%d)", i, type);
		struct ibv_gid_entry e;
		CHECK(ibv_query_gid_ex(ctx, 1, i, &e, 0) == 0 && e.gid_type == IBV_GID_TYPE_ROCE_V2 &&
			      e.gid_index == (uint32_t)i && e.port_num == 1 &&
			      !memcmp(e.gid.raw, g.raw, 16),
		      "gid_ex %d", i);
		if (i == 0)
			gid = g;
	}
	union ibv_gid ll, g3;
	CHECK(ibv_query_gid(ctx, 1, 2, &ll) == 0 && ll.raw[0] == 0xfe && ll.raw[1] == 0x80,
	      "GID 2 is link-local");
	int type;
	CHECK(ibv_query_gid_type(ctx, 1, 2, &type) == 0 && type == GID_TYPE_SYSFS_ROCE_V2,
	      "GID 2 type");
	/* Entries 3 to 15 are empty, as rdma-core reads empty entries: the zero GID, type 0 (IB/RoCE
	   v1), ENODATA from ibv_query_gid_ex; beyond the table, errors. */
	memset(&g3, 0xaa, sizeof(g3));
	CHECK(ibv_query_gid(ctx, 1, 3, &g3) == 0, "empty GID 3");
	for (int i = 0; i < 16; i++)
		CHECK(g3.raw[i] == 0, "empty GID 3 reads as zero");
	type = -1;
	CHECK(ibv_query_gid_type(ctx, 1, 15, &type) == 0 && type == 0, "empty GID 15 type %d", type);
	struct ibv_gid_entry empty;
	CHECK(ibv_query_gid_ex(ctx, 1, 3, &empty, 0) == ENODATA, "empty GID 3: ENODATA");
	CHECK(ibv_query_gid(ctx, 1, 16, &g3) != 0, "no GID 16");
	CHECK(ibv_query_gid_type(ctx, 1, 16, &type) != 0, "no GID 16 type");
	CHECK(ibv_query_gid_ex(ctx, 1, 16, &empty, 0) == EINVAL, "GID 16: EINVAL");
	struct ibv_gid_entry table[4];
	CHECK(ibv_query_gid_table(ctx, table, 4, 0) == 3, "gid table of 3");
	for (int i = 0; i < 3; i++)
		CHECK(table[i].gid_index == (uint32_t)i && table[i].gid_type == IBV_GID_TYPE_ROCE_V2,
		      "gid table entry %d", i);
	CHECK(!memcmp(table[1].gid.raw, gid.raw, 16) && !memcmp(table[2].gid.raw, ll.raw, 16),
	      "gid table entries");
	CHECK(ibv_query_gid_table(ctx, table, 2, 0) == -EINVAL, "gid table too small");

	/* The attributes middleware tests. */
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0, "query_device_ex");
	CHECK(dx.orig_attr.atomic_cap == IBV_ATOMIC_HCA, "atomic_cap %d", dx.orig_attr.atomic_cap);
	CHECK(dx.orig_attr.max_qp_rd_atom >= 16 && dx.orig_attr.max_qp_init_rd_atom >= 16,
	      "max_qp_rd_atom %d", dx.orig_attr.max_qp_rd_atom);
	CHECK(dx.orig_attr.max_srq > 0 && dx.orig_attr.max_srq_wr > 0, "SRQs");
	CHECK(dx.hca_core_clock == 1000000, "hca_core_clock %llu kHz",
	      (unsigned long long)dx.hca_core_clock);
	CHECK(dx.completion_timestamp_mask == UINT64_MAX, "64-bit completion timestamps");

	/* Completion vectors. */
	long cpus = sysconf(_SC_NPROCESSORS_CONF);
	CHECK(ctx->num_comp_vectors == cpus, "one completion vector per CPU (%d, %ld)",
	      ctx->num_comp_vectors, cpus);
	struct ibv_cq *last = ibv_create_cq(ctx, 8, NULL, NULL, ctx->num_comp_vectors - 1);
	CHECK(last, "the last completion vector");
	CHECK(ibv_destroy_cq(last) == 0, "destroy");
	CHECK(!ibv_create_cq(ctx, 8, NULL, NULL, ctx->num_comp_vectors) && errno == EINVAL,
	      "a vector beyond num_comp_vectors");
	CHECK(!ibv_create_cq(ctx, 8, NULL, NULL, -1) && errno == EINVAL, "a negative vector");
	struct ibv_cq_init_attr_ex bad = { .cqe = 8, .comp_vector = ctx->num_comp_vectors };
	CHECK(!ibv_create_cq_ex(ctx, &bad) && errno == EINVAL, "create_cq_ex: bad vector");

	/* A UD receive through an extended CQ (ibv_start_poll) and through ibv_poll_cq. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	uint8_t *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr");
	struct ibv_cq_init_attr_ex cxa = {
		.cqe = 16,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
		.comp_vector = ctx->num_comp_vectors - 1,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
	};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cxa);
	CHECK(cqx, "create_cq_ex with IBV_WC_STANDARD_FLAGS, as UCX asks, and timestamps");
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(scq && rcq, "create_cq");
	struct ibv_qp *tx = ud_qp(pd, scq, scq);
	struct ibv_qp *rx_ex = ud_qp(pd, scq, ibv_cq_ex_to_cq(cqx));
	struct ibv_qp *rx = ud_qp(pd, scq, rcq);

	memset(buf + 2048, 'u', MSG);
	post_recv(rx_ex, 11, buf, GRH + MSG, mr->lkey);
	struct timespec m0, r0, m1, r1;
	clock_gettime(CLOCK_MONOTONIC, &m0);
	clock_gettime(CLOCK_REALTIME, &r0);
	ud_send(pd, tx, rx_ex, 0, buf + 2048, mr->lkey);
	struct ibv_poll_cq_attr pa = { 0 };
	time_t start = time(NULL);
	int rc;
	while ((rc = ibv_start_poll(cqx, &pa)) == ENOENT)
		CHECK(time(NULL) - start < 10, "no completion within 10 s");
	CHECK(rc == 0, "start_poll %d", rc);
	CHECK(cqx->status == IBV_WC_SUCCESS && cqx->wr_id == 11, "status and wr_id");
	CHECK(ibv_wc_read_opcode(cqx) == IBV_WC_RECV, "opcode");
	CHECK(ibv_wc_read_byte_len(cqx) == GRH + MSG, "byte_len counts the GRH area");
	CHECK(ibv_wc_read_qp_num(cqx) == rx_ex->qp_num, "qp_num");
	CHECK(ibv_wc_read_src_qp(cqx) == tx->qp_num, "src_qp");
	CHECK(ibv_wc_read_wc_flags(cqx) & IBV_WC_GRH, "GRH flag");
	CHECK(ibv_wc_read_sl(cqx) == 2, "sl: an IPv4 network header (%d)", ibv_wc_read_sl(cqx));
	CHECK(ibv_wc_read_slid(cqx) == 0 && ibv_wc_read_dlid_path_bits(cqx) == 0, "no LIDs");
	clock_gettime(CLOCK_MONOTONIC, &m1);
	clock_gettime(CLOCK_REALTIME, &r1);
	uint64_t ts = ibv_wc_read_completion_ts(cqx);
	uint64_t wall = ibv_wc_read_completion_wallclock_ns(cqx);
	uint64_t ns0 = m0.tv_sec * 1000000000ull + m0.tv_nsec, ns1 = m1.tv_sec * 1000000000ull + m1.tv_nsec;
	uint64_t w0 = r0.tv_sec * 1000000000ull + r0.tv_nsec, w1 = r1.tv_sec * 1000000000ull + r1.tv_nsec;
	CHECK(ts >= ns0 && ts <= ns1, "completion_ts %llu within the send and the poll (%llu..%llu)",
	      (unsigned long long)ts, (unsigned long long)ns0, (unsigned long long)ns1);
	/* The wall clock may be stepped between the reads; allow a millisecond either way. */
	CHECK(wall + 1000000 >= w0 && wall <= w1 + 1000000, "wallclock_ns %llu (%llu..%llu)",
	      (unsigned long long)wall, (unsigned long long)w0, (unsigned long long)w1);
	CHECK(ibv_next_poll(cqx) == ENOENT, "one completion");
	ibv_end_poll(cqx);
	/* Where UCX's ud_verbs looks for the destination of an IPv4 packet: the last 4 bytes of
	   the area, the IPv4 header's destination (the header starts at offset 20). */
	CHECK(buf[20] == 0x45 && !memcmp(buf + GRH - 4, &v4, 4), "IPv4 header in the GRH area");
	CHECK(!memcmp(buf + GRH, buf + 2048, MSG), "payload after the GRH area");

	memset(buf, 0, GRH + MSG);
	post_recv(rx, 12, buf, GRH + MSG, mr->lkey);
	ud_send(pd, tx, rx, 1, buf + 2048, mr->lkey);
	struct ibv_wc wc = poll_one(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 12 && wc.opcode == IBV_WC_RECV, "recv");
	CHECK(wc.wc_flags & IBV_WC_GRH && wc.src_qp == tx->qp_num && wc.sl == 2,
	      "ibv_poll_cq: GRH, src_qp, sl %d", wc.sl);
	CHECK(!memcmp(buf + GRH - 4, &v4, 4), "destination in the GRH area");

	/* The link-local GID is not an address the device sends from. */
	struct ibv_ah_attr lla = {
		.is_global = 1,
		.port_num = 1,
		.grh = { .dgid = gid, .sgid_index = 2, .hop_limit = 64 },
	};
	CHECK(!ibv_create_ah(pd, &lla) && errno == EINVAL, "no address handle from GID 2");
	lla.grh.sgid_index = 3;
	errno = 0;
	CHECK(!ibv_create_ah(pd, &lla) && errno == EINVAL, "no address handle from empty GID 3");

	/* An RC receive: no GRH area, sl 0. */
	struct ibv_qp *ra, *rb;
	rc_pair(pd, scq, rcq, 8, &ra, &rb);
	post_recv(rb, 13, buf, MSG, mr->lkey);
	struct ibv_sge sge = { .addr = (uintptr_t)(buf + 2048), .length = MSG, .lkey = mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 14, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	post_one(ra, &sw);
	wc = poll_one(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 13, "RC recv");
	CHECK(!(wc.wc_flags & IBV_WC_GRH) && wc.sl == 0, "RC: no GRH, sl 0");
	CHECK(poll_one(scq).wr_id == 14, "RC send");

	/* The device clock. */
	uint64_t t0 = raw_clock(ctx);
	struct timespec pause = { .tv_nsec = 5 * 1000 * 1000 };
	nanosleep(&pause, NULL);
	uint64_t t1 = raw_clock(ctx);
	/* 5 ms at hca_core_clock kHz is 5 * hca_core_clock ticks. */
	CHECK(t1 - t0 >= 5 * dx.hca_core_clock && t1 - t0 < 5000 * dx.hca_core_clock,
	      "the clock advances at hca_core_clock (%llu ticks in 5 ms)",
	      (unsigned long long)(t1 - t0));
	struct ibv_values_ex vbad = { .comp_mask = IBV_VALUES_MASK_RESERVED };
	CHECK(ibv_query_rt_values_ex(ctx, &vbad) == EINVAL, "an unknown value");

	/* A non-blocking async_fd, as UCX makes it. */
	int fl = fcntl(ctx->async_fd, F_GETFL);
	CHECK(fl >= 0 && fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
	struct ibv_async_event ae;
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &ae) == -1 && errno == EAGAIN,
	      "no event pending: EAGAIN, not a wait");

	CHECK(ibv_destroy_qp(ra) == 0 && ibv_destroy_qp(rb) == 0, "destroy RC");
	CHECK(ibv_destroy_qp(tx) == 0 && ibv_destroy_qp(rx) == 0 && ibv_destroy_qp(rx_ex) == 0,
	      "destroy UD");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0 && ibv_destroy_cq(scq) == 0 &&
		      ibv_destroy_cq(rcq) == 0,
	      "destroy cqs");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0, "dereg, dealloc");
	CHECK(ibv_close_device(ctx) == 0, "close");
	free(buf);
	printf("middleware: all checks passed\n");
	return 0;
}
