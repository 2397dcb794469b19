"""Forwards rules_proto's public names to Bazel's native proto rules."""

proto_lang_toolchain = native.proto_lang_toolchain
proto_library = native.proto_library
