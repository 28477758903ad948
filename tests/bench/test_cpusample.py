"""tests.bench.cpusample's pure parts: which group a process is in, and a window's CPU seconds."""

from __future__ import annotations

import pytest

from tests.bench.cpusample import GROUPS, group, window


@pytest.mark.parametrize(
    ("comm", "cmdline", "expected"),
    [
        ("python3", "python3 /ring/ring-launch.pyz --from-api --register -- sh -c ...", "launcher"),
        (
            "sh",
            'sh -c echo "CONTAINER_START $(date +%s.%N)"; exec "$@" sh python3 /ring/ring-launch.pyz',
            "container shells",
        ),
        ("sh", 'sh -c echo "TF_CONFIG_EXEC $(date +%s.%N)"; exec "$@" sh python -c ...', "container shells"),
        ("python", 'python -c import json; print("RESULT " + json.dumps({}))', "trainer"),
        ("python", "python /app/train.py --result -", "trainer"),
        ("kube-apiserver", "/bin/kube-apiserver --etcd-servers=...", "kube-apiserver"),
        ("kube-controller", "/bin/kube-controller-manager --kubeconfig ...", "other"),
        ("containerd-shim", "/bin/containerd-shim-runc-v2 -namespace k8s.io", "containerd"),
        ("runc:[2:INIT]", "runc init", "containerd"),
        ("ring-controller", "/opt/ring-controller/bin/python -m ringcontroller", "ring-controller"),
        ("python3", "python3 -m tests.bench.cpusample record out.jsonl", "sampler"),
        ("bash", "bash", "other"),
    ],
)
def test_group(comm: str, cmdline: str, expected: str) -> None:
    assert group(comm, cmdline) == expected and expected in GROUPS


def test_window_sums_the_samples_inside_it_per_group() -> None:
    samples = [
        {"t": 9.99, "d": {"launcher": 100}},  # before the window
        {"t": 10.0, "d": {"launcher": 3, "kubelet": 1}},
        {"t": 10.5, "d": {"launcher": 2, "kube-apiserver": 4}},
        {"t": 11.0, "d": {"kubelet": 1}},
        {"t": 11.01, "d": {"kubelet": 50}},  # after it
    ]
    assert window(samples, 10.0, 11.0, hz=100) == {"kube-apiserver": 0.04, "kubelet": 0.02, "launcher": 0.05}
    assert window(samples, 20.0, 21.0, hz=100) == {}
