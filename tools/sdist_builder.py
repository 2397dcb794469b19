"""Builds mt_asyncio's source archive (//pyext:sdist), reproducibly.

Packs every package's files (the `sdist_files` filegroups; the offline
shims come from their own repositories, `external/NAME/...` in the build)
under `mt_asyncio-VERSION/`, with the core metadata as PKG-INFO. The
archive's pyproject.toml names tools/pep517_backend.py, so `pip install`
of it builds the wheel with Bazel. Fixed timestamps, owners and order: the
same sources give the same bytes.
"""

import argparse
import gzip
import io
import os
import stat
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wheel_builder  # noqa: E402

_MTIME = 315532800  # 1980-01-01, as the wheel's entries


def _shim(text):
    name, sep, dest = text.partition("=")
    if not sep or not name or not dest:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    return name, dest


def archive_name(path, shims):
    """Where a build input goes in the archive; anything that is not a
    source file of this project or its shims is refused."""
    if path.startswith("external/"):
        repo, _, rest = path[len("external/"):].partition("/")
        if repo not in shims:
            raise SystemExit(f"sdist_builder: {path} is from an unexpected repository")
        return f"{shims[repo]}/{rest}"
    if path.startswith(("bazel-out/", "/")):
        raise SystemExit(f"sdist_builder: {path} is not a source file")
    return path


def build(out, version, readme, shims, files):
    root = f"mt_asyncio-{version}"
    entries = {}
    for path in files:
        name = archive_name(path, shims)
        if name in entries:
            raise SystemExit(f"sdist_builder: {name} twice")
        entries[name] = path
    if "pyproject.toml" not in entries:
        raise SystemExit("sdist_builder: pyproject.toml is missing")
    generated = {"PKG-INFO": wheel_builder.metadata(version, readme).encode()}

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(name, data, executable):
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            info.mtime = _MTIME
            info.mode = 0o755 if executable else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
        for name, data in sorted(generated.items()):
            add(name, data, False)
        for name in sorted(entries):
            path = entries[name]
            with open(path, "rb") as f:
                data = f.read()
            add(name, data, bool(os.stat(path).st_mode & stat.S_IXUSR))
    with open(out, "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
            gz.write(buffer.getvalue())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--readme", required=True)
    parser.add_argument("--shim", type=_shim, action="append", default=[],
                        help="NAME=PATH: repository NAME's files go under PATH")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    build(args.out, args.version, args.readme, dict(args.shim), args.files)


if __name__ == "__main__":
    main()
