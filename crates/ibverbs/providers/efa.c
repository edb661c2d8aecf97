/* softrdma's stand-in for libefa.so.1, the EFA provider's direct-verbs library.
 *
 * Debian's perftest links libefa.so.1 and asks efadv_query_device() whether the device is an
 * EFA device. Through softrdma it never is: queries fail with EOPNOTSUPP and constructors
 * return NULL with errno EOPNOTSUPP, so programs take their generic verbs path. Arguments
 * are never dereferenced, so their types are opaque here. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#define NOT_EFA_PTR(name, ...)                                                 \
	void *name(__VA_ARGS__) { errno = EOPNOTSUPP; return NULL; }
#define NOT_EFA_INT(name, ...)                                                 \
	int name(__VA_ARGS__) { return EOPNOTSUPP; }

NOT_EFA_PTR(efadv_create_driver_qp, void *pd, void *attr, uint32_t driver_qp_type)
NOT_EFA_PTR(efadv_create_qp_ex, void *context, void *attr_ex, void *efa_attr, uint32_t inlen)
NOT_EFA_INT(efadv_query_device, void *context, void *attr, uint32_t inlen)
NOT_EFA_INT(efadv_query_ah, void *ah, void *attr, uint32_t inlen)
NOT_EFA_PTR(efadv_create_cq, void *context, void *attr_ex, void *efa_attr, uint32_t inlen)
NOT_EFA_PTR(efadv_cq_from_ibv_cq_ex, void *cq)
