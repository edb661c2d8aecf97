/* A libibverbs program, compiled against the system <infiniband/verbs.h> and linked against
 * the system libibverbs, run on softrdma's libibverbs.so.1 (LD_LIBRARY_PATH). It exercises
 * what programs reach through the function tables and inline functions of the header:
 * ibv_query_port (macro), ibv_query_device_ex, ibv_query_gid_ex, ibv_create_cq_ex,
 * ibv_create_qp_ex, ibv_post_send / ibv_post_recv / ibv_poll_cq / ibv_req_notify_cq, the
 * ibv_wr_* API and the ibv_start_poll API; a completion channel woken through poll(); an
 * asynchronous event (CQ overrun) on the context's async_fd; posting and polling from several
 * threads; and misuse, which must give errno values, never a crash.
 *
 * Two RC QPs of one device talk to each other over the device's address (SOFTRDMA_IP).
 * Exit status 0 and a last line "verbs: all checks passed" on success. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "check.h"
#include "rc.h"

#define BUF 65536

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static uint8_t *buf_a, *buf_b;
static struct ibv_mr *mr_a, *mr_b;

struct poster {
	struct ibv_qp *qp;
	uint64_t first_id;
	int count;
};

static void *post_writes(void *arg)
{
	struct poster *p = arg;

	for (int i = 0; i < p->count; i++) {
		struct ibv_sge sge = { (uintptr_t)buf_a, 64, mr_a->lkey };
		struct ibv_send_wr wr = {
			.wr_id = p->first_id + i,
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = { (uintptr_t)buf_b + 4096, mr_b->rkey },
		};
		post_one(p->qp, &wr);
	}
	return NULL;
}

/* Acknowledges one event of the CQ `arg` a moment later, from another thread; meanwhile a
   second destroy and a new QP on the CQ being destroyed are refused. */
static struct ibv_pd *late_pd;
static struct ibv_qp_init_attr late_ia;

static void *ack_later(void *arg)
{
	struct timespec pause = { 0, 100 * 1000 * 1000 };

	nanosleep(&pause, NULL);
	CHECK(ibv_destroy_cq(arg) == EINVAL, "a second destroy of a CQ being destroyed");
	late_ia.send_cq = late_ia.recv_cq = arg;
	CHECK(!ibv_create_qp(late_pd, &late_ia) && errno == EINVAL,
	      "a new QP on a CQ being destroyed");
	ibv_ack_cq_events(arg, 1);
	return NULL;
}

