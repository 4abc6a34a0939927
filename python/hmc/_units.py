"""Sizes as the benchmarks write them (8, 64K, 1M, ranges 8:64M) and back. It imports nothing from the
package, so benchmarks/python/bench_units.py loads this file without the built extension."""
import argparse
import re

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MiB": 1 << 20, "G": 1 << 30, "GiB": 1 << 30}


def parse_size(text):
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", text.strip())
    if not m or m.group(2) not in _UNITS:
        raise argparse.ArgumentTypeError(f"size '{text}': use a number with B, K, M or G")
    return int(m.group(1)) * _UNITS[m.group(2)]


def parse_sizes(text):
    """'8,64K,1M' or a power-of-two range 'LO:HI' (as hmc_bench --sizes)."""
    if ":" in text:
        lo, hi = (parse_size(t) for t in text.split(":", 1))
        out = []
        while lo <= hi:
            out.append(lo)
            lo *= 2
        return out
    return [parse_size(t) for t in text.split(",") if t.strip()]


def human(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10}K"
    return str(n)
