"""cc_grpc_proto: C++ messages and gRPC stubs of one .proto file, generated
with Debian's protoc and grpc_cpp_plugin (see @system_libs)."""

def cc_grpc_proto(name, proto, deps = []):
    """`proto` lies under proto/ in this package, e.g.
    "proto/mt/control/v1/control.proto"; headers are included as
    "mt/control/v1/control.grpc.pb.h"."""
    stem = proto[:-len(".proto")]
    outs = [stem + suffix for suffix in (".pb.h", ".pb.cc", ".grpc.pb.h", ".grpc.pb.cc")]
    native.genrule(
        name = name + "_gen",
        srcs = [proto],
        outs = outs,
        cmd = " ".join([
            "$(location @system_libs//:protoc)",
            "--proto_path=%s/proto" % native.package_name(),
            "--cpp_out=$(GENDIR)/%s/proto" % native.package_name(),
            "--grpc_out=$(GENDIR)/%s/proto" % native.package_name(),
            "--plugin=protoc-gen-grpc=$(location @system_libs//:grpc_cpp_plugin)",
            "$(location %s)" % proto,
        ]),
        tools = [
            "@system_libs//:grpc_cpp_plugin",
            "@system_libs//:protoc",
        ],
    )
    native.cc_library(
        name = name,
        srcs = [f for f in outs if f.endswith(".cc")],
        hdrs = [f for f in outs if f.endswith(".h")],
        copts = ["-Wno-unused-parameter"],
        includes = ["proto"],
        deps = ["@system_libs//:grpcpp"] + deps,
    )