int main(void)
{
	struct ibv_device **list;
	int num = -1;

	/* Device, port, GIDs. */
	list = ibv_get_device_list(&num);
	CHECK(list && num == 1, "one device");
	CHECK(!strcmp(ibv_get_device_name(list[0]), "softrdma0"), "name");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	ibv_free_device_list(list);

	struct ibv_port_attr port;
	CHECK(ibv_query_port(ctx, 1, &port) == 0, "query_port (inline, verbs_context)");
	CHECK(port.state == IBV_PORT_ACTIVE && port.link_layer == IBV_LINK_LAYER_ETHERNET,
	      "port active, Ethernet");
	CHECK(port.gid_tbl_len >= 2, "gid table");
	CHECK(ibv_query_port(ctx, 2, &port) != 0, "port 2 does not exist");

	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0, "query_device_ex");
	CHECK(dx.orig_attr.phys_port_cnt == 1 && dx.orig_attr.max_qp_wr > 0, "device attrs");
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	CHECK(ibv_query_device_ex(ctx, &in, &dx) == EINVAL, "unknown input comp_mask");

	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "gid 1");
	const char *ip = getenv("SOFTRDMA_IP");
	struct in_addr v4;
	CHECK(ip && inet_pton(AF_INET, ip, &v4) == 1, "SOFTRDMA_IP is IPv4");
	CHECK(gid.raw[10] == 0xff && gid.raw[11] == 0xff && !memcmp(&gid.raw[12], &v4, 4),
	      "GID 1 is the IPv4-mapped address");
	struct ibv_gid_entry ge;
	CHECK(ibv_query_gid_ex(ctx, 1, 1, &ge, 0) == 0, "gid_ex");
	CHECK(ge.gid_type == IBV_GID_TYPE_ROCE_V2 && ge.gid_index == 1, "RoCE v2 GID");
	CHECK(ibv_query_gid_ex(ctx, 1, 1, &ge, 7) == EINVAL, "gid_ex flags");

	/* Objects. */
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	buf_a = calloc(1, BUF);
	buf_b = calloc(1, BUF);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC;
	mr_a = ibv_reg_mr(pd, buf_a, BUF, access);
	mr_b = ibv_reg_mr(pd, buf_b, BUF, access);
	CHECK(mr_a && mr_b, "reg_mr");
	CHECK(mr_a->addr == buf_a && mr_a->length == BUF && mr_a->pd == pd, "mr fields");

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch && ch->fd >= 0, "channel");
	int tag = 42;
	struct ibv_cq *cq_a = ibv_create_cq(ctx, 1024, NULL, NULL, 0);
	struct ibv_cq *cq_b = ibv_create_cq(ctx, 64, &tag, ch, 0);
	CHECK(cq_a && cq_b && cq_b->channel == ch && cq_b->cq_context == &tag, "create_cq");
	struct ibv_cq_init_attr_ex cxa = {
		.cqe = 64,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM,
	};
	struct ibv_cq_ex *cq_x = ibv_create_cq_ex(ctx, &cxa);
	CHECK(cq_x, "create_cq_ex");
	cxa.wc_flags = IBV_WC_EX_WITH_CVLAN;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &cxa) && errno == EOPNOTSUPP, "no VLANs");

	struct ibv_qp_init_attr ia = {
		.send_cq = cq_a,
		.recv_cq = cq_a,
		.cap = { .max_send_wr = 512, .max_recv_wr = 64, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp_a = ibv_create_qp(pd, &ia);
	CHECK(qp_a && qp_a->state == IBV_QPS_RESET, "create_qp");
	CHECK(ia.cap.max_inline_data >= 64, "caps written back");
	struct ibv_qp_init_attr_ex iax = {
		.send_cq = ibv_cq_ex_to_cq(cq_x),
		.recv_cq = cq_b,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND_WITH_IMM |
				  IBV_QP_EX_WITH_RDMA_READ,
	};
	/* send_ops_flags a QP type cannot use are refused at creation, as rxe refuses them. */
	struct ibv_qp_init_attr_ex other = iax;
	other.qp_type = IBV_QPT_UD;
	CHECK(!ibv_create_qp_ex(ctx, &other) && errno == EOPNOTSUPP, "RDMA WRITE on a UD QP");
	other.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	struct ibv_qp *qp_ud = ibv_create_qp_ex(ctx, &other);
	CHECK(qp_ud && ibv_destroy_qp(qp_ud) == 0, "SENDs on a UD QP");
	other.qp_type = IBV_QPT_UC;
	other.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;
	CHECK(!ibv_create_qp_ex(ctx, &other) && errno == EOPNOTSUPP, "RDMA READ on a UC QP");
	other.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_BIND_MW;
	struct ibv_qp *qp_uc = ibv_create_qp_ex(ctx, &other);
	CHECK(qp_uc && ibv_destroy_qp(qp_uc) == 0, "WRITE with immediate and MW binds on a UC QP");
	struct ibv_qp *qp_b = ibv_create_qp_ex(ctx, &iax);
	CHECK(qp_b, "create_qp_ex");
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(qp_b);
	CHECK(qpx && &qpx->qp_base == qp_b, "qp_to_qp_ex");

	/* Misuse before connecting: errno values, no crash. */
	struct ibv_sge sge = { (uintptr_t)buf_a, 16, mr_a->lkey };
	struct ibv_send_wr swr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad = NULL;
	CHECK(ibv_post_send(qp_a, &swr, &bad) == EINVAL && bad == &swr, "post_send in RESET");
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_RTR };
	CHECK(ibv_modify_qp(qp_a, &qa, IBV_QP_STATE) == EINVAL && qp_a->state == IBV_QPS_RESET,
	      "RESET -> RTR is refused");
	CHECK(ibv_modify_qp(qp_a, &qa, 1 << 30) == EINVAL, "unknown attribute mask bit");
	CHECK(!ibv_alloc_pd(NULL) && errno == EINVAL, "alloc_pd(NULL)");
	CHECK(!ibv_reg_mr(NULL, buf_a, 16, 0) && errno == EINVAL, "reg_mr(NULL pd)");
	CHECK(!ibv_reg_mr(pd, buf_a, 16, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL,
	      "remote write without local write");
	struct ibv_mr *odp_mr = ibv_reg_mr(pd, buf_a, 16, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	CHECK(odp_mr && ibv_dereg_mr(odp_mr) == 0, "on-demand paging (vanishing.c tests it)");
	/* What rxe's pinning refuses: no pages, unmapped pages, read-only pages to be written. */
	CHECK(!ibv_reg_mr(pd, buf_a, 0, 0) && errno == EINVAL, "an empty region");
	CHECK(!ibv_reg_mr(pd, buf_a, (size_t)1 << 62, 0) && errno == EINVAL,
	      "more pages than a region may span");
	void *hole = mmap(NULL, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(hole != MAP_FAILED && munmap(hole, 8192) == 0, "an unmapped range");
	CHECK(!ibv_reg_mr(pd, hole, 4096, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
	      "unmapped memory");
	CHECK(!ibv_reg_mr(pd, buf_a, 1 << 30, 0) && errno == EFAULT, "a region past its buffer");
	void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(ro != MAP_FAILED, "a read-only page");
	CHECK(!ibv_reg_mr(pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
	      "read-only memory with write access");
	struct ibv_mr *ro_mr = ibv_reg_mr(pd, ro, 4096, IBV_ACCESS_REMOTE_READ);
	CHECK(ro_mr && ibv_dereg_mr(ro_mr) == 0, "read-only memory, read access");
	munmap(ro, 4096);
	/* A file mapping past the file's end would SIGBUS: pinning refuses it, so do we. */
	FILE *f = tmpfile();
	CHECK(f && ftruncate(fileno(f), 4096) == 0, "a 4 KiB file");
	void *past = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
	CHECK(past != MAP_FAILED, "8 KiB of it mapped");
	CHECK(!ibv_reg_mr(pd, past, 8192, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
	      "a mapping past its file's end");
	struct ibv_mr *in_file = ibv_reg_mr(pd, past, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(in_file && ibv_dereg_mr(in_file) == 0, "the part inside the file");
	munmap(past, 8192);
	fclose(f);
	CHECK(ibv_dereg_mr(NULL) == EINVAL, "dereg_mr(NULL)");
	CHECK(!ibv_create_cq(NULL, 4, NULL, NULL, 0) && errno == EINVAL, "create_cq(NULL)");
	CHECK(!ibv_create_cq(ctx, 1 << 30, NULL, NULL, 0) && errno == EINVAL, "cqe > max_cqe");
	/* An XRC initiator is made like any QP of a PD; a target needs its XRC domain. */
	struct ibv_qp_init_attr xa = ia;
	xa.qp_type = IBV_QPT_XRC_SEND;
	struct ibv_qp *ini = ibv_create_qp(pd, &xa);
	CHECK(ini && xa.cap.max_recv_wr == 0 && ibv_destroy_qp(ini) == 0, "XRC initiator");
	xa.qp_type = IBV_QPT_XRC_RECV;
	errno = 0;
	CHECK(!ibv_create_qp(pd, &xa) && errno == EINVAL, "XRC target of a PD: EINVAL");
	ia.send_cq = NULL;
	CHECK(!ibv_create_qp(pd, &ia) && errno == EINVAL, "create_qp without a CQ");
	ia.send_cq = cq_a;
	/* A passive target (one-sided operations only) needs no queue entries: rxe takes it. */
	struct ibv_qp_init_attr bare = ia;
	bare.cap.max_send_wr = bare.cap.max_recv_wr = 0;
	struct ibv_qp *qp_bare = ibv_create_qp(pd, &bare);
	CHECK(qp_bare && bare.cap.max_send_wr == 0 && bare.cap.max_recv_wr == 0 &&
		      ibv_destroy_qp(qp_bare) == 0,
	      "a QP with no send and no receive queue entries");
	struct ibv_mw *mw_x = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw_x && mw_x->context == ctx && ibv_dealloc_mw(mw_x) == 0, "alloc_mw, dealloc_mw");
	/* Objects of another context of the device are not this one's to use. */
	struct ibv_device **list2 = ibv_get_device_list(NULL);
	struct ibv_context *ctx2 = list2 ? ibv_open_device(list2[0]) : NULL;
	CHECK(ctx2, "a second context");
	ibv_free_device_list(list2);
	struct ibv_cq *cq2 = ibv_create_cq(ctx2, 4, NULL, NULL, 0);
	CHECK(cq2, "a CQ of the second context");
	ia.send_cq = cq2;
	CHECK(!ibv_create_qp(pd, &ia) && errno == EINVAL, "a QP with another context's CQ");
	ia.send_cq = cq_a;
	CHECK(ibv_destroy_cq(cq2) == 0 && ibv_close_device(ctx2) == 0, "close the second context");
	CHECK(ibv_destroy_cq(cq_a) == EBUSY, "a CQ in use");
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "a PD in use");
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "a channel in use");
	CHECK(ibv_req_notify_cq(cq_a, 0) == 0, "arming a CQ without a channel (a no-op, as rxe)");
	CHECK(ibv_resize_cq(cq_a, 2048) == 0 && cq_a->cqe == 2048, "resize up: cqe %d", cq_a->cqe);
	CHECK(ibv_resize_cq(cq_a, 0) == EINVAL && ibv_resize_cq(cq_a, -1) == EINVAL &&
		      ibv_resize_cq(cq_a, 1 << 30) == EINVAL && cq_a->cqe == 2048,
	      "resize to nothing, a negative or an oversized CQ");
	CHECK(ibv_resize_cq(cq_a, 1024) == 0 && cq_a->cqe == 1024, "resize back");

	connect_pair(qp_a, qp_b);
	struct ibv_qp_attr got;
	struct ibv_qp_init_attr got_init;
	CHECK(ibv_query_qp(qp_a, &got, IBV_QP_STATE, &got_init) == 0, "query_qp");
	CHECK(got.qp_state == IBV_QPS_RTS && got.dest_qp_num == qp_b->qp_num &&
		      got.path_mtu == IBV_MTU_1024 && got.ah_attr.is_global &&
		      !memcmp(&got.ah_attr.grh.dgid, &gid, 16) && got_init.send_cq == cq_a,
	      "query_qp attributes");

	/* SEND with immediate, a -> b, through the inline verbs. */
	for (int i = 0; i < 100; i++)
		buf_a[i] = (uint8_t)(i * 7 + 1);
	post_recv(qp_b, 7, buf_b, 1024, mr_b->lkey);
	swr.opcode = IBV_WR_SEND_WITH_IMM;
	swr.imm_data = htonl(0x01020304);
	swr.wr_id = 8;
	sge.length = 100;
	post_one(qp_a, &swr);
	struct ibv_wc wc = poll_one(cq_b);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && wc.opcode == IBV_WC_RECV &&
		      wc.byte_len == 100 && (wc.wc_flags & IBV_WC_WITH_IMM) &&
		      ntohl(wc.imm_data) == 0x01020304 && wc.qp_num == qp_b->qp_num &&
		      wc.src_qp == qp_a->qp_num,
	      "recv completion: status %d opcode %d len %u", wc.status, wc.opcode, wc.byte_len);
	CHECK(!memcmp(buf_a, buf_b, 100), "SEND payload");
	wc = poll_one(cq_a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 8 && wc.opcode == IBV_WC_SEND,
	      "send completion");

	/* RDMA WRITE, READ, atomics. */
	struct ibv_send_wr w = {
		.wr_id = 10, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { (uintptr_t)buf_b + 2048, mr_b->rkey },
	};
	post_one(qp_a, &w);
	wc = poll_one(cq_a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE, "write");
	CHECK(!memcmp(buf_b + 2048, buf_a, 100), "WRITE data");
	memset(buf_b + 8192, 0x5a, 64);
	struct ibv_sge rsge = { (uintptr_t)buf_a + 8192, 64, mr_a->lkey };
	struct ibv_send_wr r = {
		.wr_id = 11, .sg_list = &rsge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { (uintptr_t)buf_b + 8192, mr_b->rkey },
	};
	post_one(qp_a, &r);
	wc = poll_one(cq_a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 64,
	      "read");
	CHECK(buf_a[8192] == 0x5a && buf_a[8255] == 0x5a, "READ data");
	*(uint64_t *)(buf_b + 16384) = 40;
	struct ibv_sge asge = { (uintptr_t)buf_a + 16384, 8, mr_a->lkey };
	struct ibv_send_wr at = {
		.wr_id = 12, .sg_list = &asge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.atomic = { (uintptr_t)buf_b + 16384, 2, 0, mr_b->rkey },
	};
	post_one(qp_a, &at);
	wc = poll_one(cq_a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD, "fetch_add");
	CHECK(*(uint64_t *)(buf_a + 16384) == 40 && *(uint64_t *)(buf_b + 16384) == 42,
	      "fetch_add values");
	at.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	at.wr.atomic.compare_add = 42;
	at.wr.atomic.swap = 99;
	post_one(qp_a, &at);
	wc = poll_one(cq_a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP &&
		      *(uint64_t *)(buf_b + 16384) == 99, "cmp_swap");

	/* ATOMIC_WRITE: 8 bytes stored at once. */
	*(uint64_t *)(buf_a + 24000) = 0x1122334455667788ull;
	struct ibv_sge awsge = { (uintptr_t)buf_a + 24000, 8, mr_a->lkey };
	struct ibv_send_wr aw = {
		.wr_id = 15, .sg_list = &awsge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { (uintptr_t)buf_b + 24576, mr_b->rkey },
	};
	post_one(qp_a, &aw);
	wc = poll_one(cq_a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_ATOMIC_WRITE &&
		      *(uint64_t *)(buf_b + 24576) == 0x1122334455667788ull,
	      "atomic write: status %d opcode %d", wc.status, wc.opcode);

	/* Inline send. */
	post_recv(qp_b, 13, buf_b + 32768, 64, mr_b->lkey);
	char msg[] = "inline payload";
	struct ibv_sge isge = { (uintptr_t)msg, sizeof msg, 0 };
	struct ibv_send_wr iw = { .wr_id = 14, .sg_list = &isge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	post_one(qp_a, &iw);
	wc = poll_one(cq_b);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == sizeof msg &&
		      !memcmp(buf_b + 32768, msg, sizeof msg), "inline SEND");
	poll_one(cq_a);
	/* Inline data is still named by at most max_send_sge SGEs (2 here), as rxe checks. */
	struct ibv_sge isges[3] = { { (uintptr_t)msg, 4, 0 }, { (uintptr_t)msg + 4, 4, 0 },
				    { (uintptr_t)msg + 8, 4, 0 } };
	iw.sg_list = isges;
	iw.num_sge = 3;
	bad = NULL;
	CHECK(ibv_post_send(qp_a, &iw, &bad) == EINVAL && bad == &iw, "inline with 3 SGEs");

	/* bad_wr points at the first request not posted. */
	struct ibv_send_wr second = swr, first = w;
	first.next = &second;
	second.num_sge = -1;
	bad = NULL;
	CHECK(ibv_post_send(qp_a, &first, &bad) == EINVAL && bad == &second, "bad_wr");
	wc = poll_one(cq_a);
	CHECK(wc.wr_id == first.wr_id && wc.status == IBV_WC_SUCCESS, "the first was posted");

	/* The ibv_wr_* API on qp_b, completions through the ibv_start_poll API. */
	for (int i = 0; i < 64; i++)
		buf_b[40000 + i] = (uint8_t)(255 - i);
	post_recv(qp_a, 20, buf_a + 40000, 64, mr_a->lkey);
	ibv_wr_start(qpx);
	qpx->wr_id = 21;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, mr_a->rkey, (uintptr_t)buf_a + 50000);
	ibv_wr_set_sge(qpx, mr_b->lkey, (uintptr_t)buf_b + 40000, 64);
	qpx->wr_id = 22;
	ibv_wr_send_imm(qpx, htonl(77));
	ibv_wr_set_inline_data(qpx, buf_b + 40000, 32);
	CHECK(ibv_wr_complete(qpx) == 0, "wr_complete");
	wc = poll_one(cq_a);
	CHECK(wc.wr_id == 20 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 32 &&
		      ntohl(wc.imm_data) == 77, "wr_send_imm received");
	CHECK(!memcmp(buf_a + 50000, buf_b + 40000, 64) &&
		      !memcmp(buf_a + 40000, buf_b + 40000, 32), "wr_* data");
	struct ibv_poll_cq_attr pa = {};
	time_t start = time(NULL);
	int rc;
	while ((rc = ibv_start_poll(cq_x, &pa)) == ENOENT)
		CHECK(time(NULL) - start < 10, "no extended completion");
	CHECK(rc == 0 && cq_x->status == IBV_WC_SUCCESS && cq_x->wr_id == 21, "start_poll");
	CHECK(ibv_wc_read_opcode(cq_x) == IBV_WC_RDMA_WRITE &&
		      ibv_wc_read_qp_num(cq_x) == qp_b->qp_num, "read_*");
	while ((rc = ibv_next_poll(cq_x)) == ENOENT)
		CHECK(time(NULL) - start < 10, "no second extended completion");
	CHECK(rc == 0 && cq_x->wr_id == 22 && ibv_wc_read_opcode(cq_x) == IBV_WC_SEND,
	      "next_poll");
	ibv_end_poll(cq_x);
	ibv_wr_start(qpx);
	ibv_wr_atomic_fetch_add(qpx, mr_a->rkey, (uintptr_t)buf_a, 1);
	CHECK(ibv_wr_complete(qpx) == EINVAL, "an operation outside send_ops_flags");
	uint64_t word = 7;
	ibv_wr_start(qpx);
	ibv_wr_atomic_write(qpx, mr_a->rkey, (uintptr_t)buf_a + 24576, &word);
	CHECK(ibv_wr_complete(qpx) == EINVAL, "atomic write is outside this QP's send_ops_flags");
	struct ibv_qp_ex *qpxa = ibv_qp_to_qp_ex(qp_a);
	ibv_wr_start(qpxa);
	qpxa->wr_id = 23;
	qpxa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(qpxa, mr_b->rkey, (uintptr_t)buf_b + 24584, &word);
	CHECK(ibv_wr_complete(qpxa) == 0, "wr_atomic_write");
	wc = poll_one(cq_a);
	CHECK(wc.wr_id == 23 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_ATOMIC_WRITE &&
		      *(uint64_t *)(buf_b + 24584) == 7, "wr_atomic_write result");
	ibv_wr_start(qpx);
	ibv_wr_rdma_write(qpx, mr_a->rkey, (uintptr_t)buf_a);
	ibv_wr_abort(qpx);
	CHECK(ibv_start_poll(cq_x, &pa) == ENOENT, "an aborted batch posts nothing");
	/* A batch with one bad WR is refused whole (ibv_wr_post(3)): the good WRs before it are
	   not executed either. (They once were, with a failure returned for the batch.) */
	struct ibv_sge three[3] = {
		{ (uintptr_t)buf_b, 8, mr_b->lkey },
		{ (uintptr_t)buf_b + 8, 8, mr_b->lkey },
		{ (uintptr_t)buf_b + 16, 8, mr_b->lkey },
	};
	ibv_wr_start(qpx);
	for (int i = 0; i < 3; i++) {
		qpx->wr_id = 24 + i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, mr_a->rkey, (uintptr_t)buf_a + 24600);
		if (i < 2)
			ibv_wr_set_sge(qpx, mr_b->lkey, (uintptr_t)buf_b, 8);
		else
			ibv_wr_set_sge_list(qpx, 3, three); /* max_send_sge is 2 */
	}
	CHECK(ibv_wr_complete(qpx) == EINVAL, "a batch with a bad WR");
	ibv_wr_start(qpx);
	for (int i = 0; i < 65; i++) {
		qpx->wr_id = 30 + i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, mr_a->rkey, (uintptr_t)buf_a + 24600);
		ibv_wr_set_sge(qpx, mr_b->lkey, (uintptr_t)buf_b, 8);
	}
	CHECK(ibv_wr_complete(qpx) == ENOMEM, "a batch larger than the send queue");
	struct timespec settle = { 0, 50 * 1000 * 1000 };
	nanosleep(&settle, NULL);
	CHECK(ibv_start_poll(cq_x, &pa) == ENOENT, "a refused batch posts nothing");

	/* A completion channel woken through poll(). */
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 0) == 0, "no event before arming");
	CHECK(ibv_req_notify_cq(cq_b, 0) == 0, "req_notify");
	post_recv(qp_b, 30, buf_b, 1024, mr_b->lkey);
	swr.wr_id = 31;
	post_one(qp_a, &swr);
	CHECK(poll(&pfd, 1, 10000) == 1 && (pfd.revents & POLLIN), "channel fd readable");
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq_b && ev_ctx == &tag,
	      "get_cq_event");
	ibv_ack_cq_events(cq_b, 1);
	wc = poll_one(cq_b);
	CHECK(wc.wr_id == 30 && wc.status == IBV_WC_SUCCESS, "the event's completion");
	poll_one(cq_a);

	/* Posting and polling from several threads. */
	struct poster p1 = { qp_a, 1000, 200 }, p2 = { qp_a, 2000, 200 };
	pthread_t t1, t2;
	pthread_create(&t1, NULL, post_writes, &p1);
	pthread_create(&t2, NULL, post_writes, &p2);
	int seen[400] = { 0 }, got_n = 0;
	start = time(NULL);
	while (got_n < 400) {
		struct ibv_wc wcs[16];
		int n = ibv_poll_cq(cq_a, 16, wcs);
		CHECK(n >= 0, "poll");
		for (int i = 0; i < n; i++) {
			CHECK(wcs[i].status == IBV_WC_SUCCESS, "threaded write status %d",
			      wcs[i].status);
			int k = wcs[i].wr_id >= 2000 ? 200 + (int)(wcs[i].wr_id - 2000) :
						       (int)(wcs[i].wr_id - 1000);
			CHECK(k >= 0 && k < 400 && !seen[k], "wr_id %lu", wcs[i].wr_id);
			seen[k] = 1;
		}
		got_n += n;
		CHECK(time(NULL) - start < 20, "threaded completions: %d of 400", got_n);
	}
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);

	/* An asynchronous event: a one-entry CQ overruns. */
	struct ibv_cq *tiny = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	CHECK(tiny, "tiny cq");
	ia.send_cq = tiny;
	ia.recv_cq = cq_a;
	struct ibv_qp *qp_c = ibv_create_qp(pd, &ia);
	ia.send_cq = cq_a;
	struct ibv_qp *qp_d = ibv_create_qp(pd, &ia);
	CHECK(qp_c && qp_d, "third pair");
	connect_pair(qp_c, qp_d);
	struct ibv_send_wr w2 = w, w3 = w;
	w2.wr_id = 40;
	w2.next = &w3;
	w3.wr_id = 41;
	post_one(qp_c, &w2);
	struct pollfd afd = { .fd = ctx->async_fd, .events = POLLIN };
	CHECK(poll(&afd, 1, 10000) == 1, "async_fd readable");
	struct ibv_async_event ae;
	CHECK(ibv_get_async_event(ctx, &ae) == 0, "get_async_event");
	CHECK(ae.event_type == IBV_EVENT_CQ_ERR && ae.element.cq == tiny, "CQ error event");
	ibv_ack_async_event(&ae);
	CHECK(tiny->async_events_completed == 1, "acknowledged");

	/* A shared receive queue: receives posted through the inline ibv_post_srq_recv, taken
	   by a QP created on it; its armed limit raises IBV_EVENT_SRQ_LIMIT_REACHED once, naming
	   the SRQ; destroying it while a QP uses it is refused with EBUSY. */
	struct ibv_srq_init_attr sia = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	CHECK(srq && sia.attr.max_wr == 8, "create_srq");
	struct ibv_qp_init_attr sa = ia;
	sa.send_cq = sa.recv_cq = cq_b;
	sa.srq = srq;
	struct ibv_qp *qp_e = ibv_create_qp(pd, &ia), *qp_f = ibv_create_qp(pd, &sa);
	CHECK(qp_e && qp_f && qp_f->srq == srq, "QP on the SRQ");
	connect_pair(qp_e, qp_f);
	for (int i = 0; i < 3; i++) {
		struct ibv_sge rs = { .addr = (uintptr_t)(buf_b + 256 * i), .length = 256,
				      .lkey = mr_b->lkey };
		struct ibv_recv_wr rw = { .wr_id = 50 + i, .sg_list = &rs, .num_sge = 1 }, *rbad;
		CHECK(ibv_post_srq_recv(srq, &rw, &rbad) == 0, "post_srq_recv");
	}
	struct ibv_srq_attr lim = { .srq_limit = 2 };
	CHECK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "arm the limit");
	CHECK(ibv_destroy_srq(srq) == EBUSY, "an SRQ in use is not destroyed");
	struct ibv_sge ss = { .addr = (uintptr_t)buf_a, .length = 16, .lkey = mr_a->lkey };
	for (int i = 0; i < 2; i++) {
		struct ibv_send_wr sw = { .wr_id = 60 + i, .sg_list = &ss, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
		post_one(qp_e, &sw);
		wc = poll_one(cq_b);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 50 + (uint64_t)i &&
			      wc.qp_num == qp_f->qp_num, "SRQ receive %d in order", i);
		poll_one(cq_a);
	}
	CHECK(poll(&afd, 1, 10000) == 1, "async_fd readable for the SRQ limit");
	CHECK(ibv_get_async_event(ctx, &ae) == 0, "get_async_event");
	CHECK(ae.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ae.element.srq == srq,
	      "SRQ limit event names the SRQ");
	ibv_ack_async_event(&ae);
	struct ibv_srq_attr q;
	CHECK(ibv_query_srq(srq, &q) == 0 && q.max_wr == 8 && q.srq_limit == 0,
	      "the limit fired and is disarmed");
	CHECK(ibv_destroy_qp(qp_f) == 0 && ibv_destroy_qp(qp_e) == 0, "destroy QPs");
	CHECK(ibv_destroy_srq(srq) == 0, "destroy_srq");

	/* Memory windows through the header's inlines and ibv_post_send: a type 2 window bound
	   by a BIND_MW request, written through, revoked by the peer's SEND_WITH_INV, then a
	   remote access error; a type 1 window bound with ibv_bind_mw; the region pinned while
	   windows are bound. */
	{
		struct ibv_qp *qp_g = ibv_create_qp(pd, &ia), *qp_h = ibv_create_qp(pd, &ia);
		CHECK(qp_g && qp_h, "QPs for windows");
		connect_pair(qp_g, qp_h);
		uint8_t *wbuf = calloc(1, 4096);
		struct ibv_mr *wmr = ibv_reg_mr(pd, wbuf, 4096,
						IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
							IBV_ACCESS_MW_BIND);
		CHECK(wmr, "reg_mr with MW_BIND");
		struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
		CHECK(mw2 && mw2->pd == pd && mw2->type == IBV_MW_TYPE_2, "alloc_mw type 2");
		CHECK(!ibv_alloc_mw(pd, 3) && errno == EINVAL, "alloc_mw of an unknown type");
		uint32_t rkey = ibv_inc_rkey(mw2->rkey);
		struct ibv_send_wr bw = { .wr_id = 70, .opcode = IBV_WR_BIND_MW,
					  .send_flags = IBV_SEND_SIGNALED };
		bw.bind_mw.mw = mw2;
		bw.bind_mw.rkey = rkey;
		bw.bind_mw.bind_info = (struct ibv_mw_bind_info){
			.mr = wmr, .addr = (uintptr_t)wbuf + 512, .length = 256,
			.mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
		post_one(qp_h, &bw);
		struct ibv_wc w = poll_one(cq_a);
		CHECK(w.wr_id == 70 && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_BIND_MW,
		      "bind completion: %s opcode %d", ibv_wc_status_str(w.status), w.opcode);
		mw2->rkey = rkey;
		CHECK(ibv_dereg_mr(wmr) == EINVAL, "a region with windows bound stays");
		/* ibv_rereg_mr under the bound window: new rights that still back it keep the keys
		   (as rxe and mlx5); a new translation is refused as deregistration is, and so are
		   rights that no longer back the window; a refusal leaves the ibv_mr as it was. */
		uint32_t wlkey = wmr->lkey, wrkey = wmr->rkey;
		CHECK(ibv_rereg_mr(wmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND) == 0 &&
			      wmr->lkey == wlkey && wmr->rkey == wrkey,
		      "rereg of the rights keeps the keys");
		uint8_t *elsewhere = calloc(1, 4096);
		errno = 0;
		CHECK(ibv_rereg_mr(wmr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, elsewhere, 4096, 0) ==
				      IBV_REREG_MR_ERR_INPUT &&
			      errno == EINVAL && wmr->addr == wbuf && wmr->lkey == wlkey,
		      "a new translation under a bound window");
		errno = 0;
		CHECK(ibv_rereg_mr(wmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				   IBV_ACCESS_LOCAL_WRITE) == IBV_REREG_MR_ERR_INPUT &&
			      errno == EINVAL,
		      "rights that no longer back the window");
		free(elsewhere);

		memset(buf_a, 0x5c, 256);
		struct ibv_sge ws = { (uintptr_t)buf_a, 256, mr_a->lkey };
		struct ibv_send_wr wr = { .wr_id = 71, .sg_list = &ws, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED };
		wr.wr.rdma.remote_addr = (uintptr_t)wbuf + 512;
		wr.wr.rdma.rkey = rkey;
		post_one(qp_g, &wr);
		w = poll_one(cq_a);
		CHECK(w.wr_id == 71 && w.status == IBV_WC_SUCCESS, "WRITE through the window: %s",
		      ibv_wc_status_str(w.status));
		CHECK(wbuf[512] == 0x5c && wbuf[767] == 0x5c && wbuf[768] == 0, "window bytes");

		post_recv(qp_h, 72, buf_b + 30000, 64, mr_b->lkey);
		struct ibv_send_wr iw = { .wr_id = 73, .sg_list = &ws, .num_sge = 1,
					  .opcode = IBV_WR_SEND_WITH_INV,
					  .send_flags = IBV_SEND_SIGNALED };
		ws.length = 8;
		iw.invalidate_rkey = rkey;
		post_one(qp_g, &iw);
		struct ibv_wc two[2];
		int got = 0;
		time_t t0 = time(NULL);
		while (got < 2) {
			int n = ibv_poll_cq(cq_a, 2 - got, two + got);
			CHECK(n >= 0 && time(NULL) - t0 < 10, "SEND_WITH_INV completions");
			got += n;
		}
		struct ibv_wc *rv = two[0].wr_id == 72 ? &two[0] : &two[1];
		CHECK(rv->wr_id == 72 && rv->status == IBV_WC_SUCCESS &&
			      (rv->wc_flags & IBV_WC_WITH_INV) && rv->invalidated_rkey == rkey,
		      "receive names the invalidated rkey (flags %u)", rv->wc_flags);
		memset(buf_a, 0x77, 256);
		ws.length = 256;
		post_one(qp_g, &wr);
		w = poll_one(cq_a);
		CHECK(w.wr_id == 71 && w.status == IBV_WC_REM_ACCESS_ERR,
		      "WRITE after invalidation: %s", ibv_wc_status_str(w.status));
		CHECK(wbuf[512] == 0x5c, "nothing written after invalidation");
		CHECK(ibv_dealloc_mw(mw2) == 0, "dealloc_mw");

		/* Type 1 on a fresh pair: ibv_bind_mw posts the bind and updates mw->rkey. */
		struct ibv_qp *qp_i = ibv_create_qp(pd, &ia), *qp_j = ibv_create_qp(pd, &ia);
		CHECK(qp_i && qp_j, "QPs for type 1");
		connect_pair(qp_i, qp_j);
		struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
		CHECK(mw1, "alloc_mw type 1");
		uint32_t before = mw1->rkey;
		struct ibv_mw_bind mb = { .wr_id = 80, .send_flags = IBV_SEND_SIGNALED,
					  .bind_info = { .mr = wmr, .addr = (uintptr_t)wbuf,
							 .length = 64,
							 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
		CHECK(ibv_bind_mw(qp_j, mw1, &mb) == 0, "ibv_bind_mw");
		CHECK(mw1->rkey == ibv_inc_rkey(before), "the window's rkey moved on");
		w = poll_one(cq_a);
		CHECK(w.wr_id == 80 && w.opcode == IBV_WC_BIND_MW && w.status == IBV_WC_SUCCESS,
		      "type 1 bind: %s", ibv_wc_status_str(w.status));
		wr.wr.rdma.remote_addr = (uintptr_t)wbuf;
		wr.wr.rdma.rkey = mw1->rkey;
		ws.length = 64;
		wr.wr_id = 81;
		post_one(qp_i, &wr);
		w = poll_one(cq_a);
		CHECK(w.wr_id == 81 && w.status == IBV_WC_SUCCESS && wbuf[0] == 0x77,
		      "WRITE through the type 1 window");
		CHECK(ibv_bind_mw(qp_j, mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2), &mb) == EINVAL,
		      "ibv_bind_mw is for type 1 windows");
		struct ibv_send_wr li = { .wr_id = 82, .opcode = IBV_WR_LOCAL_INV,
					  .send_flags = IBV_SEND_SIGNALED,
					  .invalidate_rkey = mw1->rkey };
		post_one(qp_j, &li);
		w = poll_one(cq_a);
		CHECK(w.wr_id == 82 && w.opcode == IBV_WC_LOCAL_INV &&
			      w.status == IBV_WC_LOC_QP_OP_ERR,
		      "type 1 windows cannot be invalidated: %s", ibv_wc_status_str(w.status));
		/* The ibv_wr_* builders: bind a type 2 window, then invalidate it, in one batch. */
		struct ibv_qp_init_attr_ex wx = {
			.send_cq = cq_a, .recv_cq = cq_a,
			.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.pd = pd,
			.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV,
		};
		struct ibv_qp *qp_k = ibv_create_qp_ex(ctx, &wx), *qp_l = ibv_create_qp(pd, &ia);
		CHECK(qp_k && qp_l, "QPs for ibv_wr_bind_mw");
		connect_pair(qp_k, qp_l);
		struct ibv_qp_ex *kx = ibv_qp_to_qp_ex(qp_k);
		struct ibv_mw_bind_info kinfo = { .mr = wmr, .addr = (uintptr_t)wbuf, .length = 8,
						  .mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
		uint32_t krkey = ibv_inc_rkey(mw2->rkey);
		ibv_wr_start(kx);
		kx->wr_id = 90;
		kx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_bind_mw(kx, mw2, krkey, &kinfo);
		kx->wr_id = 91;
		ibv_wr_local_inv(kx, krkey);
		CHECK(ibv_wr_complete(kx) == 0, "ibv_wr_complete");
		w = poll_one(cq_a);
		CHECK(w.wr_id == 90 && w.opcode == IBV_WC_BIND_MW && w.status == IBV_WC_SUCCESS,
		      "ibv_wr_bind_mw: %s", ibv_wc_status_str(w.status));
		w = poll_one(cq_a);
		CHECK(w.wr_id == 91 && w.opcode == IBV_WC_LOCAL_INV && w.status == IBV_WC_SUCCESS,
		      "ibv_wr_local_inv: %s", ibv_wc_status_str(w.status));
		CHECK(ibv_destroy_qp(qp_k) == 0 && ibv_destroy_qp(qp_l) == 0, "destroy");
		CHECK(ibv_dealloc_mw(mw1) == 0 && ibv_dealloc_mw(mw2) == 0, "dealloc_mw");
		CHECK(ibv_dereg_mr(wmr) == 0, "dereg_mr once no window is bound");
		for (struct ibv_qp **q = (struct ibv_qp *[]){ qp_g, qp_h, qp_i, qp_j, NULL }; *q; q++)
			CHECK(ibv_destroy_qp(*q) == 0, "destroy window QPs");
		free(wbuf);
	}

	/* UD: two UD QPs, an address handle, a datagram with its GRH area, an AH from the
	   received completion, and refusals. */
	struct ibv_qp_init_attr ua = ia;
	ua.qp_type = IBV_QPT_UD;
	ua.send_cq = ua.recv_cq = cq_a;
	ua.cap.max_inline_data = 0;
	struct ibv_qp *ud_a = ibv_create_qp(pd, &ua), *ud_b = ibv_create_qp(pd, &ua);
	CHECK(ud_a && ud_b, "UD QPs");
	for (int i = 0; i < 2; i++) {
		struct ibv_qp *q = i ? ud_b : ud_a;
		struct ibv_qp_attr u = { .qp_state = IBV_QPS_INIT, .port_num = 1,
					 .qkey = 0x11111111 };
		CHECK(ibv_modify_qp(q, &u, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						    IBV_QP_QKEY) == 0, "UD INIT");
		u.qp_state = IBV_QPS_RTR;
		CHECK(ibv_modify_qp(q, &u, IBV_QP_STATE) == 0, "UD RTR");
		u.qp_state = IBV_QPS_RTS;
		u.sq_psn = 1;
		CHECK(ibv_modify_qp(q, &u, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD RTS");
	}
	struct ibv_ah_attr aa = { .is_global = 0, .port_num = 1 };
	CHECK(!ibv_create_ah(pd, &aa) && errno == EINVAL, "RoCE needs the GRH");
	aa.is_global = 1;
	aa.grh.dgid = gid;
	aa.grh.sgid_index = 2;
	CHECK(!ibv_create_ah(pd, &aa) && errno == EINVAL, "GID 2 (link-local) is not the device's address");
	aa.grh.sgid_index = 1;
	aa.grh.hop_limit = 64;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah && ah->pd == pd, "create_ah");
	post_recv(ud_b, 50, buf_b + 20000, 40 + 256, mr_b->lkey);
	struct ibv_sge usge = { (uintptr_t)buf_a, 200, mr_a->lkey };
	struct ibv_send_wr uw = { .wr_id = 51, .sg_list = &usge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
				  .wr.ud = { ah, ud_b->qp_num, 0x11111111 } };
	post_one(ud_a, &uw);
	struct ibv_wc uwc[2];
	int ugot = 0;
	start = time(NULL);
	while (ugot < 2) {
		int n = ibv_poll_cq(cq_a, 2 - ugot, uwc + ugot);
		CHECK(n >= 0 && time(NULL) - start < 10, "UD completions");
		ugot += n;
	}
	struct ibv_wc *urecv = uwc[0].wr_id == 50 ? &uwc[0] : &uwc[1];
	CHECK(urecv->wr_id == 50 && urecv->status == IBV_WC_SUCCESS &&
		      urecv->opcode == IBV_WC_RECV && (urecv->wc_flags & IBV_WC_GRH) &&
		      urecv->byte_len == 40 + 200 && urecv->src_qp == ud_a->qp_num,
	      "UD receive: flags %u len %u", urecv->wc_flags, urecv->byte_len);
	CHECK(!memcmp(buf_b + 20000 + 40, buf_a, 200), "UD payload after the GRH area");
	struct ibv_ah *reply = ibv_create_ah_from_wc(pd, urecv, (struct ibv_grh *)(buf_b + 20000), 1);
	CHECK(reply, "create_ah_from_wc");
	CHECK(ibv_destroy_ah(reply) == 0 && ibv_destroy_ah(ah) == 0, "destroy_ah");
	CHECK(ibv_destroy_ah(ah) == EINVAL, "a destroyed AH");
	union ibv_gid group = { .raw = { [10] = 0xff, [11] = 0xff, 239, 1, 2, 3 } };
	CHECK(ibv_attach_mcast(qp_a, &group, 0) == EINVAL, "only UD QPs join groups");
	CHECK(ibv_destroy_qp(ud_a) == 0 && ibv_destroy_qp(ud_b) == 0, "destroy UD QPs");

	/* An event handed out and acknowledged by another thread while its CQ is destroyed: the
	   destroy waits for the acknowledgement (ibv_get_cq_event(3)), which must reach it.
	   (The acknowledgement once failed on a CQ already leaving, and the destroy hung.) */
	struct ibv_cq *ecq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	struct ibv_qp_init_attr ea = ia;
	ea.send_cq = ea.recv_cq = ecq;
	struct ibv_qp *qe_a = ibv_create_qp(pd, &ia), *qe_b = ibv_create_qp(pd, &ea);
	CHECK(ecq && qe_a && qe_b, "a pair for the last event");
	connect_pair(qe_a, qe_b);
	CHECK(ibv_req_notify_cq(ecq, 0) == 0, "arm for the last event");
	post_recv(qe_b, 90, buf_b, 1024, mr_b->lkey);
	struct ibv_sge es = { (uintptr_t)buf_a, 8, mr_a->lkey };
	struct ibv_send_wr ew = { .wr_id = 91, .sg_list = &es, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	post_one(qe_a, &ew);
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == ecq, "the last event");
	poll_one(ecq);
	poll_one(ia.send_cq);
	CHECK(ibv_destroy_qp(qe_a) == 0 && ibv_destroy_qp(qe_b) == 0, "destroy the last pair");
	pthread_t acker;
	late_pd = pd;
	late_ia = ia;
	CHECK(pthread_create(&acker, NULL, ack_later, ecq) == 0, "acknowledging thread");
	CHECK(ibv_destroy_cq(ecq) == 0, "destroy waits for another thread's acknowledgement");
	pthread_join(acker, NULL);

	/* Teardown, with a destroyed handle used again. */
	CHECK(ibv_destroy_qp(qp_c) == 0 && ibv_destroy_qp(qp_d) == 0, "destroy third pair");
	CHECK(ibv_destroy_qp(qp_c) == EINVAL, "a destroyed QP");
	CHECK(ibv_destroy_cq(tiny) == 0, "destroy tiny");
	CHECK(ibv_destroy_qp(qp_a) == 0 && ibv_destroy_qp(qp_b) == 0, "destroy qps");
	CHECK(ibv_destroy_cq(cq_a) == 0 && ibv_destroy_cq(cq_b) == 0, "destroy cqs");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq_x)) == 0, "destroy cq_ex");
	CHECK(ibv_destroy_cq(cq_a) == EINVAL, "a destroyed CQ");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	CHECK(ibv_dereg_mr(mr_a) == 0 && ibv_dereg_mr(mr_b) == 0, "dereg");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	CHECK(ibv_dealloc_pd(pd) == EINVAL, "a deallocated PD");
	CHECK(ibv_close_device(ctx) == 0, "close");
	CHECK(ibv_close_device(ctx) == EINVAL, "a closed context");

	/* A context closed with its objects still there takes them along (as the kernel does),
	   so the device's address is free and the device opens again. */
	list = ibv_get_device_list(NULL);
	for (int round = 0; round < 2; round++) {
		ctx = ibv_open_device(list[0]);
		CHECK(ctx, "open, round %d", round);
		pd = ibv_alloc_pd(ctx);
		struct ibv_comp_channel *lch = ibv_create_comp_channel(ctx);
		struct ibv_cq *lcq = ibv_create_cq(ctx, 16, NULL, lch, 0);
		ia.send_cq = ia.recv_cq = lcq;
		struct ibv_qp *lqp = ibv_create_qp(pd, &ia);
		CHECK(pd && lch && lcq && lqp && ibv_reg_mr(pd, buf_a, 64, IBV_ACCESS_LOCAL_WRITE),
		      "objects left behind");
		CHECK(ibv_close_device(ctx) == 0, "close with live objects");
	}
	ibv_free_device_list(list);
	printf("verbs: all checks passed\n");
	return 0;
}
