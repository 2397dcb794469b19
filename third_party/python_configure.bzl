"""Repository rule exposing the chosen CPython to the build.

The interpreter is picked by tools/find_python.sh ($MT_PYTHON first, then the
first free-threaded, then the first GIL CPython >= 3.13). The generated
repository holds:

  //:python_headers   cc_library with the interpreter's C headers
  //:pybind11         cc_library with pybind11's headers from that interpreter
  //:toolchain        Python toolchain, so py_binary/py_test run on it
  //:defs.bzl         PYTHON_BIN, PYTHON_VERSION, FREE_THREADED, EXT_SUFFIX,
                      PLAIN_WHEEL_TAG (the build's own platform),
                      MANYLINUX_PLATFORM (this machine's glibc policy) and
                      WHEEL_TAG (the repaired wheel's tag) for rules that
                      build the extension and wheels
"""

_PROBE = """
import json, os, platform, sys, sysconfig
try:
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
except (ValueError, OSError):
    libc = ""
info = {
    "executable": sys.executable,
    "version": "%d.%d.%d" % sys.version_info[:3],
    "include": sysconfig.get_paths()["include"],
    "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
    "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    "abi_flags": sysconfig.get_config_var("ABIFLAGS") or "",
    "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
    "nodot": "%d%d" % sys.version_info[:2],
    "libc": libc,
    "machine": platform.machine(),
}
try:
    import pybind11
    info["pybind11_include"] = pybind11.get_include()
    info["pybind11_version"] = pybind11.__version__
except ImportError:
    info["pybind11_include"] = None
    info["pybind11_version"] = None
print(json.dumps(info))
"""

def _fail_setup(msg):
    fail("%s\nRun tools/setup.sh (see README.md) and build again." % msg)

def _python_configure_impl(ctx):
    finder = ctx.path(ctx.attr._finder)
    found = ctx.execute(["bash", str(finder)], quiet = True)
    if found.return_code != 0:
        _fail_setup("python_configure: " + found.stderr.strip())
    python_bin = found.stdout.strip().split(" ")[0]

    probe = ctx.execute([python_bin, "-c", _PROBE], quiet = True)
    if probe.return_code != 0:
        _fail_setup("python_configure: probing %s failed: %s" % (python_bin, probe.stderr))
    info = json.decode(probe.stdout)
    if not info["pybind11_include"]:
        _fail_setup("python_configure: pybind11 is not installed in %s" % python_bin)
    major = int(info["pybind11_version"].split(".")[0])
    if major < 3:
        _fail_setup("python_configure: pybind11 %s in %s is older than 3.0" %
                    (info["pybind11_version"], python_bin))

    ctx.symlink(info["include"], "include")
    ctx.symlink(info["pybind11_include"], "pybind11_include")

    abi = "cp" + info["nodot"] + ("t" if info["free_threaded"] else "")
    plain_wheel_tag = "cp%s-%s-%s" % (info["nodot"], abi, info["platform"])

    # The repaired wheel claims the manylinux policy of this machine's glibc
    # (PEP 600: manylinux_X_Y runs on any glibc >= X.Y), so its file name is
    # known before auditwheel runs. Without glibc there is no such policy:
    # MANYLINUX_PLATFORM is empty and //pyext:wheel says so if built.
    libc = info["libc"].split(" ")
    if len(libc) == 2 and libc[0] == "glibc":
        glibc = libc[1].split(".")
        manylinux = "manylinux_%s_%s_%s" % (glibc[0], glibc[1], info["machine"])
        wheel_tag = "cp%s-%s-%s" % (info["nodot"], abi, manylinux)
    else:
        manylinux = ""
        wheel_tag = plain_wheel_tag

    ctx.file("BUILD", """\
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

cc_library(
    name = "python_headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
)

cc_library(
    name = "pybind11",
    hdrs = glob(["pybind11_include/**/*.h"]),
    includes = ["pybind11_include"],
    deps = [":python_headers"],
)

py_runtime(
    name = "py3_runtime",
    interpreter_path = "{python}",
    python_version = "PY3",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":py3_runtime",
)

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)

exports_files(["interpreter.txt"])
""".format(python = python_bin))

    ctx.file("defs.bzl", """\
\"\"\"Facts about the interpreter chosen by python_configure.\"\"\"

PYTHON_BIN = "{python}"
PYTHON_VERSION = "{version}"
FREE_THREADED = {ft}
EXT_SUFFIX = "{ext}"
PLAIN_WHEEL_TAG = "{plain_tag}"
MANYLINUX_PLATFORM = "{manylinux}"
WHEEL_TAG = "{tag}"
""".format(
        python = python_bin,
        version = info["version"],
        ft = "True" if info["free_threaded"] else "False",
        ext = info["ext_suffix"],
        plain_tag = plain_wheel_tag,
        manylinux = manylinux,
        tag = wheel_tag,
    ))

    summary = "%s (CPython %s, %s, pybind11 %s)" % (
        python_bin,
        info["version"],
        "free-threaded" if info["free_threaded"] else "GIL build",
        info["pybind11_version"],
    )
    ctx.file("interpreter.txt", summary + "\n")
    print("mt_asyncio builds against " + summary)

python_configure = repository_rule(
    implementation = _python_configure_impl,
    attrs = {
        "_finder": attr.label(default = Label("//tools:find_python.sh")),
    },
    configure = True,  # `bazel sync --configure` re-runs it.
    environ = ["MT_PYTHON", "PATH", "PYENV_ROOT", "HOME"],
    local = True,
)
