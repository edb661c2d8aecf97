/* Thread domains and parent domains through the system <infiniband/verbs.h>'s inline verbs
 * (ibv_alloc_td, ibv_dealloc_td, ibv_alloc_parent_domain) on softrdma's libibverbs.so.1:
 *
 * - a parent domain over a PD, with a thread domain and allocators, is a PD for every verb:
 *   an MR registered on it and an extended CQ whose parent_domain it is carry an RDMA WRITE
 *   between two RC QPs made on it, and the bytes land;
 * - an MR of the parent domain and one of its protection domain are one domain: a QP of the
 *   protection domain writes with the parent domain's MR (its lkey) into the other's;
 * - misuse gets mlx5's errnos: unknown comp_mask bits, a parent of a parent, allocators
 *   without both functions, a thread domain with comp_mask: EINVAL; a plain PD as a CQ's
 *   parent_domain: EINVAL; deallocating the PD or the TD under a parent domain, or a parent
 *   domain with a QP on it: EBUSY.
 *
 * Exit status 0 and a last line "domains: all checks passed" on success. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "check.h"
#include "rc.h"

static int alloc_calls;

static void *never_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
			 uint64_t resource_type)
{
	(void)pd, (void)pd_context, (void)size, (void)alignment, (void)resource_type;
	alloc_calls++;
	return IBV_ALLOCATOR_USE_DEFAULT;
}

static void never_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	(void)pd, (void)pd_context, (void)ptr, (void)resource_type;
}

static void write_and_check(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *src,
			    struct ibv_mr *dst, const char *text)
{
	size_t len = strlen(text) + 1;
	memcpy(src->addr, text, len);
	struct ibv_sge sge = { .addr = (uintptr_t)src->addr, .length = len, .lkey = src->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 7,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = (uintptr_t)dst->addr, .rkey = dst->rkey },
	};
	post_one(qp, &wr);
	struct ibv_wc wc = poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7, "WRITE completion status %d", wc.status);
	CHECK(strcmp(dst->addr, text) == 0, "WRITE data: %s", (char *)dst->addr);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "a device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");

	/* Thread domains. */
	struct ibv_td_init_attr tda = { .comp_mask = 1 };
	errno = 0;
	CHECK(!ibv_alloc_td(ctx, &tda) && errno == EINVAL, "TD with comp_mask: EINVAL");
	tda.comp_mask = 0;
	struct ibv_td *td = ibv_alloc_td(ctx, &tda);
	CHECK(td && td->context == ctx, "alloc_td");

	/* Parent domains: bad attributes first. */
	struct ibv_parent_domain_init_attr pa = { .pd = pd, .td = td, .comp_mask = 1u << 7 };
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &pa) && errno == EINVAL, "unknown comp_mask: EINVAL");
	pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
	pa.alloc = never_alloc;
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &pa) && errno == EINVAL, "alloc without free: EINVAL");
	pa.free = never_free;
	pa.comp_mask |= IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
	pa.pd_context = &alloc_calls;
	struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pa);
	CHECK(parent && parent->context == ctx, "alloc_parent_domain");
	struct ibv_parent_domain_init_attr nested = { .pd = parent };
	errno = 0;
	CHECK(!ibv_alloc_parent_domain(ctx, &nested) && errno == EINVAL,
	      "a parent domain of a parent domain: EINVAL");

	/* What it holds cannot go. */
	errno = 0;
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "PD under a parent domain: EBUSY");
	CHECK(ibv_dealloc_td(td) == EBUSY, "TD under a parent domain: EBUSY");

	/* An extended CQ takes a parent domain, not a plain PD. */
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 16,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
		.parent_domain = pd,
	};
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EINVAL, "CQ with a plain PD as parent: EINVAL");
	ca.parent_domain = parent;
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
	CHECK(cqx, "CQ with a parent domain");
	struct ibv_cq *cq = ibv_cq_ex_to_cq(cqx);

	/* Traffic on the parent domain. */
	enum { LEN = 4096 };
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *src = ibv_reg_mr(parent, calloc(1, LEN), LEN, access);
	struct ibv_mr *dst = ibv_reg_mr(parent, calloc(1, LEN), LEN, access);
	struct ibv_mr *plain = ibv_reg_mr(pd, calloc(1, LEN), LEN, access);
	CHECK(src && dst && plain && src->pd == parent && plain->pd == pd, "reg_mr");
	struct ibv_qp *a, *b;
	rc_pair(parent, cq, cq, 8, &a, &b);
	CHECK(a->pd == parent, "the QP's pd is the parent domain");
	write_and_check(a, cq, src, dst, "written on a parent domain");

	/* The parent domain's MRs are its protection domain's: a QP of the PD uses them. */
	struct ibv_qp *c, *d;
	rc_pair(pd, cq, cq, 8, &c, &d);
	write_and_check(c, cq, src, plain, "the parent domain's lkey, the PD's QP");

	/* A parent domain in use cannot go; once empty it can, and then so can the rest. */
	errno = 0;
	CHECK(ibv_dealloc_pd(parent) == EBUSY, "parent domain with a QP: EBUSY");
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy QPs");
	CHECK(ibv_destroy_qp(c) == 0 && ibv_destroy_qp(d) == 0, "destroy QPs");
	CHECK(ibv_dereg_mr(src) == 0 && ibv_dereg_mr(dst) == 0 && ibv_dereg_mr(plain) == 0,
	      "dereg_mr");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy CQ");
	CHECK(ibv_dealloc_pd(parent) == 0, "dealloc parent domain");
	CHECK(ibv_dealloc_td(td) == 0, "dealloc TD");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc PD");
	/* softrdma's queues are the library's: the allocators were never needed. */
	CHECK(alloc_calls == 0, "allocator calls: %d", alloc_calls);
	CHECK(ibv_close_device(ctx) == 0, "close");
	ibv_free_device_list(list);
	printf("domains: all checks passed\n");
	return 0;
}
