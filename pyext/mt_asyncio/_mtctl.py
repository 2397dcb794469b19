"""The ``mtctl`` command of an installed wheel.

The wheel carries mtctl (C++, a gRPC client) as ``mt_asyncio/bin/mtctl``,
where auditwheel points its RPATH at the libraries the wheel bundles; this
console-script entry point replaces the Python process with it, so ``mtctl``
on a venv's PATH works wherever the venv lives. In a source checkout run
``bazel run //control:mtctl`` instead.
"""

import os
import sys


def binary_path():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "mtctl")


def main():
    path = binary_path()
    if not os.access(path, os.X_OK):
        sys.stderr.write(f"mtctl: {path} is missing: this mt_asyncio was not "
                         "installed from its wheel (in a checkout: "
                         "bazel run //control:mtctl -- ...)\n")
        return 2
    os.execv(path, ["mtctl", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
