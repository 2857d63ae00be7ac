"""`python -m mcsdns.controller ARGS`: the same as `mcsdns controller ARGS`."""

import runpy
import sys

sys.argv[1:1] = ["controller"]
runpy.run_module("mcsdns", run_name="__main__", alter_sys=True)
