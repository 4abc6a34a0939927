"""python -m hmc doctor / version, run as users run them: the report, its exit status, and the
fallbacks it names (TCP between same-host peers, a key file others can read, RDMA asked for)."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from rdma_sysfs import rdma_port_active  # noqa: E402 - the doctors' tests share it


def hmc(*args, env=None):
    return subprocess.run([sys.executable, "-m", "hmc", *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))


def test_the_report_names_what_carried_the_self_test_and_how_fast():
    out = hmc("doctor", "--json", "--size", "8M")
    report = json.loads(out.stdout)
    assert report["host"]["ucx"][0].isdigit(), report["host"]
    test = report["self_test"]
    assert test is not None and test["transports"] and test["put_bandwidth_GBps"] > 0 and test["put_64B_p50_us"] > 0
    assert out.returncode == (1 if report["problems"] else 0), report
    text = hmc("doctor", "--size", "8M")
    assert "self-test" in text.stdout and text.stdout.rstrip().splitlines()[-1].startswith("doctor: ")


def test_tcp_between_same_host_peers_is_a_problem():
    out = hmc("doctor", "--json", "--size", "8M", env={"UCX_TLS": "tcp,self"})
    report = json.loads(out.stdout)
    assert report["self_test"]["transports"] == "tcp", report
    assert out.returncode == 1
    assert any("shared memory is unusable" in p for p in report["problems"]), report["problems"]


def test_a_key_file_others_can_read_is_a_problem(tmp_path):
    key = tmp_path / "key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o644)
    out = hmc("doctor", "--json", "--size", "8M", env={"HMC_AUTH_KEY_FILE": str(key), "HMC_AUTH_KEY": ""})
    report = json.loads(out.stdout)
    assert out.returncode == 1
    assert any("chmod 600" in p for p in report["problems"]), report["problems"]


def test_rdma_asked_for_is_a_problem_exactly_where_no_port_is_active():
    out = hmc("doctor", "--json", "--size", "8M", "--expect", "rdma")
    report = json.loads(out.stdout)
    assert any("RDMA expected" in p for p in report["problems"]) == (not rdma_port_active()), report["problems"]
    assert hmc("doctor", "--expect", "infiniband").returncode == 2  # argparse: an unknown name


def test_version_and_help():
    out = hmc("version")
    assert out.returncode == 0 and out.stdout.startswith("hmc ") and "UCX " in out.stdout
    assert hmc("--help").returncode == 0 and "doctor" in hmc("--help").stdout
    bad = hmc("frobnicate")
    assert bad.returncode == 2 and "unknown command" in bad.stderr
