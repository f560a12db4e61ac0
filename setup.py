"""Build step for graphir's one compiled module; the project's metadata is in pyproject.toml.

graphir/_girtext.c holds the `.gir` reader's and writer's loops for the commonest node lines. It is
optional: when it cannot be compiled (no C compiler), the install goes on and the parser and the
printer do every line in Python (the same results, slower; tests/unit/test_girtext_*.py fail).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "graphir._girtext",
            sources=["graphir/_girtext.c"],
            optional=True,
            # IEEE arithmetic as CPython's float() does it: no fused multiply-adds, no fast-math.
            extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
        )
    ]
)
