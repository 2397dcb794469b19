"""Builds mt_asyncio's wheel from Bazel outputs (PEP 427, reproducible).

Used by //pyext:wheel; runs on the interpreter the build chose. Every entry
gets a fixed timestamp and mode so the same inputs give the same bytes.
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


def _metadata(version, readme):
    with open(readme, encoding="utf-8") as f:
        description = f.read()
    return (
        "Metadata-Version: 2.1\n"
        "Name: mt_asyncio\n"
        f"Version: {version}\n"
        "Summary: A parallel asyncio runtime for free-threaded CPython\n"
        "Requires-Python: >=3.13\n"
        "License: Apache-2.0\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + description
    )


def build(args):
    dist = f"mt_asyncio-{args.version}"
    entries = []  # (name in wheel, bytes, executable)
    for src in args.py:
        with open(src, "rb") as f:
            entries.append((f"mt_asyncio/{os.path.basename(src)}", f.read(), False))
    for dest, src in args.file:
        with open(src, "rb") as f:
            entries.append((dest, f.read(), True))
    for name, src in args.script:
        with open(src, "rb") as f:
            entries.append((f"{dist}.data/scripts/{name}", f.read(), True))
    entries.sort()
    names = [e[0] for e in entries]
    if len(set(names)) != len(names):
        raise SystemExit(f"duplicate wheel entries: {names}")

    info = f"{dist}.dist-info"
    meta = [
        (f"{info}/METADATA", _metadata(args.version, args.readme).encode()),
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
    parser.add_argument("--py", nargs="+", default=[], help="package .py files")
    parser.add_argument("--file", type=_pair, action="append", default=[],
                        help="DEST=SRC: a binary placed at DEST in the wheel")
    parser.add_argument("--script", type=_pair, action="append", default=[],
                        help="NAME=SRC: an executable installed on PATH")
    build(parser.parse_args())


if __name__ == "__main__":
    main()
