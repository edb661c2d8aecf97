/* Device memory through the system <infiniband/verbs.h>'s inline verbs (ibv_alloc_dm,
 * ibv_memcpy_to_dm, ibv_memcpy_from_dm, ibv_reg_dm_mr, ibv_free_dm) on softrdma's
 * libibverbs.so.1:
 *
 * - ibv_query_device_ex reports max_dm_size; an allocation of it all succeeds, one more byte
 *   is ENOMEM, as are 0 bytes; comp_mask bits are EINVAL;
 * - copies at offsets and of lengths that are multiples of 4 move the bytes; others are
 *   EINVAL, beyond the allocation EFAULT;
 * - a zero-based region on it (IBV_ACCESS_ZERO_BASED required: EINVAL without, and beyond
 *   the allocation) takes an RDMA WRITE at its address 8 and gives the bytes to an RDMA READ;
 * - ibv_free_dm is EBUSY while the region exists, 0 after ibv_dereg_mr;
 * - imports, as with the kernel's shared objects: a dup of cmd_fd opens the same context
 *   (ibv_import_device; a closed fd EBADF, a descriptor of no context EINVAL), in which the
 *   PD, the region and the device memory are found by handle as themselves (another handle
 *   EINVAL); the unimports leave them, and the first ibv_close_device closes the import.
 *
 * Exit status 0 and a last line "dm: all checks passed" on success. */
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

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "a device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid");
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0, "query_device_ex");
	CHECK(dx.max_dm_size == 256 * 1024, "max_dm_size %llu", (unsigned long long)dx.max_dm_size);

	/* Allocations. */
	struct ibv_alloc_dm_attr da = { .length = dx.max_dm_size };
	struct ibv_dm *all = ibv_alloc_dm(ctx, &da);
	CHECK(all, "all of the device memory");
	da.length = 4;
	errno = 0;
	CHECK(!ibv_alloc_dm(ctx, &da) && errno == ENOMEM, "none left: ENOMEM");
	CHECK(ibv_free_dm(all) == 0, "free");
	da.length = 0;
	errno = 0;
	CHECK(!ibv_alloc_dm(ctx, &da) && errno == ENOMEM, "0 bytes: ENOMEM");
	da.length = 1024;
	da.comp_mask = 1;
	errno = 0;
	CHECK(!ibv_alloc_dm(ctx, &da) && errno == EINVAL, "comp_mask: EINVAL");
	da.comp_mask = 0;
	da.log_align_req = 6;
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
	CHECK(dm && dm->context == ctx, "alloc_dm");

	/* Copies. */
	char back[16];
	CHECK(ibv_memcpy_to_dm(dm, 1016, "softrdma", 8) == 0, "copy to");
	CHECK(ibv_memcpy_from_dm(back, dm, 1016, 8) == 0 && !memcmp(back, "softrdma", 8), "copy back");
	CHECK(ibv_memcpy_to_dm(dm, 2, "abcd", 4) == EINVAL, "unaligned offset: EINVAL");
	CHECK(ibv_memcpy_from_dm(back, dm, 4, 6) == EINVAL, "unaligned length: EINVAL");
	CHECK(ibv_memcpy_to_dm(dm, 1020, "abcdefgh", 8) == EFAULT, "beyond: EFAULT");
	CHECK(ibv_memcpy_from_dm(back, dm, 1024, 4) == EFAULT, "beyond: EFAULT");

	/* A zero-based region on it, written and read by RDMA. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	errno = 0;
	CHECK(!ibv_reg_dm_mr(pd, dm, 0, 512, access) && errno == EINVAL,
	      "not zero-based: EINVAL");
	errno = 0;
	CHECK(!ibv_reg_dm_mr(pd, dm, 512, 1024, access | IBV_ACCESS_ZERO_BASED) && errno == EINVAL,
	      "beyond the allocation: EINVAL");
	struct ibv_mr *dmr = ibv_reg_dm_mr(pd, dm, 512, 256, access | IBV_ACCESS_ZERO_BASED);
	CHECK(dmr && dmr->addr == NULL && dmr->length == 256 && dmr->pd == pd, "reg_dm_mr");
	CHECK(ibv_free_dm(dm) == EBUSY, "free with a region on it: EBUSY");

	enum { LEN = 4096 };
	char *buf = calloc(1, LEN);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, access);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(mr && cq, "mr, cq");
	struct ibv_qp *a, *b;
	rc_pair(pd, cq, cq, 8, &a, &b);
	strcpy(buf, "into device memory");
	size_t n = strlen(buf) + 1;
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = n, .lkey = mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 1,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = 8, .rkey = dmr->rkey },
	};
	post_one(a, &wr);
	struct ibv_wc wc = poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS, "WRITE to device memory: status %d", wc.status);
	char got[32] = { 0 };
	CHECK(ibv_memcpy_from_dm(got, dm, 520, 20) == 0 && !strcmp(got, "into device memory"),
	      "the WRITE at region address 8 is at allocation offset 520: %s", got);
	sge.addr = (uintptr_t)(buf + 1024);
	wr.wr_id = 2;
	wr.opcode = IBV_WR_RDMA_READ;
	post_one(a, &wr);
	wc = poll_one(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && !strcmp(buf + 1024, "into device memory"),
	      "READ from device memory: status %d", wc.status);

	/* Imports. */
	errno = 0;
	CHECK(!ibv_import_device(1000) && errno == EBADF, "a closed descriptor: EBADF");
	int devnull = open("/dev/null", O_RDWR);
	errno = 0;
	CHECK(!ibv_import_device(devnull) && errno == EINVAL, "no context's descriptor: EINVAL");
	close(devnull);
	int fd = dup(ctx->cmd_fd);
	CHECK(fd >= 0, "dup cmd_fd");
	struct ibv_context *again = ibv_import_device(fd);
	CHECK(again == ctx, "the same context");
	CHECK(ibv_import_pd(again, pd->handle) == pd, "the PD by its handle");
	errno = 0;
	CHECK(!ibv_import_pd(again, pd->handle + 1000) && errno == EINVAL, "no such PD: EINVAL");
	CHECK(ibv_import_mr(pd, mr->handle) == mr, "the region by its handle");
	CHECK(ibv_import_dm(again, dm->handle) == dm, "the device memory by its handle");
	ibv_unimport_mr(mr);
	ibv_unimport_pd(pd);
	ibv_unimport_dm(dm);
	char check[4];
	CHECK(ibv_memcpy_from_dm(check, dm, 520, 4) == 0 && !memcmp(check, "into", 4),
	      "unimported objects stay");
	CHECK(ibv_close_device(again) == 0, "close the import");
	CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF, "which closed its descriptor");

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy QPs");
	CHECK(ibv_dereg_mr(dmr) == 0 && ibv_dereg_mr(mr) == 0, "dereg");
	CHECK(ibv_free_dm(dm) == 0, "free after the region is gone");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "destroy CQ, PD");
	CHECK(ibv_close_device(ctx) == 0, "close");
	ibv_free_device_list(list);
	free(buf);
	printf("dm: all checks passed\n");
	return 0;
}
