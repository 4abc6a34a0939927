"""Sizes as the benchmarks write them (8, 64K, 1M, ranges 8:64M): python/hmc/_units.py, loaded from its
file so that compare.py, report.py and the other scripts need no built hmc package on their path."""
import importlib.util
import os

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "hmc", "_units.py")
_spec = importlib.util.spec_from_file_location("hmc_units", _PATH)
_units = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_units)

parse_size, parse_sizes, human = _units.parse_size, _units.parse_sizes, _units.human
