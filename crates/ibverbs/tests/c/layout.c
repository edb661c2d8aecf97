/* Checks softrdma's libibverbs against rdma-core's headers: for every entry of the table the
 * library exports (softrdma_abi_layout), the C expression that names it is evaluated here,
 * against the system <infiniband/verbs.h> and <rdma/rdma_cma.h>, and the values must be equal.
 *
 * The expressions themselves come from the library: tests/abi.rs writes them into
 * layout_entries.h as CHECK(...) lines, so a field the Rust side names wrongly does not
 * compile, and a wrong offset or size fails at run time. Run with softrdma's library first on
 * LD_LIBRARY_PATH, which is what dlopen("libibverbs.so.1") then finds. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_cma.h>

struct layout_entry {
	const char *name;
	size_t value;
};

static const struct layout_entry *table;
static int checked, failed;

static void check(const char *name, size_t c_value)
{
	const struct layout_entry *e;

	for (e = table; e->name; e++) {
		if (strcmp(e->name, name))
			continue;
		checked++;
		if (e->value != c_value) {
			printf("MISMATCH %s: C %zu, softrdma %zu\n", name, c_value,
			       e->value);
			failed++;
		}
		return;
	}
	printf("MISSING %s\n", name);
	failed++;
}

#define CHECK(x) check(#x, (size_t)(x))

int main(void)
{
	const struct layout_entry *(*layout)(void);
	int entries = 0;

	/* The library a program linked with -libverbs gets: with LD_LIBRARY_PATH, softrdma's. */
	void *lib = dlopen("libibverbs.so.1", RTLD_NOW);

	if (!lib) {
		printf("FAIL: cannot load libibverbs.so.1: %s\n", dlerror());
		return 1;
	}
	layout = (const struct layout_entry *(*)(void))dlsym(lib, "softrdma_abi_layout");
	if (!layout) {
		printf("FAIL: softrdma_abi_layout not found: not running on softrdma's libibverbs\n");
		return 1;
	}
	table = layout();
	for (const struct layout_entry *e = table; e->name; e++)
		entries++;

#include "layout_entries.h"

	printf("%d of %d layout entries checked, %d failed\n", checked, entries, failed);
	return failed || checked != entries || entries < 300;
}
