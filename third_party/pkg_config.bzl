"""Repository rule wrapping system libraries found through pkg-config.

Each entry of `libraries` maps a target name to the pkg-config modules it
needs; the generated cc_library carries their compile and link flags. Headers
live in the system include path, which the C++ toolchain already allows.
"""

def _pkg_config(ctx, flag, modules):
    result = ctx.execute(["pkg-config", flag] + modules, quiet = True)
    if result.return_code != 0:
        fail(("pkg-config could not find %s: %s\n" +
              "Run tools/setup.sh (see README.md) to install the Debian packages.") %
             (" ".join(modules), result.stderr.strip()))
    return [f for f in result.stdout.strip().split(" ") if f]

def _pkg_config_repository_impl(ctx):
    if ctx.which("pkg-config") == None:
        fail("pkg-config is not installed. Run tools/setup.sh (see README.md).")
    targets = []
    for name, modules in ctx.attr.libraries.items():
        for module in modules:
            # Checked one at a time so the message names the missing package.
            _pkg_config(ctx, "--exists", [module])
        cflags = _pkg_config(ctx, "--cflags", modules)
        libs = _pkg_config(ctx, "--libs", modules)
        targets.append("""\
cc_library(
    name = "{name}",
    copts = {cflags},
    linkopts = {libs},
)
""".format(name = name, cflags = repr(cflags), libs = repr(libs)))

    tools = []
    for name, binary in ctx.attr.tools.items():
        path = ctx.which(binary)
        if path == None:
            fail("%s is not installed. Run tools/setup.sh (see README.md)." % binary)
        ctx.symlink(path, name)
        tools.append(name)

    ctx.file("BUILD", "package(default_visibility = [\"//visibility:public\"])\n\n" +
                      "exports_files(%s)\n\n" % repr(tools) + "\n".join(targets))

pkg_config_repository = repository_rule(
    implementation = _pkg_config_repository_impl,
    attrs = {
        "libraries": attr.string_list_dict(doc = "target name -> pkg-config modules"),
        "tools": attr.string_dict(doc = "target name -> executable on PATH"),
    },
    environ = ["PKG_CONFIG_PATH"],
    local = True,
)

def _boringssl_repository_impl(ctx):
    include = ctx.path(ctx.attr.include_dir)
    lib = ctx.path(ctx.attr.lib_dir)
    if not include.get_child("openssl").exists or not lib.get_child("libssl.so.0").exists:
        fail(("BoringSSL not found under %s and %s (Debian package " +
              "android-libboringssl-dev). Run tools/setup.sh (see README.md).") % (include, lib))
    ctx.symlink(include, "include")
    ctx.file("BUILD", """\
package(default_visibility = ["//visibility:public"])

# Debian ships BoringSSL for Android's tools under android/ subfolders with
# an .so.0 name and no unversioned link, so link it by path with an rpath.
cc_library(
    name = "boringssl",
    hdrs = glob(["include/openssl/*.h"]),
    includes = ["include"],
    linkopts = [
        "{lib}/libssl.so.0",
        "{lib}/libcrypto.so.0",
        "-Wl,-rpath,{lib}",
    ],
)
""".format(lib = str(lib)))

boringssl_repository = repository_rule(
    implementation = _boringssl_repository_impl,
    attrs = {
        "include_dir": attr.string(default = "/usr/include/android"),
        "lib_dir": attr.string(default = "/usr/lib/x86_64-linux-gnu/android"),
    },
    local = True,
)
