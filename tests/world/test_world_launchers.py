"""env:// under the launchers clusters use: each launcher's variables, their precedence (explicit
arguments, torchrun's RANK/WORLD_SIZE, Open MPI's, Slurm's), every malformed value, a real
`mpirun -np 2` (skipped with the reason without mpirun) and the environment srun gives its tasks."""
import asyncio
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import hmc
from hmc.world import _launcher_rank_size
from ranks import finish, report

HERE = pathlib.Path(__file__).parent
PYTHON = "/usr/bin/python3"  # Debian's interpreter: it sees python3-numpy/torch
CHECKS = 17                  # "OK" lines of world_peer.py's collectives scenario without torch
KEY = "python-world-test"
OMPI = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
SLURM = ("SLURM_PROCID", "SLURM_NTASKS")
# What a launcher around pytest (torchrun, mpirun, an srun job) may have set: each test sets its own.
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_USE_AGENT_STORE", "HMC_STORE_PORT")
LAUNCH_PREFIXES = ("OMPI_", "SLURM_", "PMIX_")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_free(environ):
    return {k: v for k, v in environ.items() if k not in LAUNCH_VARS and not k.startswith(LAUNCH_PREFIXES)}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name in LAUNCH_VARS or name.startswith(LAUNCH_PREFIXES):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HMC_AUTH_KEY", KEY)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))


def setenv(monkeypatch, names, rank, size):
    monkeypatch.setenv(names[0], rank)
    monkeypatch.setenv(names[1], size)


def one_rank_world(monkeypatch, **args):
    """A world of one formed in this process from env:// (rank 0 hosts the store on MASTER_PORT)."""
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    with hmc.init_world("env://", ucx_tls="shm", timeout=10, **args) as w:
        assert (w.all_reduce(np.arange(4)) == np.arange(4)).all()
        w.barrier()
        return w.rank, w.size


@pytest.mark.parametrize("names,launcher", [(OMPI, "Open MPI"), (SLURM, "Slurm")])
def test_each_launchers_variables_give_rank_and_size(monkeypatch, names, launcher):
    assert _launcher_rank_size() is None
    setenv(monkeypatch, names, "3", "4")
    assert _launcher_rank_size() == (3, 4, launcher)
    setenv(monkeypatch, names, "0", "1")
    assert one_rank_world(monkeypatch) == (0, 1)


def test_precedence_is_arguments_then_torchrun_then_open_mpi_then_slurm(monkeypatch):
    setenv(monkeypatch, SLURM, "2", "5")
    setenv(monkeypatch, OMPI, "1", "3")
    assert _launcher_rank_size() == (1, 3, "Open MPI")
    setenv(monkeypatch, ("RANK", "WORLD_SIZE"), "0", "1")
    assert _launcher_rank_size() is None
    assert one_rank_world(monkeypatch) == (0, 1)  # torchrun's 0 of 1, not Open MPI's 1 of 3
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    setenv(monkeypatch, OMPI, "0", "1")
    assert one_rank_world(monkeypatch) == (0, 1)  # Open MPI's, not Slurm's 2 of 5
    monkeypatch.delenv(OMPI[0])
    monkeypatch.delenv(OMPI[1])
    setenv(monkeypatch, SLURM, "0", "1")
    assert one_rank_world(monkeypatch, world_size=1, rank=0) == (0, 1)  # explicit arguments that agree

    async def main():
        async with hmc.AsyncWorld("env://", ucx_tls="shm", timeout=10) as w:
            assert (await w.all_reduce(np.ones(3), op="max") == 1).all()
            return w.rank, w.size

    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    assert asyncio.run(main()) == (0, 1)


@pytest.mark.parametrize("names,launcher", [(OMPI, "Open MPI"), (SLURM, "Slurm")])
def test_explicit_arguments_that_disagree_are_refused(monkeypatch, names, launcher):
    setenv(monkeypatch, names, "1", "2")
    with pytest.raises(hmc.InvalidArgumentError, match=f"world_size=3 differs from {launcher}'s 2 ranks"):
        hmc.init_world("env://", world_size=3)
    with pytest.raises(hmc.InvalidArgumentError, match=f"rank=0 differs from {launcher}'s rank 1"):
        hmc.init_world("env://", world_size=2, rank=0)
    with pytest.raises(hmc.InvalidArgumentError, match=f"rank=0 differs from {launcher}'s rank 1"):
        asyncio.run(hmc.init_async_world("env://", rank=0))


