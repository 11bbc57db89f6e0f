"""Only the optional C extension lives here; all metadata is in pyproject.toml.

`optional=True`: if it fails to compile (no compiler, no Python headers) the install
still succeeds and Tidegate runs on its pure-Python record code.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tidegate.records._speedups",
            ["src/tidegate/records/_speedups.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "tidegate.records._columnar",
            ["src/tidegate/records/_columnar.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
