"""The installed command lines: graphir-bench, graphir-tune, the model zoo, the demo, run_tf, calibrate_comm.

Developer tools (benchmarks, generators, fuzzing, doc generators) live in ``devtools/``, outside the package.
"""
