/* errpaths_dut.c: the device under test of scripts/lab/errpaths.py, one RC QP per session.
 *
 * The same program runs on Linux rxe (in a lab guest, against the guest's libibverbs) and on
 * softrdma (on the lab host, through `softrdma exec`), so both devices see the same verbs
 * calls. It listens on TCP PORT; the injector connects once per case and drives it with text
 * lines (one command, one answer line each):
 *
 *   setup KEY=VAL...   creates a PD, CQ, a 64 KiB MR (all remote rights) and an RC QP, and
 *                      moves the QP to RTS. Keys: dqpn, dgid (the injector's IPv4 address),
 *                      rq_psn, sq_psn, recvs (receives posted at RTR), min_rnr, timeout,
 *                      retry_cnt, rnr_retry.
 *                      -> "ok qpn=0x.. rkey=0x.. va=0x.."
 *   post OP LEN        posts one signaled WR: send, write, read, cas or faa (LEN bytes; 8 for
 *                      the atomics) to the injector's buffer (rkey 0x1234, va 0x10000).
 *                      -> "ok"
 *   recv N             posts N more receives.  -> "ok"
 *   poll MS            waits up to MS ms for completions, stopping 300 ms after the first
 *                      error completion; -> "wc [STATUS:OPCODE:BYTES:MS ...] state=S" with
 *                      each completion's ibv_wc_status, opcode, byte_len and arrival time
 *                      since the post (or since setup), and the QP state of ibv_query_qp.
 *   close              destroys the objects and ends the session.
 *
 * Usage: errpaths_dut PORT [SESSIONS]   (SESSIONS default 1000; exits after that many) */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define BUF_LEN 65536

struct session {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *qp;
	char *buf;
	double t0;
};

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static unsigned long kv(const char *line, const char *key, unsigned long dflt)
{
	char pat[40];
	const char *p;

	snprintf(pat, sizeof(pat), " %s=", key);
	p = strstr(line, pat);
	return p ? strtoul(p + strlen(pat), NULL, 0) : dflt;
}

static int post_recvs(struct session *s, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)s->buf + 32768, .length = 32768,
				       .lkey = s->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(s->qp, &wr, &bad))
			return -1;
	}
	return 0;
}

