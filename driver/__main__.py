"""``python -m graphir.driver``: the ``graphir-opt`` command line."""

from graphir.driver.opt import main

main()
