#!/usr/bin/env python3
"""Writes the vendor stand-ins, providers/{mlx5,efa}.{c,map}, from the system's libraries and
headers: every function and version node rdma-core's libmlx5.so.1 and libefa.so.1 export
(`objdump -T`), each function answering "not this vendor's device" by its return type as the
header declares it (pointers NULL, int EOPNOTSUPP, ssize_t -1, all with errno EOPNOTSUPP; bool
false; void nothing). Programs linked BIND_NOW against the vendor library (UCX's libuct_ib.so,
pyverbs' vendor modules) load only when every symbol and version node is there.

    python3 crates/ibverbs/providers/gen.py      # needs Debian's ibverbs-providers, libibverbs-dev

The output is committed; tests/providers.rs checks it against the system libraries.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LIBDIR = "/usr/lib/x86_64-linux-gnu"

VENDORS = {
    "mlx5": ("libmlx5.so.1", "/usr/include/infiniband/mlx5dv.h", "MLX5",
             "the mlx5 provider's direct-verbs library (perftest and UCX link it)"),
    "efa": ("libefa.so.1", "/usr/include/infiniband/efadv.h", "EFA",
            "the EFA provider's direct-verbs library (perftest links it)"),
}


def exports(lib):
    """(function names by the version node that is their default, the older versions of
    functions that have several — (name, node) —, version nodes in order) of `lib`."""
    out = subprocess.run(["objdump", "-T", lib], capture_output=True, text=True, check=True).stdout
    funcs, older, nodes = {}, [], set()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 7 or "*UND*" in line:
            continue
        ver, name = f[-2].strip("()"), f[-1]
        if name == ver:
            nodes.add(ver)
        elif "DF" in f and f[-2].startswith("("):
            older.append((name, ver))  # name@ver, not the default
        elif "DF" in f:
            funcs.setdefault(ver, set()).add(name)
    key = lambda v: [int(x) for x in v.split("_")[1].split(".")]
    return funcs, sorted(older), sorted(nodes | set(funcs), key=key)


def return_types(header, names):
    text = re.sub(r"/\*.*?\*/", "", open(header).read(), flags=re.S)
    out = {}
    for n in names:
        m = re.search(r"([A-Za-z_][\w \t\n*]*?)\b" + re.escape(n) + r"\s*\(", text)
        if not m:
            sys.exit(f"{n}: no declaration in {header}")
        out[n] = " ".join(m.group(1).replace("*", " * ").split())
    return out


def stub(name, ret):
    if "*" in ret:
        return f"void *{name}(void) {{ errno = EOPNOTSUPP; return NULL; }}"
    body = {
        "int": "errno = EOPNOTSUPP; return EOPNOTSUPP;",
        "ssize_t": "errno = EOPNOTSUPP; return -1;",
        "bool": "return false;",
        "void": "",
    }.get(ret)
    if body is None:
        sys.exit(f"{name}: return type {ret!r} has no stand-in answer")
    return f"{ret} {name}(void) {{ {body} }}".replace("{  }", "{ }")


def main():
    for vendor, (lib, header, prefix, what) in VENDORS.items():
        funcs, older, nodes = exports(os.path.join(LIBDIR, lib))
        names = sorted(n for s in funcs.values() for n in s)
        rets = return_types(header, names)
        with open(os.path.join(HERE, f"{vendor}.c"), "w") as c:
            c.write(f"""/* softrdma's stand-in for {lib}, {what}.
 * Written by gen.py from rdma-core 44's library and header: do not edit by hand.
 *
 * Through softrdma there is no {prefix.lower()} device, so every entry point answers truthfully
 * "not this vendor's device": constructors return NULL, commands and queries EOPNOTSUPP (or -1),
 * all with errno EOPNOTSUPP; {prefix.lower()}dv_is_supported() is false where it exists. Programs
 * then take their generic verbs path. No argument is ever read, so none is declared: under the
 * System V calling convention a callee that takes none ignores what the caller passes. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

""")
            versioned = {n for n, _ in older}
            default_node = {n: v for v, ns in funcs.items() for n in ns}
            for n in names:
                if n in versioned:
                    continue
                c.write(stub(n, rets[n]) + "\n")
            # A symbol with several versions: one definition each, bound to its node with
            # .symver (name@@node for the default, name@node for the older ones).
            for n in sorted(versioned):
                for v, at in [(default_node[n], "@@")] + [(o, "@") for m, o in older if m == n]:
                    alias = f"{n}__{v.replace('.', '_')}"
                    c.write(stub(alias, rets[n]) + "\n")
                    c.write(f'__asm__(".symver {alias}, {n}{at}{v}");\n')
        with open(os.path.join(HERE, f"{vendor}.map"), "w") as m:
            m.write(f"/* The version nodes of rdma-core 44's {lib} and its symbols (gen.py). */\n")
            prev = None
            for v in nodes:
                # An older version is named in its node too, as glibc's maps do: the
                # .symver above binds it there, the node's global list exports it.
                syms = sorted(set(funcs.get(v, ())) | {n for n, o in older if o == v})
                glob = f" global: {'; '.join(syms)};" if syms else ""
                local = " local: *;" if prev is None else ""
                tail = f" {prev}" if prev else ""
                m.write(f"{v} {{{glob}{local} }}{tail};\n")
                prev = v
        print(f"{vendor}: {len(names)} functions, {len(nodes)} version nodes")


if __name__ == "__main__":
    main()
