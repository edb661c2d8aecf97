/*
 * libsoftrdma-devnode.so: the device node and the sysfs directory of softrdma0, for programs
 * that look for them.
 *
 * A kernel RDMA device has a character device, /dev/infiniband/<dev_name> (uverbs0, ...),
 * which rdma-core's libibverbs opens, and a directory /sys/class/infiniband/<name>. softrdma's
 * libibverbs opens neither: the device lives in the process. But some programs read them
 * before or beside the verbs:
 *
 * - UCX 1.13 lists a device only if stat() says /dev/infiniband/<dev_name> is a character
 *   device and access() grants read and write (uct_ib_device_is_accessible); and it takes a
 *   GID's RoCE version from ports/<p>/gid_attrs/types/<i>, reading RoCE v1 when the file is
 *   missing.
 * - rdma-core's own tests (pyverbs, tests/base.py) find the device's IP address through its
 *   netdev, the one entry of device/net/, and skip every rdma_cm test without one.
 *
 * Creating /dev/infiniband needs root, and nobody can create files in sysfs. `softrdma exec`
 * preloads this library and, in SOFTRDMA_SYSFS, names a directory it wrote that stands for
 * /sys/class/infiniband/softrdma0 (the layout is in crates/cli/src/sysfs.rs).
 *
 * - /dev/infiniband/softrdma0 (the dev_name of softrdma's device, which no kernel device
 *   has): stat() and access() answer as for /dev/null, a character device every user may read
 *   and write, which is what the path stands for (a device this process can open).
 * - /sys/class/infiniband/softrdma0 and every path below it: each call below is made on the
 *   same path under SOFTRDMA_SYSFS instead (no kernel device is named softrdma0 either).
 *
 * Every other path goes to the C library untouched. Nothing is created or changed: the
 * directory is exec's, not the program's, so opening a file in it for writing fails with
 * EACCES, as for a read-only sysfs attribute, and the calls that remove or rename are not
 * wrapped.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define SOFTRDMA_NODE "/dev/infiniband/softrdma0"
#define NODE_STAND_IN "/dev/null"
#define SOFTRDMA_CLASS_DIR "/sys/class/infiniband/softrdma0"
#define SYSFS_ENV "SOFTRDMA_SYSFS"

/* One translated path per thread: each wrapper uses it before it returns. */
static __thread char translated[PATH_MAX];

/* `path` under SOFTRDMA_SYSFS if it names softrdma0's class directory or a path below it,
 * else `path` itself. */
static const char *sysfs_path(const char *path)
{
    static const size_t len = sizeof(SOFTRDMA_CLASS_DIR) - 1;
    if (path == NULL || strncmp(path, SOFTRDMA_CLASS_DIR, len) != 0 ||
        (path[len] != '\0' && path[len] != '/'))
        return path;
    const char *root = getenv(SYSFS_ENV);
    if (root == NULL || root[0] != '/')
        return path;
    int n = snprintf(translated, sizeof(translated), "%s%s", root, path + len);
    if (n < 0 || (size_t)n >= sizeof(translated))
        return path;
    return translated;
}

/* What stat() and access() are asked about: the node's stand-in, or the sysfs translation. */
static const char *stat_path(const char *path)
{
    if (path != NULL && strcmp(path, SOFTRDMA_NODE) == 0)
        return NODE_STAND_IN;
    return sysfs_path(path);
}

/* The same for the *at() calls: a relative path is relative to `dirfd`, never translated. */
static const char *stat_path_at(const char *path)
{
    return path != NULL && path[0] == '/' ? stat_path(path) : path;
}

/* The path open() is asked to open with `flags`: the sysfs translation, or NULL with errno
 * EACCES for a translated path opened for anything but reading. */
static const char *open_path(const char *path, int flags)
{
    const char *p = sysfs_path(path);
    if (p != path && ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)))) {
        errno = EACCES;
        return NULL;
    }
    return p;
}

/* The same for the *at() calls. */
static const char *open_path_at(const char *path, int flags)
{
    return path != NULL && path[0] == '/' ? open_path(path, flags) : path;
}

/* The next definition of `name` (the C library's), or NULL with errno ENOSYS. */
static void *next(const char *name, const char *version)
{
    void *f = version ? dlvsym(RTLD_NEXT, name, version) : dlsym(RTLD_NEXT, name);
    if (f == NULL)
        errno = ENOSYS;
    return f;
}

/* open()'s mode argument is there only when the flags create a file. */
#define OPEN_MODE(flags, mode)                                                                \
    do {                                                                                      \
        if ((flags) & (O_CREAT | O_TMPFILE)) {                                                \
            va_list ap;                                                                       \
            va_start(ap, flags);                                                              \
            mode = va_arg(ap, mode_t);                                                        \
            va_end(ap);                                                                       \
        }                                                                                     \
    } while (0)

int stat(const char *path, struct stat *buf)
{
    int (*real)(const char *, struct stat *) = next("stat", NULL);
    return real ? real(stat_path(path), buf) : -1;
}

int stat64(const char *path, struct stat64 *buf)
{
    int (*real)(const char *, struct stat64 *) = next("stat64", NULL);
    return real ? real(stat_path(path), buf) : -1;
}

int lstat(const char *path, struct stat *buf)
{
    int (*real)(const char *, struct stat *) = next("lstat", NULL);
    return real ? real(stat_path(path), buf) : -1;
}

int lstat64(const char *path, struct stat64 *buf)
{
    int (*real)(const char *, struct stat64 *) = next("lstat64", NULL);
    return real ? real(stat_path(path), buf) : -1;
}

