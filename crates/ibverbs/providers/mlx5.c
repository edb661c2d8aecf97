/* softrdma's stand-in for libmlx5.so.1, the mlx5 provider's direct-verbs library.
 *
 * Debian's perftest links libmlx5.so.1 for its vendor extensions. Through softrdma there is
 * no mlx5 device, so every entry point answers truthfully "not an mlx5 device": queries and
 * commands fail with EOPNOTSUPP, constructors return NULL with errno EOPNOTSUPP, and
 * mlx5dv_is_supported() is false. Programs then take their generic verbs path. The arguments
 * are never dereferenced, so their types are opaque here. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

#define NOT_MLX5_PTR(name, ...)                                                \
	void *name(__VA_ARGS__) { errno = EOPNOTSUPP; return NULL; }
#define NOT_MLX5_INT(name, ...)                                                \
	int name(__VA_ARGS__) { return EOPNOTSUPP; }

bool mlx5dv_is_supported(void *device) { (void)device; return false; }
NOT_MLX5_PTR(mlx5dv_open_device, void *device, void *attr)
NOT_MLX5_PTR(mlx5dv_create_qp, void *context, void *qp_attr, void *mlx5_qp_attr)
NOT_MLX5_PTR(mlx5dv_qp_ex_from_ibv_qp_ex, void *qp)
NOT_MLX5_PTR(mlx5dv_create_mkey, void *mkey_init_attr)
NOT_MLX5_INT(mlx5dv_destroy_mkey, void *mkey)
NOT_MLX5_INT(mlx5dv_devx_general_cmd, void *context, const void *in, size_t inlen, void *out,
	     size_t outlen)
NOT_MLX5_INT(mlx5dv_crypto_login, void *context, void *login_attr)
NOT_MLX5_PTR(mlx5dv_dek_create, void *context, void *init_attr)
NOT_MLX5_INT(mlx5dv_dek_destroy, void *dek)
NOT_MLX5_INT(mlx5dv_query_device, void *context, void *attrs_out)