static int setup(struct session *s, const char *line, char *out, size_t outlen)
{
	struct ibv_device **devs = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr init = { .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
		.cap = { .max_send_wr = 16, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr a;
	union ibv_gid dgid;
	uint32_t dip = htonl(kv(line, "dgid", 0));

	if (!devs || !devs[0] || !(s->ctx = ibv_open_device(devs[0])))
		return snprintf(out, outlen, "err no device"), -1;
	ibv_free_device_list(devs);
	s->buf = aligned_alloc(4096, BUF_LEN);
	memset(s->buf, 0x5a, BUF_LEN);
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 128, NULL, NULL, 0);
	s->mr = s->pd ? ibv_reg_mr(s->pd, s->buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE |
				   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC) : NULL;
	if (!s->mr || !s->cq)
		return snprintf(out, outlen, "err pd/cq/mr"), -1;
	init.send_cq = init.recv_cq = s->cq;
	if (!(s->qp = ibv_create_qp(s->pd, &init)))
		return snprintf(out, outlen, "err create_qp"), -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return snprintf(out, outlen, "err INIT"), -1;
	if (post_recvs(s, kv(line, "recvs", 0)))
		return snprintf(out, outlen, "err post_recv"), -1;
	memset(&dgid, 0, sizeof(dgid));
	dgid.raw[10] = dgid.raw[11] = 0xff;
	memcpy(&dgid.raw[12], &dip, 4);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = kv(line, "dqpn", 0);
	a.rq_psn = kv(line, "rq_psn", 0);
	a.max_dest_rd_atomic = 16;
	a.min_rnr_timer = kv(line, "min_rnr", 12);
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = dgid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 64;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return snprintf(out, outlen, "err RTR"), -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = kv(line, "sq_psn", 0);
	a.timeout = kv(line, "timeout", 14);
	a.retry_cnt = kv(line, "retry_cnt", 7);
	a.rnr_retry = kv(line, "rnr_retry", 7);
	a.max_rd_atomic = 16;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		return snprintf(out, outlen, "err RTS"), -1;
	s->t0 = now_ms();
	return snprintf(out, outlen, "ok qpn=0x%x rkey=0x%x va=0x%llx", s->qp->qp_num,
			s->mr->rkey, (unsigned long long)(uintptr_t)s->buf), 0;
}

static int post(struct session *s, const char *line, char *out, size_t outlen)
{
	char op[16] = "";
	unsigned len = 0;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;

	if (sscanf(line, "post %15s %u", op, &len) != 2 || len > 32768)
		return snprintf(out, outlen, "err usage"), -1;
	memset(&wr, 0, sizeof(wr));
	sge.addr = (uintptr_t)s->buf;
	sge.length = len;
	sge.lkey = s->mr->lkey;
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = 0x10000;
	wr.wr.rdma.rkey = 0x1234;
	if (!strcmp(op, "send")) {
		wr.opcode = IBV_WR_SEND;
	} else if (!strcmp(op, "write")) {
		wr.opcode = IBV_WR_RDMA_WRITE;
	} else if (!strcmp(op, "read")) {
		wr.opcode = IBV_WR_RDMA_READ;
	} else if (!strcmp(op, "cas") || !strcmp(op, "faa")) {
		wr.opcode = op[0] == 'c' ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
		sge.length = 8;
		wr.wr.atomic.remote_addr = 0x10000;
		wr.wr.atomic.rkey = 0x1234;
		wr.wr.atomic.compare_add = 1;
		wr.wr.atomic.swap = 2;
	} else {
		return snprintf(out, outlen, "err op"), -1;
	}
	s->t0 = now_ms();
	if (ibv_post_send(s->qp, &wr, &bad))
		return snprintf(out, outlen, "err post_send"), -1;
	return snprintf(out, outlen, "ok"), 0;
}

static const char *state_name(enum ibv_qp_state st)
{
	static const char *n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return st <= IBV_QPS_ERR ? n[st] : "?";
}

static void do_poll(struct session *s, const char *line, char *out, size_t outlen)
{
	double end = now_ms() + kv(line, "ms", 1000);
	size_t used = snprintf(out, outlen, "wc");
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;

	while (now_ms() < end) {
		int n = ibv_poll_cq(s->cq, 1, &wc);

		if (n < 0)
			break;
		if (n == 0) {
			usleep(200);
			continue;
		}
		used += snprintf(out + used, outlen - used, " %d:%d:%u:%.0f", wc.status, wc.opcode,
				 wc.byte_len, now_ms() - s->t0);
		if (used > outlen - 64)
			break;
		if (wc.status != IBV_WC_SUCCESS && end > now_ms() + 300)
			end = now_ms() + 300;
	}
	a.qp_state = -1;
	ibv_query_qp(s->qp, &a, IBV_QP_STATE, &ia);
	snprintf(out + used, outlen - used, " state=%s", state_name(a.qp_state));
}

static void teardown(struct session *s)
{
	if (s->qp)
		ibv_destroy_qp(s->qp);
	if (s->mr)
		ibv_dereg_mr(s->mr);
	if (s->cq)
		ibv_destroy_cq(s->cq);
	if (s->pd)
		ibv_dealloc_pd(s->pd);
	if (s->ctx)
		ibv_close_device(s->ctx);
	free(s->buf);
	memset(s, 0, sizeof(*s));
}

static void serve(int fd)
{
	struct session s;
	FILE *in = fdopen(fd, "r");
	char line[512], out[2048];

	memset(&s, 0, sizeof(s));
	while (in && fgets(line, sizeof(line), in)) {
		line[strcspn(line, "\r\n")] = 0;
		/* keys are looked up as " key=", so the first one needs a space before it too */
		memmove(line + 1, line, strlen(line) + 1);
		line[0] = ' ';
		if (!strncmp(line, " setup", 6)) {
			setup(&s, line, out, sizeof(out));
		} else if (!strncmp(line, " post", 5)) {
			post(&s, line + 1, out, sizeof(out));
		} else if (!strncmp(line, " recv", 5)) {
			snprintf(out, sizeof(out), post_recvs(&s, atoi(line + 6)) ? "err" : "ok");
		} else if (!strncmp(line, " poll", 5)) {
			do_poll(&s, line, out, sizeof(out));
		} else if (!strncmp(line, " close", 6)) {
			break;
		} else {
			snprintf(out, sizeof(out), "err unknown command");
		}
		fprintf(stderr, "errpaths_dut:%s -> %s\n", line, out);
		strcat(out, "\n");
		if (write(fd, out, strlen(out)) < 0)
			break;
	}
	teardown(&s);
	if (in)
		fclose(in);
	else
		close(fd);
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	int one = 1, sessions = argc > 2 ? atoi(argv[2]) : 1000;
	int lfd = socket(AF_INET, SOCK_STREAM, 0);

	if (argc < 2) {
		fprintf(stderr, "usage: %s PORT [SESSIONS]\n", argv[0]);
		return 2;
	}
	sa.sin_port = htons(atoi(argv[1]));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1)) {
		perror("bind/listen");
		return 1;
	}
	fprintf(stderr, "errpaths_dut: listening on %s\n", argv[1]);
	for (int i = 0; i < sessions; i++) {
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0)
			return 1;
		serve(fd);
	}
	return 0;
}
