"""The spec's two forms in a ConfigMap (ranktable.stored): plain keys, or gzip in binaryData."""

from __future__ import annotations

import base64
import gzip
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from model.configmap import configmap_body, configmap_record
from model.records import JobKey
from ranktable import stored
from ranktable.clusterspec import SpecError, spec_to_json
from ranktable.hccl import render_hccl
from ranktable.launch import launcher
from ranktable.launch.wait import FileSource, Observation
from ranktable.stored import (
    TooLarge,
    files_from_configmap,
    pack,
    rank_table_file,
    read_files,
    replace_file,
    temp_dir,
    unpack,
    write_local_rank_table,
    write_rank_table,
)
from tests.support.kubeletdir import KubeletDir
from tests.support.specs import make_spec

FILES = {"cluster.json": '{"status":"completed","x":"' + "a" * 3000 + '"}', "hccl.json": '{"t":"' + "b" * 3000 + '"}'}


def test_files_that_fit_stay_plain_byte_for_byte() -> None:
    s = pack(FILES, limit=10_000)
    assert s.data == FILES and s.binary_data == {} and not s.compressed
    assert s.plain_bytes == s.stored_bytes == sum(len(v) for v in FILES.values())


def test_files_over_the_limit_go_compressed_whole_and_read_back_equal() -> None:
    s = pack(FILES, limit=1000)
    assert s.compressed and s.data == {}
    assert set(s.binary_data) == {"cluster.json.gz", "hccl.json.gz"}
    assert s.stored_bytes == sum(len(b) for b in s.binary_data.values()) <= 1000
    assert gzip.decompress(s.binary_data["hccl.json.gz"]).decode() == FILES["hccl.json"]
    assert unpack(s.data, s.binary_data) == FILES


def test_compression_is_deterministic_so_equal_specs_write_equal_bytes() -> None:
    assert pack(FILES, limit=1000) == pack(dict(FILES), limit=1000)


def test_files_of_exactly_the_limit_stay_plain_and_one_byte_more_goes_compressed() -> None:
    """Fit means at most the limit (the API server refuses only a total *over* 1 MiB)."""
    size = stored.plain_size(FILES)
    at = pack(FILES, limit=size)
    assert not at.compressed and at.data == FILES and at.stored_bytes == size
    assert pack(FILES, limit=size - 1).compressed


def test_the_compressed_form_is_byte_identical_for_equal_specs_written_at_different_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gzip's header carries a time; it is 0, so a re-write of an unchanged spec never looks like a change."""
    import time

    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)
    first = pack(FILES, limit=1000)
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.0)
    second = pack(dict(FILES), limit=1000)
    assert first.binary_data == second.binary_data
    for blob in first.binary_data.values():
        assert blob[4:8] == b"\0\0\0\0"  # MTIME (RFC 1952)


def test_too_large_even_compressed_names_both_sizes() -> None:
    with pytest.raises(TooLarge, match="gzip-compressed") as info:
        pack(FILES, limit=50)
    err = info.value
    assert err.plain == 6037 and err.stored > 50 and err.limit == 50
    assert str(err) == f"6037 bytes plain, {err.stored} bytes gzip-compressed, over the ConfigMap limit of 50 bytes"


def test_the_compressed_form_wins_over_stray_plain_keys() -> None:
    s = pack(FILES, limit=1000)
    assert unpack({"cluster.json": '{"old":1}', "hccl.json": "{}"}, s.binary_data) == FILES


def test_a_configmap_round_trips_through_the_api_json_in_both_forms() -> None:
    owner: dict[str, object] = {"apiVersion": "v1", "kind": "X", "name": "j", "uid": "u"}
    for limit in (10_000, 1000):
        s = pack(FILES, limit=limit)
        body = configmap_body(
            namespace="ns", name="cm", job=JobKey("vcjob/ns/j"), owner=owner, data=s.data, binary_data=s.binary_data
        )
        assert ("binaryData" in body) is s.compressed
        assert files_from_configmap(body) == FILES
        record = configmap_record(body)
        assert record.files == FILES


