"""Deterministic payloads: stale or misplaced bytes never match."""
import hashlib

import numpy as np


def pattern(nbytes, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()


def sha(data):
    return hashlib.sha256(bytes(data)).hexdigest()