int fstatat(int dirfd, const char *path, struct stat *buf, int flags)
{
    int (*real)(int, const char *, struct stat *, int) = next("fstatat", NULL);
    return real ? real(dirfd, stat_path_at(path), buf, flags) : -1;
}

int fstatat64(int dirfd, const char *path, struct stat64 *buf, int flags)
{
    int (*real)(int, const char *, struct stat64 *, int) = next("fstatat64", NULL);
    return real ? real(dirfd, stat_path_at(path), buf, flags) : -1;
}

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf)
{
    int (*real)(int, const char *, int, unsigned int, struct statx *) = next("statx", NULL);
    return real ? real(dirfd, stat_path_at(path), flags, mask, buf) : -1;
}

int access(const char *path, int mode)
{
    int (*real)(const char *, int) = next("access", NULL);
    return real ? real(stat_path(path), mode) : -1;
}

int faccessat(int dirfd, const char *path, int mode, int flags)
{
    int (*real)(int, const char *, int, int) = next("faccessat", NULL);
    return real ? real(dirfd, stat_path_at(path), mode, flags) : -1;
}

/* Programs built against a C library before 2.33 call these instead of stat(). */
int __xstat(int ver, const char *path, struct stat *buf)
{
    int (*real)(int, const char *, struct stat *) = next("__xstat", "GLIBC_2.2.5");
    return real ? real(ver, stat_path(path), buf) : -1;
}

int __xstat64(int ver, const char *path, struct stat64 *buf)
{
    int (*real)(int, const char *, struct stat64 *) = next("__xstat64", "GLIBC_2.2.5");
    return real ? real(ver, stat_path(path), buf) : -1;
}

int __lxstat(int ver, const char *path, struct stat *buf)
{
    int (*real)(int, const char *, struct stat *) = next("__lxstat", "GLIBC_2.2.5");
    return real ? real(ver, stat_path(path), buf) : -1;
}

int __lxstat64(int ver, const char *path, struct stat64 *buf)
{
    int (*real)(int, const char *, struct stat64 *) = next("__lxstat64", "GLIBC_2.2.5");
    return real ? real(ver, stat_path(path), buf) : -1;
}

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, mode);
    int (*real)(const char *, int, ...) = next("open", NULL);
    const char *p = open_path(path, flags);
    return real && p ? real(p, flags, mode) : -1;
}

int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, mode);
    int (*real)(const char *, int, ...) = next("open64", NULL);
    const char *p = open_path(path, flags);
    return real && p ? real(p, flags, mode) : -1;
}

int openat(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, mode);
    int (*real)(int, const char *, int, ...) = next("openat", NULL);
    const char *p = open_path_at(path, flags);
    return real && p ? real(dirfd, p, flags, mode) : -1;
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    OPEN_MODE(flags, mode);
    int (*real)(int, const char *, int, ...) = next("openat64", NULL);
    const char *p = open_path_at(path, flags);
    return real && p ? real(dirfd, p, flags, mode) : -1;
}

/* What _FORTIFY_SOURCE builds call for open() without a mode. */
int __open_2(const char *path, int flags)
{
    int (*real)(const char *, int) = next("__open_2", NULL);
    const char *p = open_path(path, flags);
    return real && p ? real(p, flags) : -1;
}

int __open64_2(const char *path, int flags)
{
    int (*real)(const char *, int) = next("__open64_2", NULL);
    const char *p = open_path(path, flags);
    return real && p ? real(p, flags) : -1;
}

FILE *fopen(const char *path, const char *mode)
{
    FILE *(*real)(const char *, const char *) = next("fopen", NULL);
    const char *p = open_path(path, mode != NULL && mode[0] == 'r' && strchr(mode, '+') == NULL
                                           ? O_RDONLY
                                           : O_RDWR);
    return real && p ? real(p, mode) : NULL;
}

FILE *fopen64(const char *path, const char *mode)
{
    FILE *(*real)(const char *, const char *) = next("fopen64", NULL);
    const char *p = open_path(path, mode != NULL && mode[0] == 'r' && strchr(mode, '+') == NULL
                                           ? O_RDONLY
                                           : O_RDWR);
    return real && p ? real(p, mode) : NULL;
}

DIR *opendir(const char *path)
{
    DIR *(*real)(const char *) = next("opendir", NULL);
    return real ? real(sysfs_path(path)) : NULL;
}

ssize_t readlink(const char *path, char *buf, size_t size)
{
    ssize_t (*real)(const char *, char *, size_t) = next("readlink", NULL);
    return real ? real(sysfs_path(path), buf, size) : -1;
}

/* ls -l asks for a file's ACL and security label. */
ssize_t getxattr(const char *path, const char *name, void *value, size_t size)
{
    ssize_t (*real)(const char *, const char *, void *, size_t) = next("getxattr", NULL);
    return real ? real(sysfs_path(path), name, value, size) : -1;
}

ssize_t lgetxattr(const char *path, const char *name, void *value, size_t size)
{
    ssize_t (*real)(const char *, const char *, void *, size_t) = next("lgetxattr", NULL);
    return real ? real(sysfs_path(path), name, value, size) : -1;
}

ssize_t listxattr(const char *path, char *list, size_t size)
{
    ssize_t (*real)(const char *, char *, size_t) = next("listxattr", NULL);
    return real ? real(sysfs_path(path), list, size) : -1;
}

ssize_t llistxattr(const char *path, char *list, size_t size)
{
    ssize_t (*real)(const char *, char *, size_t) = next("llistxattr", NULL);
    return real ? real(sysfs_path(path), list, size) : -1;
}