@pytest.mark.parametrize(
    ("binary", "fragment"),
    [
        pytest.param({"cluster.json.gz": "!!!"}, "not base64", id="base64"),
        pytest.param({"cluster.json.gz": base64.b64encode(b"plain text").decode()}, "not gzip", id="not-gzip"),
        pytest.param(
            {"cluster.json.gz": base64.b64encode(gzip.compress(b"{}" * 100)[:-12]).decode()}, "truncated", id="cut"
        ),
        pytest.param(
            {"cluster.json.gz": base64.b64encode(gzip.compress(b"\xff\xfe")).decode()}, "not UTF-8", id="utf8"
        ),
    ],
)
def test_undecodable_compressed_keys_are_spec_errors(binary: dict[str, str], fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment):
        files_from_configmap({"binaryData": binary})


def test_a_gzip_bomb_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stored, "MAX_TEXT_BYTES", 1000)
    with pytest.raises(SpecError, match="expands to more than 1000 bytes"):
        unpack({}, {"cluster.json.gz": gzip.compress(b" " * 5000)})


def test_a_mounted_volume_switching_forms_is_read_from_one_version(tmp_path: Path) -> None:
    volume = KubeletDir(tmp_path)
    volume.publish({"cluster.json": '{"epoch":1}', "hccl.json": '{"h":1}'})
    assert read_files(str(tmp_path)) == {"cluster.json": '{"epoch":1}', "hccl.json": '{"h":1}'}
    big = {"cluster.json": '{"epoch":2,"p":"' + "x" * 4000 + '"}', "hccl.json": '{"h":2,"p":"' + "y" * 4000 + '"}'}
    s = pack(big, limit=2000)
    volume.publish(dict(s.binary_data))
    # The kubelet removed the plain keys' links with the old version: nothing of epoch 1 is left to mix in.
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("..")) == [
        "cluster.json.gz",
        "hccl.json.gz",
    ]
    assert read_files(str(tmp_path)) == big
    obs = FileSource(str(tmp_path)).read()
    assert obs == Observation(cluster=big["cluster.json"], hccl=big["hccl.json"], final=False)


def test_the_file_source_reports_a_corrupt_compressed_file_as_malformed(tmp_path: Path) -> None:
    KubeletDir(tmp_path).publish({"cluster.json.gz": b"not gzip"})
    obs = FileSource(str(tmp_path)).read()
    assert obs.cluster is None and obs.error is not None and "not gzip" in obs.error


def test_the_compressed_form_gets_a_local_copy_of_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    volume = KubeletDir(tmp_path / "v")
    (tmp_path / "v").mkdir()
    volume.publish({"cluster.json": "{}", "hccl.json": "{}"})
    source = FileSource(str(tmp_path / "v"))
    assert source.rank_table_path("{}") == str(tmp_path / "v" / "hccl.json")
    volume.publish(dict(pack(FILES, limit=1000).binary_data))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile caches its choice
    (tmp_path / "tmp").mkdir()
    local = source.rank_table_path(FILES["hccl.json"])
    assert Path(local).parent.parent == tmp_path / "tmp" and Path(local).read_text() == FILES["hccl.json"]


def _local_files(base: Path) -> list[str]:
    """The files of the private directory of local copies, but its lock file."""
    (directory,) = base.iterdir()
    return sorted(p.name for p in directory.iterdir() if p.name != ".lock")


TABLE_1 = '{"epoch":1,"t":"' + "1" * 500 + '"}'
TABLE_2 = '{"epoch":2,"t":"' + "2" * 500 + '"}'


def test_local_copies_restarts_of_one_epoch_share_a_file_and_a_new_epoch_replaces_it(tmp_path: Path) -> None:
    first = write_local_rank_table(TABLE_1, base=str(tmp_path))
    for _ in range(4):  # the same table again (a restart of the same epoch): the same file, nothing added
        assert write_local_rank_table(TABLE_1, base=str(tmp_path)) == first
    assert _local_files(tmp_path) == [os.path.basename(first)]
    assert Path(first).read_text() == TABLE_1
    directory = Path(first).parent
    assert directory.name == f"ring-hccl-{os.getuid()}"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700 and stat.S_IMODE(os.stat(first).st_mode) == 0o600
    second = write_local_rank_table(TABLE_2, base=str(tmp_path))
    assert second != first and _local_files(tmp_path) == [os.path.basename(second)]
    assert Path(second).read_text() == TABLE_2


