"""Build step for graphir's one compiled module; the project's metadata is in pyproject.toml.

graphir/_girscan.c is the `.gir` reader's plain-line loop for the commonest node lines. It is
optional: when it cannot be compiled (no C compiler), the install goes on and the parser reads
every line in Python (the same results, slower; tests/unit/test_girscan.py says which ran).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "graphir._girscan",
            sources=["graphir/_girscan.c"],
            optional=True,
            # IEEE arithmetic as CPython's float() does it: no fused multiply-adds, no fast-math.
            extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
        )
    ]
)
