"""py_pytest: a py_test that runs its sources with pytest on the chosen interpreter."""

def py_pytest(name, srcs, deps = [], data = [], size = "small", test_files = None, **kwargs):
    """`test_files`: the sources pytest collects (default: all of `srcs`)."""
    native.py_test(
        name = name,
        srcs = srcs + ["//tools:pytest_main.py"],
        main = "//tools:pytest_main.py",
        args = ["$(rootpath %s)" % src for src in (test_files or srcs)],
        data = data,
        deps = deps,
        size = size,
        python_version = "PY3",
        **kwargs
    )
