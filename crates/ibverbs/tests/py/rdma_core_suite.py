"""Runs rdma-core's own test suite (what Debian's python3-pyverbs ships in
/usr/share/doc/rdma-core/tests) against the libibverbs the environment points at.

rdma-core's tests are the conformance suite its providers are held to: they connect QPs on
one device and check completions, statuses and errnos of the verbs. The suite is run as
shipped, with two changes that concern the host, not softrdma:

- the vendor test modules (test_mlx5_*, test_efa*) are left out, and the vendor extension
  modules of pyverbs are replaced by stand-ins before anything imports them: their shared
  objects link the real libmlx5/libefa, which need libibverbs' private ABI;
- it runs with `--gid 0`, so every test uses that index: the device's address (the
  IPv4-mapped GID for an IPv4 address), as is index 1, rxe's index of it. GID index 0 is
  also pyverbs' own default.

Prints unittest's report and, last, one line `rdma-core suite: ran N, ok N, skipped N,
failed N`; exits 0 only if nothing failed.

Usage: python3 rdma_core_suite.py [DEV] [unittest args...]   (DEV defaults to softrdma0)
"""

import gzip
import os
import shutil
import sys
import tempfile
import types
import unittest

SHIPPED = '/usr/share/doc/rdma-core/tests'
VENDOR_MODULES = [
    'pyverbs.providers.mlx5', 'pyverbs.providers.mlx5.mlx5dv',
    'pyverbs.providers.mlx5.mlx5_enums', 'pyverbs.providers.mlx5.dr_domain',
    'pyverbs.providers.mlx5.dr_table', 'pyverbs.providers.mlx5.dr_matcher',
    'pyverbs.providers.mlx5.dr_rule', 'pyverbs.providers.mlx5.dr_action',
    'pyverbs.providers.mlx5.mlx5dv_flow', 'pyverbs.providers.mlx5.mlx5dv_objects',
    'pyverbs.providers.mlx5.mlx5dv_sched', 'pyverbs.providers.mlx5.mlx5dv_crypto',
    'pyverbs.providers.mlx5.mlx5dv_mkey', 'pyverbs.providers.mlx5.mlx5dv_dmabuf',
    'pyverbs.providers.mlx5.mlx5_vfio', 'pyverbs.providers.efa',
    'pyverbs.providers.efa.efadv', 'pyverbs.providers.efa.efa_enums',
]


class _StandInMeta(type):
    """Class attributes of a stand-in (enum values, constants) read as 0."""

    def __getattr__(cls, name):
        if name.startswith('__'):
            raise AttributeError(name)
        return 0


class _StandIn(metaclass=_StandInMeta):
    """What a vendor class becomes: defining subclasses works, using one does not."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError('vendor provider module not available')


def _stand_in_module(name):
    module = types.ModuleType(name)
    module.__path__ = []

    def attribute(attr):
        if attr.startswith('__'):
            raise AttributeError(attr)
        if f'{name}.{attr}' in sys.modules:
            return sys.modules[f'{name}.{attr}']
        if attr.upper() == attr:
            return 0
        return _StandInMeta(attr, (_StandIn,), {})

    module.__getattr__ = attribute
    return module


def _copy_suite(into):
    """The shipped tests, decompressed, without the vendor test modules."""
    tests = os.path.join(into, 'tests')
    os.mkdir(tests)
    for entry in sorted(os.listdir(SHIPPED)):
        name = entry[:-3] if entry.endswith('.gz') else entry
        if name.startswith(('test_mlx5_', 'test_efa')):
            continue
        src = os.path.join(SHIPPED, entry)
        if entry.endswith('.gz'):
            with gzip.open(src, 'rb') as f, open(os.path.join(tests, name), 'wb') as out:
                shutil.copyfileobj(f, out)
        elif os.path.isfile(src):
            shutil.copy(src, os.path.join(tests, name))
    return tests


def main():
    if not os.path.isdir(SHIPPED):
        print(f'{SHIPPED} is missing: apt-get install python3-pyverbs')
        return 2
    dev = sys.argv[1] if len(sys.argv) > 1 else 'softrdma0'
    import pyverbs.providers  # the real package: the stand-ins go under it
    for name in VENDOR_MODULES:
        sys.modules[name] = _stand_in_module(name)
    with tempfile.TemporaryDirectory(prefix='rdma-core-tests.') as tmp:
        tests = _copy_suite(tmp)
        sys.path[:0] = [tests, tmp]
        from args_parser import parser
        sys.argv = [sys.argv[0], '--dev', dev, '--gid', '0'] + sys.argv[2:]
        parser.parse_args()
        import importlib
        suite_module = importlib.import_module('tests')
        program = unittest.main(module=suite_module, exit=False, verbosity=2)
        r = program.result
        failed = len(r.failures) + len(r.errors) + len(r.unexpectedSuccesses)
        skipped = len(r.skipped)
        print(f'rdma-core suite: ran {r.testsRun}, ok {r.testsRun - failed - skipped}, '
              f'skipped {skipped}, failed {failed}')
        return 0 if failed == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
