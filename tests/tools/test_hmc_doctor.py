"""hmc_doctor, the C++ doctor, run as users run it: its report, its JSON and exit status, the
fallbacks it names, its usage errors, and beside `python -m hmc doctor` (where the package is
built: HMC_PYTHON_PACKAGE) the same JSON keys and the same facts."""
import json
import os
import subprocess
import sys

import pytest
from rdma_sysfs import rdma_port_active

DOCTOR = os.environ.get("HMC_DOCTOR", "hmc_doctor")
PYTHON_PACKAGE = os.environ.get("HMC_PYTHON_PACKAGE")


def doctor(*args, env=None):
    return subprocess.run([DOCTOR, *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))


def report_of(*args, env=None):
    out = doctor("--json", "--size", "8M", *args, env=env)
    report = json.loads(out.stdout)
    assert out.returncode == (1 if report["problems"] else 0), (out.returncode, report)
    return report


def keys(value, path=""):
    """Every key path in a JSON value; the RDMA devices, whatever their names, as one."""
    if not isinstance(value, dict):
        return set()
    out = set()
    for k, v in value.items():
        name = f"{path}/{'<device>' if path == '/host/rdma' else k}"
        out |= {name} | keys(v, name)
    return out


def test_the_report_names_what_carried_the_self_test_and_how_fast():
    report = report_of()
    assert report["host"]["ucx"][0].isdigit(), report["host"]
    assert report["host"]["interfaces"] and "lo" in report["host"]["interfaces"]
    assert set(report["host"]["gpu_memory"]) == {"cuda", "rocm"}
    assert "CPU" in report["hmc"]["native_memory_types"]
    test = report["self_test"]
    assert test is not None and test["transports"] and test["put_bytes"] == 8 << 20, test
    assert test["connect_ms"] > 0 and test["put_64B_p50_us"] > 0 and test["put_bandwidth_GBps"] > 0, test
    text = doctor("--size", "8M")
    lines = text.stdout.rstrip().splitlines()
    assert lines[0].startswith("UCX           ") and any(line.startswith("self-test     ") for line in lines), text
    assert " 8 MiB puts at " in text.stdout
    problems = sum(line.startswith("PROBLEM       ") for line in lines)
    assert lines[-1] == (f"doctor: {problems} problem(s)" if problems else "doctor: no problems found"), lines
    assert text.returncode == (1 if problems else 0)


@pytest.mark.skipif(not PYTHON_PACKAGE, reason="the Python package is not built here (HMC_PYTHON_PACKAGE unset)")
def test_the_json_has_the_python_doctors_keys_and_facts():
    ours = report_of()
    python = subprocess.run([sys.executable, "-m", "hmc", "doctor", "--json", "--size", "8M"], capture_output=True,
                            text=True, timeout=300, env=dict(os.environ, PYTHONPATH=PYTHON_PACKAGE))
    theirs = json.loads(python.stdout)
    assert keys(ours) == keys(theirs)
    assert list(ours) == list(theirs) and list(ours["host"]) == list(theirs["host"])
    assert ours["host"] == theirs["host"] and ours["hmc"] == theirs["hmc"]
    assert ours["self_test"]["transports"] == theirs["self_test"]["transports"]
    assert (ours["problems"], ours["notes"]) == (theirs["problems"], theirs["notes"])
    assert python.returncode == (1 if ours["problems"] else 0)


def test_tcp_between_same_host_peers_is_a_problem():
    out = doctor("--json", "--size", "8M", env={"UCX_TLS": "tcp,self"})
    report = json.loads(out.stdout)
    assert report["self_test"]["transports"] == "tcp", report
    assert out.returncode == 1
    assert any("shared memory is unusable" in p for p in report["problems"]), report["problems"]


def test_a_key_file_others_can_read_is_a_problem(tmp_path):
    key = tmp_path / "key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o644)
    env = {"HMC_AUTH_KEY_FILE": str(key), "HMC_AUTH_KEY": ""}
    report = json.loads(doctor("--json", "--size", "8M", env=env).stdout)
    assert report["host"]["auth_key"] == {"source": "file", "path": str(key), "mode": "0644"}
    assert any("chmod 600" in p for p in report["problems"]), report["problems"]
    text = doctor("--size", "8M", env=env)
    assert text.returncode == 1 and f"PROBLEM       key file {key} has mode 0644" in text.stdout, text.stdout


def test_expected_hardware_that_is_missing_is_a_problem():
    out = doctor("--size", "8M", "--expect", "rdma, CUDA")
    report = json.loads(doctor("--json", "--size", "8M", "--expect", "rdma,cuda").stdout)
    missing_rdma = not rdma_port_active()
    assert any(p.startswith("RDMA expected") for p in report["problems"]) == missing_rdma, report["problems"]
    assert (any(p.startswith("CUDA expected but not usable: ") for p in report["problems"]) ==
            (report["host"]["gpu_memory"]["cuda"] != "available")), report["problems"]
    if missing_rdma:
        assert out.returncode == 1
        assert "PROBLEM       RDMA expected but no active RDMA port" in out.stdout, out.stdout


BAD_ARGUMENTS = [["--expect", "infiniband"], ["--size", "lots"], ["--size", "0"], ["--size", ""], ["--size", "-1M"],
                 ["--size", "64Mi"], ["--size", "99999999999999999999"], ["--size", "16777216T"],
                 ["--size", "1000T"], ["--size"], ["--frobnicate"], ["--json=yes"]]  # 1000T: past any host's memory


@pytest.mark.parametrize("args", BAD_ARGUMENTS)
def test_a_bad_argument_is_a_usage_error(args):
    out = doctor(*args)
    assert out.returncode == 2, (args, out)
    assert out.stderr.startswith("usage: hmc_doctor") and "hmc_doctor: error: " in out.stderr, out.stderr
    assert out.stdout == ""


def test_sizes_are_read_as_the_python_doctor_reads_them():
    assert report_of("--size=1MiB")["self_test"]["put_bytes"] == 1 << 20
    assert report_of("--size", " 2m ")["self_test"]["put_bytes"] == 2 << 20


def test_help():
    out = doctor("--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: hmc_doctor") and "--expect" in out.stdout
