"""Builds mt_asyncio's plain wheel from Bazel outputs (PEP 427, reproducible).

Used by //pyext:wheel_plain; runs on the interpreter the build chose. Every
entry gets a fixed timestamp and mode so the same inputs give the same
bytes. The wheel it writes links the build machine's shared libraries;
tools/repair_wheel.py turns it into the manylinux wheel users install.
"""

import argparse
import base64
import hashlib
import os
import stat
import zipfile

_EPOCH = (1980, 1, 1, 0, 0, 0)


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{name},sha256={digest.decode()},{len(data)}"


def _pair(text):
    dest, sep, src = text.partition("=")
    if not sep or not dest or not src:
        raise argparse.ArgumentTypeError(f"expected DEST=SRC, got {text!r}")
    return dest, src


# The package's metadata (core metadata 2.4), shared by the wheel and the
# sdist's PKG-INFO (tools/sdist_builder.py).
SUMMARY = "A parallel asyncio runtime for free-threaded CPython"
REQUIRES_PYTHON = ">=3.13"
LICENSE_EXPRESSION = "Apache-2.0"
CLASSIFIERS = (
    "Development Status :: 3 - Alpha",
    "Framework :: AsyncIO",
    "Intended Audience :: Developers",
    "Intended Audience :: System Administrators",
    "Operating System :: POSIX :: Linux",
    "Programming Language :: C++",
    "Programming Language :: Python :: 3",
    "Programming Language :: Python :: 3 :: Only",
    "Programming Language :: Python :: 3.13",
    "Programming Language :: Python :: 3.14",
    "Programming Language :: Python :: Free Threading :: 3 - Stable",
    "Programming Language :: Python :: Implementation :: CPython",
    "Topic :: Internet",
    "Topic :: Software Development :: Libraries",
    "Topic :: System :: Networking",
)
# The project has no public home yet: PROJECT_HOME is a placeholder in the
# reserved .example domain (RFC 2606) until it has one, and every link
# follows it, so publishing means changing this one line.
PROJECT_HOME = "https://mt-asyncio.example/"
PROJECT_URLS = (
    ("Homepage", PROJECT_HOME),
    ("Documentation", PROJECT_HOME + "docs/"),
    ("Benchmarks", PROJECT_HOME + "docs/benchmarks.md"),
    ("Compatibility", PROJECT_HOME + "docs/compatibility.md"),
)
# Console scripts: name -> module:function.
ENTRY_POINTS = (("mtctl", "mt_asyncio._mtctl:main"),)


def metadata(version, readme):
    """The METADATA (or PKG-INFO) text, the README as long description."""
    with open(readme, encoding="utf-8") as f:
        description = f.read()
    lines = [
        "Metadata-Version: 2.4",
        "Name: mt_asyncio",
        f"Version: {version}",
        f"Summary: {SUMMARY}",
        f"License-Expression: {LICENSE_EXPRESSION}",
        f"Requires-Python: {REQUIRES_PYTHON}",
    ]
    lines += [f"Classifier: {c}" for c in CLASSIFIERS]
    lines += [f"Project-URL: {label}, {url}" for label, url in PROJECT_URLS]
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + description


def entry_points():
    scripts = "".join(f"{name} = {target}\n" for name, target in ENTRY_POINTS)
    return "[console_scripts]\n" + scripts


def build(args):
    dist = f"mt_asyncio-{args.version}"
    entries = []  # (name in wheel, bytes, executable)
    for src in args.py:
        # Kept at its place below the package folder (mt_asyncio/_loop/...).
        inside = src.replace(os.sep, "/").rsplit("mt_asyncio/", 1)[1]
        with open(src, "rb") as f:
            entries.append((f"mt_asyncio/{inside}", f.read(), False))
    for dest, src in args.file:
        with open(src, "rb") as f:
            entries.append((dest, f.read(), True))
    entries.sort()
    names = [e[0] for e in entries]
    if len(set(names)) != len(names):
        raise SystemExit(f"duplicate wheel entries: {names}")

    info = f"{dist}.dist-info"
    meta = [
        (f"{info}/METADATA", metadata(args.version, args.readme).encode()),
        (f"{info}/entry_points.txt", entry_points().encode()),
        (f"{info}/WHEEL", (
            "Wheel-Version: 1.0\n"
            "Generator: mt_asyncio tools/wheel_builder.py\n"
            "Root-Is-Purelib: false\n"
            f"Tag: {args.tag}\n").encode()),
        (f"{info}/top_level.txt", b"mt_asyncio\n"),
    ]
    record = [_record_line(n, d) for n, d, _ in entries]
    record += [_record_line(n, d) for n, d in meta]
    record.append(f"{info}/RECORD,,")

    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as whl:
        def add(name, data, executable=False):
            zi = zipfile.ZipInfo(name, date_time=_EPOCH)
            # pip marks a file executable only for a regular-file mode.
            zi.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(zi, data)
        for name, data, executable in entries:
            add(name, data, executable)
        for name, data in meta:
            add(name, data)
        add(f"{info}/RECORD", ("\n".join(record) + "\n").encode())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--tag", required=True, help="e.g. cp314-cp314t-linux_x86_64")
    parser.add_argument("--readme", required=True)
    parser.add_argument("--py", nargs="+", default=[], help="the package's files (.py, .pyi, py.typed), under mt_asyncio/")
    parser.add_argument("--file", type=_pair, action="append", default=[],
                        help="DEST=SRC: an executable file placed at DEST in the wheel")
    build(parser.parse_args())


if __name__ == "__main__":
    main()
