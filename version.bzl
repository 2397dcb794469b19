"""The project's version, for every BUILD file that stamps it.

mt_asyncio/__init__.py carries the same string; //tests:control_e2e_test
checks that the control plane and the package agree.
"""

MT_ASYNCIO_VERSION = "0.1.0"
