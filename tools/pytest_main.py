"""Entry point of every py_pytest target: runs pytest on the files given.

Verbose, with skip reasons printed, and no cache folder in the runfiles.
pytest's exit status is the test's (5, "no tests collected", fails it).
"""

import sys

import pytest

if __name__ == "__main__":
    sys.exit(pytest.main([*sys.argv[1:], "-v", "-rs", "-p", "no:cacheprovider"]))