MALFORMED = [  # (rank, size, the variable the error names: 0 rank, 1 size)
    ("x", "2", 0), ("-1", "2", 0), (" 1", "2", 0), ("1.0", "2", 0), ("1_0", "20", 0), ("", "2", 0),
    ("0", "two", 1), ("0", "-2", 1), ("0", "", 1), ("2", "2", 0), ("5", "2", 0), ("0", "0", 0),
]


@pytest.mark.parametrize("names,launcher", [(OMPI, "Open MPI"), (SLURM, "Slurm")])
@pytest.mark.parametrize("rank,size,bad", MALFORMED)
def test_malformed_variables_are_invalid_config_naming_them(monkeypatch, names, launcher, rank, size, bad):
    setenv(monkeypatch, names, rank, size)
    with pytest.raises(hmc.InvalidConfigError, match=f"{names[bad]}=.*{launcher}"):
        hmc.init_world("env://")
    with pytest.raises(hmc.InvalidConfigError, match=names[bad]):
        asyncio.run(hmc.init_async_world("env://"))


def test_without_any_launcher_env_asks_for_world_size():
    with pytest.raises(hmc.InvalidArgumentError, match="WORLD_SIZE"):
        hmc.init_world("env://")


def child_env(extra):
    env = launcher_free(os.environ)
    env.update(PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]), HMC_AUTH_KEY=KEY, **extra)
    return env


def test_mpirun_runs_a_world_of_two():
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not on PATH (Debian: apt-get install openmpi-bin)")
    out = tempfile.mkdtemp(prefix="hmc-mpirun-")
    env = child_env({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
    # --allow-run-as-root: CI containers run as root, which mpirun refuses otherwise; --mca plm isolated:
    # start the ranks here, with no ssh (a container may have none) and no srun (pytest in a Slurm job);
    # --oversubscribe: 2 ranks on a 1-core machine; --bind-to none: the ranks' threads may use any core;
    # --output-filename: one stdout per rank, not both interleaved; -x: what a rank on another host needs.
    # By name: run by its full path, mpirun takes that path's parent as a --prefix for its daemons.
    cmd = ["mpirun", "--allow-run-as-root", "--mca", "plm", "isolated", "--oversubscribe", "--bind-to", "none",
           "-np", "2", "--output-filename", out,
           "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "PYTHONPATH", "-x", "HMC_AUTH_KEY",
           PYTHON, str(HERE / "world_peer.py"), "env://", 0, "auto", "blocking", "shm", "collectives"]
    proc = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        try:
            log, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.terminate()  # mpirun passes SIGTERM on to its ranks; SIGKILL would orphan them
            try:
                log, err = proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                log, err = proc.communicate()
            pytest.fail(f"mpirun ran past 120 s:\n{log}\n{err}")
        why = f"\n--- mpirun exited with {proc.returncode} ---\n{log}\n{err}"
        for r in range(2):
            path = pathlib.Path(out, "1", f"rank.{r}", "stdout")  # where --output-filename puts rank r's
            assert path.exists(), f"no output of rank {r}" + why
            lines = path.read_text().splitlines()
            oks = [line for line in lines if line.startswith("OK ")]
            assert lines[:1] == [f"RANK {r}"] and len(oks) == CHECKS and lines[-1] == "DONE", "\n".join(lines) + why
        assert proc.returncode == 0, why
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_srun_style_tasks_form_a_world():
    # srun starts each task as a plain process with SLURM_PROCID and SLURM_NTASKS set: exactly this.
    port = str(free_port())
    procs = [subprocess.Popen([PYTHON, str(HERE / "world_peer.py"), "env://", "0", "auto", style, "shm", "collectives"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=child_env({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "SLURM_PROCID": str(r),
                                             "SLURM_NTASKS": "2", "SLURM_LOCALID": str(r)}))
             for r, style in enumerate(("blocking", "asyncio"))]
    for r, (lines, rc) in enumerate(finish(procs, 120)):
        oks = [line for line in lines if line.startswith("OK ")]
        assert rc == 0 and lines[0] == f"RANK {r}" and len(oks) == CHECKS and lines[-1] == "DONE", report(lines)
