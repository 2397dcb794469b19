"""The source archive's pieces: each package names its own files.

//pyext:sdist packs every package's `sdist_files`; a glob stops at
subpackages, so each package lists itself (as Bazel's own distribution
archive does).
"""

_NOT_SOURCE = ["**/__pycache__/**", "**/*.pyc", "**/.pytest_cache/**"]

def sdist_files(srcs = None):
    """Declares :sdist_files, this package's files (srcs, or all of them)."""
    native.filegroup(
        name = "sdist_files",
        srcs = srcs if srcs != None else native.glob(["**"], exclude = _NOT_SOURCE),
        visibility = ["//pyext:__pkg__"],
    )
