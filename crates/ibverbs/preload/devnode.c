/*
 * libsoftrdma-devnode.so: the device node of softrdma0, for programs that look for one.
 *
 * A kernel RDMA device has a character device, /dev/infiniband/<dev_name> (uverbs0, ...),
 * which rdma-core's libibverbs opens. softrdma's libibverbs opens nothing: the device lives
 * in the process. Some programs check the node before they call ibv_open_device: UCX 1.13
 * lists a device only if stat() says /dev/infiniband/<dev_name> is a character device and
 * access() grants read and write (uct_ib_device_is_accessible), so without the node UCX has
 * no RDMA device at all. Creating /dev/infiniband needs root.
 *
 * `softrdma exec` preloads this library. For the one path /dev/infiniband/softrdma0 (the
 * dev_name of softrdma's device, which no kernel device has), stat(), stat64(), access() and
 * the older __xstat()/__xstat64() answer as for /dev/null: a character device every user may
 * read and write, which is what the path stands for (a device this process can open). Every
 * other path goes to the C library untouched. Nothing is opened, created or changed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SOFTRDMA_NODE "/dev/infiniband/softrdma0"
#define STAND_IN "/dev/null"

/* The path the C library is asked about: /dev/null for softrdma0's node. */
static const char *node_path(const char *path)
{
    if (path != NULL && strcmp(path, SOFTRDMA_NODE) == 0)
        return STAND_IN;
    return path;
}

/* The next definition of `name` (the C library's), or NULL with errno ENOSYS. */
static void *next(const char *name, const char *version)
{
    void *f = version ? dlvsym(RTLD_NEXT, name, version) : dlsym(RTLD_NEXT, name);
    if (f == NULL)
        errno = ENOSYS;
    return f;
}

int stat(const char *path, struct stat *buf)
{
    int (*real)(const char *, struct stat *) = next("stat", NULL);
    return real ? real(node_path(path), buf) : -1;
}

int stat64(const char *path, struct stat64 *buf)
{
    int (*real)(const char *, struct stat64 *) = next("stat64", NULL);
    return real ? real(node_path(path), buf) : -1;
}

int access(const char *path, int mode)
{
    int (*real)(const char *, int) = next("access", NULL);
    return real ? real(node_path(path), mode) : -1;
}

/* Programs built against a C library before 2.33 call these instead of stat(). */
int __xstat(int ver, const char *path, struct stat *buf)
{
    int (*real)(int, const char *, struct stat *) = next("__xstat", "GLIBC_2.2.5");
    return real ? real(ver, node_path(path), buf) : -1;
}

int __xstat64(int ver, const char *path, struct stat64 *buf)
{
    int (*real)(int, const char *, struct stat64 *) = next("__xstat64", "GLIBC_2.2.5");
    return real ? real(ver, node_path(path), buf) : -1;
}
