"""The two image builds say the same things: build/image.sh (daemonless) and
build/Dockerfile read what goes into the controller image from build/image/,
and both agree with the Deployment that runs it.

The built images themselves are checked by build/image.sh's self-check (runc,
user 65532, read-only root) and by ``tests/integration/test_images.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.imageconf import image_conf, setup_cfg

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
IMAGE = BUILD / "image"


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of build/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (BUILD / "Dockerfile").read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, rest = line.partition(" ")
            found.append((instruction.upper(), rest.strip()))
    return found


def runtime_stage() -> list[tuple[str, str]]:
    """The instructions of the Dockerfile's last stage (the image that ships)."""
    instructions = dockerfile()
    last_from = max(i for i, (ins, _) in enumerate(instructions) if ins == "FROM")
    return instructions[last_from:]


def args() -> dict[str, str]:
    found = {}
    for ins, rest in dockerfile():
        if ins == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            found[name] = value
    return found


def only(stage: list[tuple[str, str]], instruction: str) -> str:
    values = [rest for ins, rest in stage if ins == instruction]
    assert len(values) == 1, f"expected one {instruction}, found {values}"
    return values[0]


def lock_names(name: str) -> dict[str, str]:
    """{normalised name: line} of a lock file; every line pinned with a hash."""
    pins = {}
    for line in (IMAGE / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert re.fullmatch(r"[a-z0-9-]+==\S+ --hash=sha256:[0-9a-f]{64}", line), line
            pins[line.split("==")[0]] = line
    return pins


def norm(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


@pytest.fixture(scope="module")
def conf() -> dict[str, str]:
    return image_conf()


@pytest.fixture(scope="module")
def container() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((BUILD / "ring-controller.yaml").read_text()) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (controller,) = pod["containers"]
    return {"pod": pod, "container": controller}


def test_base_is_the_same_debian_suite(conf: dict[str, str]) -> None:
    base = args()["DEBIAN_IMAGE"]
    assert base == conf["DOCKER_BASE"]
    assert base.startswith("debian:") and conf["SUITE"] in base
    assert only(runtime_stage(), "FROM") == "${DEBIAN_IMAGE}"


def test_both_builds_read_the_same_lists(conf: dict[str, str]) -> None:
    text = (BUILD / "Dockerfile").read_text()
    assert "image/base-packages.txt" in text
    assert f"image/{conf['CONTROLLER_LOCK']}" in text
    assert args()["PIP"] == conf["PIP"]
    build_sh = (BUILD / "build.sh").read_text()
    assert f"build/image/{conf['CONTROLLER_LOCK']}" in build_sh  # copied into the context
    assert "build/image/base-packages.txt" in build_sh


def test_user_matches_the_deployment(conf: dict[str, str], container: dict[str, Any]) -> None:
    user = f"{conf['USER_ID']}:{conf['GROUP_ID']}"
    assert only(runtime_stage(), "USER") == user
    security = container["pod"]["securityContext"]
    assert f"{security['runAsUser']}:{security['runAsGroup']}" == user
    text = (BUILD / "Dockerfile").read_text()
    assert f"{conf['USER_NAME']}:x:{conf['USER_ID']}:{conf['GROUP_ID']}:" in text
    assert conf["USER_HOME"] in text


def test_entrypoint_ports_and_venv(conf: dict[str, str], container: dict[str, Any]) -> None:
    stage = runtime_stage()
    assert only(stage, "ENTRYPOINT") == f'["{conf["CONTROLLER_ENTRYPOINT"]}"]'
    exposed = only(stage, "EXPOSE").split()
    assert exposed == conf["CONTROLLER_EXPOSE"].split()
    assert exposed == [str(p["containerPort"]) for p in container["container"]["ports"]]
    env = only(stage, "ENV")
    assert f"PATH={conf['CONTROLLER_VENV']}/bin:" in env
    assert "PYTHONDONTWRITEBYTECODE=1" in env


def test_dockerfile_prunes_what_image_sh_prunes(conf: dict[str, str]) -> None:
    text = (BUILD / "Dockerfile").read_text()
    for path in conf["CONTROLLER_PRUNE"].split():
        assert f"{conf['CONTROLLER_VENV']}/lib/python3.11/site-packages/{path}" in text, path


def test_image_name_is_the_deployments(conf: dict[str, str], container: dict[str, Any]) -> None:
    version = setup_cfg()["metadata"]["version"]
    assert container["container"]["image"] == f"{conf['CONTROLLER_IMAGE']}:{version}"


def test_entrypoint_is_a_console_script(conf: dict[str, str]) -> None:
    scripts = setup_cfg()["options.entry_points"]["console_scripts"]
    names = {line.split("=")[0].strip() for line in scripts.splitlines() if line.strip()}
    assert conf["CONTROLLER_ENTRYPOINT"] in names
    assert "ring-launch" in names  # the package's launcher (the pyz runs the same code)


@pytest.mark.parametrize("lock", ["CONTROLLER_LOCK", "TRAINER_LOCK"], ids=["controller", "trainer"])
def test_locks_cover_the_runtime_dependencies(conf: dict[str, str], lock: str) -> None:
    pins = lock_names(conf[lock])
    requires = setup_cfg()["options"]["install_requires"]
    missing = [r for r in requires.splitlines() if r.strip() and norm(r) not in pins]
    assert not missing, f"{conf[lock]} lacks {missing}: run build/image.sh --lock"
    assert "ring-controller" not in pins  # the product comes from the fresh wheel
    assert "pip" not in pins  # pip runs from its wheel, the image has none


def test_trainer_lock_has_tensorflow_and_the_controller_lock_not(conf: dict[str, str]) -> None:
    wanted = norm(conf["TRAINER_REQUIRES"])
    assert wanted in lock_names(conf["TRAINER_LOCK"])
    assert not {"tensorflow", "tensorflow-cpu", "keras"} & set(lock_names(conf["CONTROLLER_LOCK"]))


def test_trainer_examples_exist_and_match_the_manifests(conf: dict[str, str]) -> None:
    files = conf["TRAINER_EXAMPLES"].split()
    assert all((ROOT / f).is_file() for f in files), files
    script = f"{conf['TRAINER_APP']}/train.py"
    assert any(f.endswith("/train.py") for f in files)
    # The example workloads run the script at the path the trainer image has it.
    for manifest in (
        "examples/volcano/tf-cifar10.yaml",
        "examples/trainer/tensorflow-runtime.yaml",
        "examples/job/tf-indexed-job.yaml",
        "examples/statefulset/tf-statefulset.yaml",
        "examples/lws/tf-lws.yaml",
        "examples/podgroup/tf-podgroup.yaml",
    ):
        assert script in (BUILD / manifest).read_text(), manifest


def test_both_builds_ship_the_one_file_launcher_in_launcher_dir(conf: dict[str, str]) -> None:
    copies = [rest.split() for ins, rest in runtime_stage() if ins == "COPY"]
    assert ["ring-launch.pyz", f"{conf['LAUNCHER_DIR']}/ring-launch.pyz"] in copies
    script = (BUILD / "image.sh").read_text()
    assert 'appdir="$LAUNCHER_DIR" files=(dist/ring-launch.pyz)' in script
