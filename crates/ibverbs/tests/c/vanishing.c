/* Registered memory that the program unmaps or protects while it is still registered: the
 * operations that touch it end with the completion statuses a NIC gives for memory it cannot
 * reach, and the process lives (softrdma pins nothing; its copies catch the fault). Then
 * on-demand paging, which rests on the same: regions whose pages come later, the implicit
 * region, ibv_advise_mr. Two RC QPs of one device, as in verbs.c. Exit status 0 and a last
 * line "vanishing: all checks passed". */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "check.h"
#include "rc.h"

#define PAGE 4096

static struct ibv_pd *pd;
static struct ibv_cq *cq;

/* Three pages, registered for every access; the middle one is then unmapped or protected. */
static uint8_t *pages(struct ibv_mr **mr)
{
	uint8_t *p = mmap(NULL, 3 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);

	CHECK(p != MAP_FAILED, "mmap");
	*mr = ibv_reg_mr(pd, p, 3 * PAGE,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				 IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(*mr, "ibv_reg_mr");
	return p;
}

/* Posts `wr` on a freshly connected pair (an access error moves the QPs to the error state)
 * and returns its completion's status. */
static enum ibv_wc_status run(struct ibv_send_wr *wr)
{
	struct ibv_qp *a, *b;

	rc_pair(pd, cq, cq, 4, &a, &b);
	wr->send_flags = IBV_SEND_SIGNALED;
	post_one(a, wr);
	struct ibv_wc wc = poll_one(cq);
	CHECK(wc.wr_id == wr->wr_id, "completion of wr %llu", (unsigned long long)wr->wr_id);
	/* The responder's QP may have seen its own error: let its flushes out before the next. */
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy_qp");
	struct ibv_wc more;
	while (ibv_poll_cq(cq, 1, &more) > 0)
		;
	return wc.status;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "a device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	ibv_free_device_list(list);
	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "gid 1");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(pd && cq, "pd, cq");

	static uint8_t local[PAGE];
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, sizeof local,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(lmr, "local mr");
	struct ibv_sge sge = { (uintptr_t)local, 256, lmr->lkey };

	/* Remote access to an unmapped page: WRITE, READ, atomic. */
	struct ibv_mr *mr;
	uint8_t *t = pages(&mr);
	CHECK(munmap(t + PAGE, PAGE) == 0, "munmap");
	uint64_t hole = (uintptr_t)(t + PAGE);
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .wr.rdma = { hole, mr->rkey } };
	CHECK(run(&w) == IBV_WC_REM_ACCESS_ERR, "WRITE into an unmapped page");
	w.wr_id = 2;
	w.opcode = IBV_WR_RDMA_READ;
	CHECK(run(&w) == IBV_WC_REM_ACCESS_ERR, "READ from an unmapped page");
	struct ibv_sge word = { (uintptr_t)local, 8, lmr->lkey };
	struct ibv_send_wr fa = { .wr_id = 3, .sg_list = &word, .num_sge = 1,
				  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				  .wr.atomic = { hole, 1, 0, mr->rkey } };
	CHECK(run(&fa) == IBV_WC_REM_ACCESS_ERR, "FETCH_ADD on an unmapped page");
	/* The pages around the hole still work. */
	w.wr_id = 4;
	w.opcode = IBV_WR_RDMA_WRITE;
	w.wr.rdma.remote_addr = (uintptr_t)t;
	memset(local, 0x77, 256);
	CHECK(run(&w) == IBV_WC_SUCCESS && t[255] == 0x77, "WRITE beside the hole");

	/* Local access: a SEND gathering from the unmapped page. */
	struct ibv_sge from_hole = { hole, 64, mr->lkey };
	struct ibv_send_wr s = { .wr_id = 5, .sg_list = &from_hole, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .wr.rdma = { (uintptr_t)local, lmr->rkey } };
	CHECK(run(&s) == IBV_WC_LOC_PROT_ERR, "a WRITE gathering from an unmapped page");

	/* mprotect(PROT_NONE): the same errors; writable again, it works. */
	struct ibv_mr *mr2;
	uint8_t *p = pages(&mr2);
	CHECK(mprotect(p + PAGE, PAGE, PROT_NONE) == 0, "mprotect");
	struct ibv_send_wr w2 = { .wr_id = 6, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE,
				  .wr.rdma = { (uintptr_t)(p + PAGE), mr2->rkey } };
	CHECK(run(&w2) == IBV_WC_REM_ACCESS_ERR, "WRITE into a PROT_NONE page");
	w2.wr_id = 7;
	w2.opcode = IBV_WR_RDMA_READ;
	CHECK(run(&w2) == IBV_WC_REM_ACCESS_ERR, "READ from a PROT_NONE page");
	CHECK(mprotect(p + PAGE, PAGE, PROT_READ) == 0, "mprotect");
	CHECK(run(&w2) == IBV_WC_SUCCESS, "READ from a read-only page");
	w2.wr_id = 8;
	w2.opcode = IBV_WR_RDMA_WRITE;
	CHECK(run(&w2) == IBV_WC_REM_ACCESS_ERR, "WRITE into a read-only page");
	CHECK(mprotect(p + PAGE, PAGE, PROT_READ | PROT_WRITE) == 0, "mprotect");
	memset(local, 0x55, 256); /* the READ above filled it with the page's zeros */
	CHECK(run(&w2) == IBV_WC_SUCCESS && p[PAGE + 255] == 0x55, "WRITE once writable");

	/* On-demand paging: the caps, a region over pages not accessible yet, the implicit
	 * region, and ibv_advise_mr. */
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0, "query_device_ex");
	CHECK(dx.odp_caps.general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT) &&
		      (dx.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE) &&
		      (dx.odp_caps.per_transport_caps.ud_odp_caps & IBV_ODP_SUPPORT_SEND),
	      "ODP caps");
	uint8_t *q = mmap(NULL, PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(q != MAP_FAILED, "mmap");
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	CHECK(!ibv_reg_mr(pd, q, PAGE, rw) && errno == EFAULT, "pinned: an inaccessible page");
	struct ibv_mr *odp = ibv_reg_mr(pd, q, PAGE, rw | IBV_ACCESS_ON_DEMAND);
	CHECK(odp, "on demand: an inaccessible page is registered");
	struct ibv_sge pre = { (uintptr_t)q, PAGE, odp->lkey };
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			    &pre, 1) == EFAULT,
	      "prefetch of an inaccessible page");
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &pre, 1) == 0,
	      "prefetch without faults");
	struct ibv_send_wr wq = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .wr.rdma = { (uintptr_t)q, odp->rkey } };
	CHECK(run(&wq) == IBV_WC_REM_ACCESS_ERR, "WRITE before the page is there");
	CHECK(mprotect(q, PAGE, PROT_READ | PROT_WRITE) == 0, "mprotect");
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			    &pre, 1) == 0,
	      "prefetch");
	memset(local, 0x66, 256);
	wq.wr_id = 10;
	CHECK(run(&wq) == IBV_WC_SUCCESS && q[255] == 0x66, "WRITE once the page is there");
	struct ibv_sge not_odp = { (uintptr_t)local, 64, lmr->lkey };
	CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &not_odp, 1) == EINVAL,
	      "prefetch of a region not on demand");
	struct ibv_mr *all = ibv_reg_mr(pd, NULL, SIZE_MAX, rw | IBV_ACCESS_ON_DEMAND);
	CHECK(all && all->addr == NULL && all->length == SIZE_MAX, "the implicit region");
	static uint8_t anywhere[512];
	wq.wr_id = 11;
	wq.wr.rdma.remote_addr = (uintptr_t)anywhere;
	wq.wr.rdma.rkey = all->rkey;
	CHECK(run(&wq) == IBV_WC_SUCCESS && anywhere[255] == 0x66,
	      "WRITE anywhere through the implicit region");
	memset(local, 0, 256);
	anywhere[7] = 0x42;
	wq.wr_id = 12;
	wq.opcode = IBV_WR_RDMA_READ;
	CHECK(run(&wq) == IBV_WC_SUCCESS && local[7] == 0x42 && local[255] == 0x66,
	      "READ anywhere through the implicit region");
	/* A page unmapped just now (the hole above may have been mapped again since). */
	uint8_t *gone = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(gone != MAP_FAILED && munmap(gone, PAGE) == 0, "mmap, munmap");
	wq.wr_id = 13;
	wq.wr.rdma.remote_addr = (uintptr_t)gone;
	CHECK(run(&wq) == IBV_WC_REM_ACCESS_ERR, "READ of an unmapped page through it");
	wq.wr_id = 14;
	wq.opcode = IBV_WR_RDMA_WRITE;
	CHECK(run(&wq) == IBV_WC_REM_ACCESS_ERR, "WRITE of an unmapped page through it");
	CHECK(ibv_dereg_mr(all) == 0 && ibv_dereg_mr(odp) == 0, "dereg on demand");

	CHECK(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(mr2) == 0 && ibv_dereg_mr(lmr) == 0, "dereg");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "destroy");
	CHECK(ibv_close_device(ctx) == 0, "close");
	printf("vanishing: all checks passed\n");
	return 0;
}
