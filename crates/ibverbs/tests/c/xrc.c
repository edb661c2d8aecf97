/* XRC through the system <infiniband/verbs.h>'s inline verbs (ibv_open_xrcd, ibv_close_xrcd,
 * ibv_create_srq_ex, ibv_get_srq_num, ibv_create_qp_ex, ibv_open_qp, ibv_wr_set_xrc_srqn) on
 * softrdma's libibverbs.so.1, within one device:
 *
 * - the device reports IBV_DEVICE_XRC and XRC's ODP caps;
 * - ibv_open_xrcd's errnos as the kernel and rdma-core give them: reserved comp_mask bits
 *   EOPNOTSUPP, no fd or flags EINVAL, a closed fd EBADF, no domain for the file without
 *   O_CREAT EAGAIN, O_EXCL on an existing one EINVAL; the same file again is the same domain;
 * - XRC SRQs need a CQ and a domain (EINVAL), tag matching is EOPNOTSUPP, a basic SRQ has no
 *   number (EOPNOTSUPP); a target QP needs its domain (EINVAL);
 * - traffic: an initiator SENDs (ibv_post_send with qp_type.xrc.remote_srqn) and WRITEs with
 *   immediate (ibv_wr_* with ibv_wr_set_xrc_srqn) to the SRQ of a target opened through the
 *   second handle of the domain; the receives complete on the SRQ's CQ with the target's QP
 *   number; a WR without the SRQ number is refused;
 * - neither XRC QP takes receives; ibv_open_qp finds the target by number (EINVAL for
 *   another), and the QP lives until its last handle is destroyed;
 * - ibv_close_xrcd is EBUSY while an SRQ or QP made through the handle exists.
 *
 * Exit status 0 and a last line "xrc: all checks passed" on success. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "check.h"
#include "rc.h"

static struct ibv_xrcd *open_xrcd(struct ibv_context *ctx, uint32_t mask, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = { .comp_mask = mask, .fd = fd, .oflags = oflags };

	errno = 0;
	return ibv_open_xrcd(ctx, &a);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "a device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid");
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0, "query_device_ex");
	CHECK(dx.orig_attr.device_cap_flags & IBV_DEVICE_XRC, "IBV_DEVICE_XRC");
	CHECK((dx.xrc_odp_caps & (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV)) ==
		      (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV),
	      "xrc_odp_caps %#x", dx.xrc_odp_caps);

	/* Opening domains. */
	char path[] = "/tmp/softrdma-xrcd-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp");
	uint32_t both = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
	CHECK(!open_xrcd(ctx, IBV_XRCD_INIT_ATTR_RESERVED | both, fd, O_CREAT) && errno == EOPNOTSUPP,
	      "reserved bit: EOPNOTSUPP");
	CHECK(!open_xrcd(ctx, IBV_XRCD_INIT_ATTR_FD, fd, O_CREAT) && errno == EINVAL,
	      "no oflags: EINVAL");
	CHECK(!open_xrcd(ctx, both, 1000, O_CREAT) && errno == EBADF, "closed fd: EBADF");
	CHECK(!open_xrcd(ctx, both, fd, 0) && errno == EAGAIN, "no domain, no O_CREAT: EAGAIN");
	struct ibv_xrcd *x1 = open_xrcd(ctx, both, fd, O_CREAT);
	CHECK(x1 && x1->context == ctx, "open_xrcd");
	CHECK(!open_xrcd(ctx, both, fd, O_CREAT | O_EXCL) && errno == EINVAL,
	      "O_EXCL on an existing domain: EINVAL");
	int fd2 = open(path, O_RDONLY);
	CHECK(fd2 >= 0, "second descriptor of the file");
	struct ibv_xrcd *x2 = open_xrcd(ctx, both, fd2, 0);
	CHECK(x2 && x2 != x1, "the same file again: another handle of the domain");
	struct ibv_xrcd *lone = open_xrcd(ctx, both, -1, 0);
	CHECK(lone, "a domain of no file");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(pd && scq && rcq, "pd and cqs");
	enum { LEN = 8192 };
	char *buf = calloc(1, LEN);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr, "reg_mr");

	/* SRQs. */
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD,
		.srq_type = IBV_SRQT_XRC,
		.pd = pd,
		.xrcd = x1,
		.cq = rcq,
	};
	errno = 0;
	CHECK(!ibv_create_srq_ex(ctx, &sa) && errno == EINVAL, "XRC SRQ without a CQ: EINVAL");
	sa.comp_mask |= IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
	errno = 0;
	CHECK(!ibv_create_srq_ex(ctx, &sa) && errno == EOPNOTSUPP, "tag matching: EOPNOTSUPP");
	sa.comp_mask &= ~IBV_SRQ_INIT_ATTR_TM;
	struct ibv_srq *srq = ibv_create_srq_ex(ctx, &sa);
	CHECK(srq && srq->pd == pd && sa.attr.max_wr >= 16, "XRC SRQ");
	uint32_t srqn = 0;
	CHECK(ibv_get_srq_num(srq, &srqn) == 0 && srqn != 0, "get_srq_num");
	struct ibv_srq_init_attr bi = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *basic = ibv_create_srq(pd, &bi);
	CHECK(basic, "basic SRQ");
	uint32_t none;
	CHECK(ibv_get_srq_num(basic, &none) == EOPNOTSUPP, "a basic SRQ has no number");
	CHECK(ibv_destroy_srq(basic) == 0, "destroy basic SRQ");

	/* QPs: a target (through the second handle) and an initiator. */
	struct ibv_qp_init_attr_ex ta = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &ta) && errno == EINVAL, "a target without its domain: EINVAL");
	ta.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	ta.xrcd = x2;
	struct ibv_qp *tgt = ibv_create_qp_ex(ctx, &ta);
	CHECK(tgt && tgt->qp_type == IBV_QPT_XRC_RECV && !tgt->pd && !tgt->send_cq, "target QP");
	struct ibv_qp_init_attr_ex ia = {
		.qp_type = IBV_QPT_XRC_SEND,
		.send_cq = scq,
		.cap = { .max_send_wr = 8, .max_send_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
	};
	struct ibv_qp *ini = ibv_create_qp_ex(ctx, &ia);
	CHECK(ini && ini->qp_type == IBV_QPT_XRC_SEND && !ini->recv_cq, "initiator QP");
	connect_pair(ini, tgt);

	/* Neither takes receives. */
	struct ibv_sge rs = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad = NULL;
	CHECK(ibv_post_recv(ini, &rw, &rbad) != 0, "post_recv on an initiator");
	CHECK(ibv_post_recv(tgt, &rw, &rbad) != 0, "post_recv on a target");

	/* A SEND to the SRQ through the old verb. */
	struct ibv_recv_wr srw = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *sbad = NULL;
	CHECK(ibv_post_srq_recv(srq, &srw, &sbad) == 0, "post_srq_recv");
	memcpy(buf + 4096, "through the XRC SRQ", 20);
	struct ibv_sge ss = { .addr = (uintptr_t)buf + 4096, .length = 20, .lkey = mr->lkey };
	struct ibv_send_wr sw = {
		.wr_id = 70,
		.sg_list = &ss,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	sw.qp_type.xrc.remote_srqn = srqn;
	post_one(ini, &sw);
	struct ibv_wc wc = poll_one(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 70, "send %d", wc.status);
	wc = poll_one(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && wc.byte_len == 20 &&
		      wc.qp_num == tgt->qp_num && wc.opcode == IBV_WC_RECV,
	      "receive on the SRQ's CQ");
	CHECK(!memcmp(buf, "through the XRC SRQ", 20), "the bytes");

	/* A WRITE with immediate through the new post API. */
	CHECK(ibv_post_srq_recv(srq, &srw, &sbad) == 0, "post_srq_recv");
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(ini);
	CHECK(qx, "qp_ex");
	ibv_wr_start(qx);
	qx->wr_id = 71;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(qx, mr->rkey, (uintptr_t)buf + 1024, htobe32(0x5151));
	ibv_wr_set_xrc_srqn(qx, srqn);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 4096, 20);
	CHECK(ibv_wr_complete(qx) == 0, "wr_complete");
	wc = poll_one(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 71, "write_imm %d", wc.status);
	wc = poll_one(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
		      be32toh(wc.imm_data) == 0x5151,
	      "write_imm's receive");
	CHECK(!memcmp(buf + 1024, "through the XRC SRQ", 20), "the written bytes");
	/* Without the SRQ number, nothing is posted. */
	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 4096, 20);
	CHECK(ibv_wr_complete(qx) == EINVAL, "no SRQ number: EINVAL");

	/* ibv_open_qp. */
	struct ibv_qp_open_attr oa = {
		.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
		.qp_num = tgt->qp_num + 1000,
		.xrcd = x1,
		.qp_type = IBV_QPT_XRC_RECV,
	};
	errno = 0;
	CHECK(!ibv_open_qp(ctx, &oa) && errno == EINVAL, "no such target: EINVAL");
	oa.qp_num = tgt->qp_num;
	oa.xrcd = lone;
	errno = 0;
	CHECK(!ibv_open_qp(ctx, &oa) && errno == EINVAL, "another domain's: EINVAL");
	oa.xrcd = x1;
	struct ibv_qp *opened = ibv_open_qp(ctx, &oa);
	CHECK(opened && opened != tgt && opened->qp_num == tgt->qp_num, "open_qp");
	CHECK(ibv_destroy_qp(tgt) == 0, "destroy the first handle");
	/* The QP lives on through the opened handle: traffic still arrives. */
	CHECK(ibv_post_srq_recv(srq, &srw, &sbad) == 0, "post_srq_recv");
	sw.wr_id = 72;
	post_one(ini, &sw);
	wc = poll_one(scq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 72, "send after destroy %d", wc.status);
	wc = poll_one(rcq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.qp_num == opened->qp_num, "receive");

	/* Teardown: a domain handle with objects made through it is busy. */
	CHECK(ibv_close_xrcd(x1) == EBUSY, "close with an SRQ and an opened QP: EBUSY");
	CHECK(ibv_destroy_qp(opened) == 0, "destroy the opened handle");
	CHECK(ibv_destroy_qp(ini) == 0, "destroy initiator");
	CHECK(ibv_close_xrcd(x1) == EBUSY, "close with an SRQ: EBUSY");
	CHECK(ibv_destroy_srq(srq) == 0, "destroy SRQ");
	CHECK(ibv_close_xrcd(x1) == 0 && ibv_close_xrcd(x2) == 0 && ibv_close_xrcd(lone) == 0,
	      "close_xrcd");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0 &&
		      ibv_dealloc_pd(pd) == 0,
	      "the rest");
	close(fd);
	close(fd2);
	unlink(path);
	CHECK(ibv_close_device(ctx) == 0, "close_device");
	ibv_free_device_list(list);
	free(buf);
	printf("xrc: all checks passed\n");
	return 0;
}
