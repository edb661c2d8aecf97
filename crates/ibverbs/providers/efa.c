/* softrdma's stand-in for libefa.so.1, the EFA provider's direct-verbs library (perftest links it).
 * Written by gen.py from rdma-core 44's library and header: do not edit by hand.
 *
 * Through softrdma there is no efa device, so every entry point answers truthfully
 * "not this vendor's device": constructors return NULL, commands and queries EOPNOTSUPP (or -1),
 * all with errno EOPNOTSUPP; efadv_is_supported() is false where it exists. Programs
 * then take their generic verbs path. No argument is ever read, so none is declared: under the
 * System V calling convention a callee that takes none ignores what the caller passes. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

void *efadv_cq_from_ibv_cq_ex(void) { errno = EOPNOTSUPP; return NULL; }
void *efadv_create_cq(void) { errno = EOPNOTSUPP; return NULL; }
void *efadv_create_driver_qp(void) { errno = EOPNOTSUPP; return NULL; }
void *efadv_create_qp_ex(void) { errno = EOPNOTSUPP; return NULL; }
int efadv_query_ah(void) { errno = EOPNOTSUPP; return EOPNOTSUPP; }
int efadv_query_device(void) { errno = EOPNOTSUPP; return EOPNOTSUPP; }
