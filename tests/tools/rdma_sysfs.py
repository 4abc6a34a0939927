"""What the kernel says about RDMA ports, read apart from either doctor, for the doctors' tests."""
import os

RDMA_SYSFS = "/sys/class/infiniband"


def rdma_port_active():
    if not os.path.isdir(RDMA_SYSFS):
        return False
    for dev in os.listdir(RDMA_SYSFS):
        ports = os.path.join(RDMA_SYSFS, dev, "ports")
        for p in os.listdir(ports) if os.path.isdir(ports) else []:
            with open(os.path.join(ports, p, "state")) as f:
                if "ACTIVE" in f.read():
                    return True
    return False