def test_local_copies_a_killed_writers_temporary_file_goes_with_the_next_write(tmp_path: Path) -> None:
    first = write_local_rank_table(TABLE_1, base=str(tmp_path))
    stale = Path(first).parent / ".hccl-0123.json.x9"
    stale.write_text("half a ta")
    write_local_rank_table(TABLE_1, base=str(tmp_path))
    assert _local_files(tmp_path) == [os.path.basename(first)]


EXEC_TRAINER = """\
import os, sys
from ranktable.stored import write_local_rank_table
path = write_local_rank_table(sys.argv[2], base=sys.argv[1])
os.execvp(sys.executable, [sys.executable, "-c", "import sys; print(sys.argv[1], flush=True); sys.stdin.read()", path])
"""


def test_local_copies_a_table_an_execd_trainer_runs_with_is_kept_until_it_exits(tmp_path: Path) -> None:
    # A launcher that writes the table and execs a trainer, which runs until its stdin closes.
    trainer = subprocess.Popen(
        [sys.executable, "-c", EXEC_TRAINER, str(tmp_path), TABLE_1],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert trainer.stdout is not None
        path = trainer.stdout.readline().strip()
        assert Path(path).read_text() == TABLE_1
        # Another container sharing this /tmp moves on to the next epoch: the running trainer's file stays.
        second = write_local_rank_table(TABLE_2, base=str(tmp_path))
        assert _local_files(tmp_path) == sorted([os.path.basename(path), os.path.basename(second)])
    finally:
        assert trainer.stdin is not None
        trainer.stdin.close()
        trainer.wait(timeout=30)
    # The trainer is gone: the next write removes its file.
    write_local_rank_table(TABLE_2, base=str(tmp_path))
    assert _local_files(tmp_path) == [os.path.basename(second)]


def test_local_copies_refuse_a_directory_that_is_not_private(tmp_path: Path) -> None:
    (tmp_path / f"ring-hccl-{os.getuid()}").write_text("not a directory")
    with pytest.raises(PermissionError, match="is not a directory of user"):
        write_local_rank_table(TABLE_1, base=str(tmp_path))


def test_an_unwritable_tmpdir_leaves_rank_table_file_unset_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = make_spec([("worker", 2)], devices=2)
    files = {"cluster.json": spec_to_json(spec), "hccl.json": render_hccl(spec)}
    volume = tmp_path / "config"
    volume.mkdir()
    KubeletDir(volume).publish(dict(pack(files, limit=1000).binary_data))
    read_only = tmp_path / "a-file"  # stands for /tmp on a read-only root: nothing can be created under it
    read_only.write_text("")
    monkeypatch.setattr(stored, "temp_dir", lambda: str(read_only))
    monkeypatch.delenv("RING_RANK_TABLE_DIR", raising=False)
    argv = ["--config-dir", str(volume), "--pod", "job-worker-1", "--hostfile-dir", str(tmp_path / "h")]
    assert launcher.main([*argv, "--timeout", "5", "--print", "json"]) == 0
    out, err = capsys.readouterr()
    assert "RANK_TABLE_FILE" not in json.loads(out) and json.loads(out)["RANK"] == "1"
    assert "warning: cannot write the rank table" in err and "RANK_TABLE_FILE is not set" in err
    monkeypatch.setattr(stored, "temp_dir", lambda: str(tmp_path))
    assert launcher.main([*argv, "--timeout", "5", "--print", "json"]) == 0
    assert Path(json.loads(capsys.readouterr().out)["RANK_TABLE_FILE"]).read_text() == files["hccl.json"]


def test_the_shared_storage_directory_gets_the_table_and_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "ranktable"
    monkeypatch.setenv("RING_RANK_TABLE_DIR", str(shared))
    path = rank_table_file('{"t":2}', epoch=2, default=lambda text: "unused")
    assert path == str(shared / "hccl.json")
    assert (shared / "hccl.json").read_text() == '{"t":2}' and (shared / "version").read_text() == "2"
    # A member of an older epoch starting late does not roll the shared table back ...
    assert write_rank_table('{"t":1}', directory=str(shared), epoch=1) == path
    assert (shared / "hccl.json").read_text() == '{"t":2}'
    # ... a newer epoch replaces it, and no temporary file is left behind.
    write_rank_table('{"t":3}', directory=str(shared), epoch=3)
    assert (shared / "hccl.json").read_text() == '{"t":3}' and (shared / "version").read_text() == "3"
    assert sorted(p.name for p in shared.iterdir()) == ["hccl.json", "version"]
    monkeypatch.delenv("RING_RANK_TABLE_DIR")
    assert rank_table_file("{}", epoch=3, default=lambda text: "mounted") == "mounted"


def test_api_mode_observes_either_form_and_reports_an_undecodable_one() -> None:
    from ranktable.launch.wait import observation_from_configmap as _observation

    s = pack(FILES, limit=1000)
    body = configmap_body(
        namespace="ns", name="cm", job=JobKey("vcjob/ns/j"), owner={}, data=s.data, binary_data=s.binary_data
    )
    obs = _observation(body)
    assert (obs.cluster, obs.hccl, obs.final, obs.error) == (FILES["cluster.json"], FILES["hccl.json"], True, None)
    assert _observation({"data": {"cluster.json": "{}"}}).cluster == "{}"
    assert _observation(None) == Observation(cluster=None, hccl=None, final=True)
    bad = _observation({"binaryData": {"cluster.json.gz": base64.b64encode(b"nope").decode()}})
    assert bad.cluster is None and bad.error is not None and "not gzip" in bad.error


def test_the_judge_parses_equal_texts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from ranktable.clusterspec import spec_from_json
    from ranktable.launch import wait

    calls: list[str] = []

    def counting(text: str) -> object:
        calls.append(text)
        return spec_from_json(text)

    monkeypatch.setattr(wait, "spec_from_json", counting)
    judge = wait.Judge(identity=wait.Identity(pod="p"), where="here")
    first = '{"status":"initializing","job":{"kind":"Job","apiVersion":"v","namespace":"n","name":"j","uid":"u","version":0},"epoch":0,"expected":1,"members":[]}'
    for _ in range(3):
        assert judge.judge(Observation(cluster=first, hccl=None, final=False)).startswith("spec initializing")
    assert len(calls) == 1
    second = first.replace('"epoch":0', '"epoch":1')
    assert "epoch 1" in str(judge.judge(Observation(cluster=second, hccl=None, final=False)))
    assert len(calls) == 2


def test_kubectl_ring_describe_names_the_compressed_form_and_its_sizes() -> None:
    from ringcontroller.kubectl_ring.render import _stored_note

    owner: dict[str, object] = {}
    for limit, note in ((10_000, ""), (1000, ", gzip-compressed: {stored:,} of 1,048,576 bytes (6,037 plain)")):
        s = pack(FILES, limit=limit)
        body = configmap_body(
            namespace="ns", name="cm", job=JobKey("vcjob/ns/j"), owner=owner, data=s.data, binary_data=s.binary_data
        )
        assert _stored_note(configmap_record(body)) == note.format(stored=s.stored_bytes)
    assert _stored_note(None) == ""


def test_temp_dir_is_tempfiles_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "usable").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "not-there"))
    monkeypatch.setenv("TEMP", str(tmp_path / "usable"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile's cached choice: computed again below
    assert temp_dir() == str(tmp_path / "usable")


def test_replace_file_swaps_the_whole_content_in_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "hostfile"
    replace_file(str(target), b"old\n")
    replace_file(str(target), b"new\n", mode=0o600)
    assert target.read_bytes() == b"new\n" and (target.stat().st_mode & 0o777) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostfile"]
