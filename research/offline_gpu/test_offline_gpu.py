# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The helper that carries the research drivers to a GPU machine with no internet: data packed and unpacked
unchanged, links resolved, jobs that outlive their starter, and results that come back without the weights."""

import gzip
import importlib.metadata
import io
import os
import sys
import tarfile
import time

import pytest

from research.offline_gpu import __main__ as offline


def _dataset(root):
    folder = root / "data" / "toy"
    folder.mkdir(parents=True)
    with gzip.open(folder / "train.jsonl.gz", "wt") as f:
        f.writelines(f'{{"text": "document {i} " , "label": {i % 3}}}\n' for i in range(500))
    (folder / "labels.txt").write_text("a\nb\nc\n")
    return root / "data"


def test_data_comes_back_unchanged_after_packing(tmp_path):
    data_dir = _dataset(tmp_path)
    bundle = tmp_path / "bundle"
    written = offline.pack_data(data_dir, ["toy"], bundle)
    assert sorted(p.name for p in written) == ["labels.txt", "train.jsonl.xz"]
    unpacked = offline.unpack_data(bundle)
    original = gzip.open(data_dir / "toy" / "train.jsonl.gz").read()
    assert gzip.open(unpacked / "toy" / "train.jsonl.gz").read() == original
    assert (unpacked / "toy" / "labels.txt").read_text() == "a\nb\nc\n"
    with pytest.raises(FileNotFoundError, match="--datasets"):
        offline.pack_data(data_dir, ["absent"], bundle)


def test_copies_replace_links_with_what_they_point_to(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "vocab.txt").write_text("[PAD]\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "tokenizer").symlink_to(real, target_is_directory=True)
    (run / "config.json").symlink_to(real / "vocab.txt")
    copy = offline.copy_resolved(f"{run}:runs/one", tmp_path / "bundle")
    assert copy == tmp_path / "bundle" / "copies" / "runs" / "one"
    assert not any(p.is_symlink() for p in copy.rglob("*"))
    assert (copy / "tokenizer" / "vocab.txt").read_text() == "[PAD]\n" == (copy / "config.json").read_text()
    for bad in (str(run), f"{run}:/abs", f"{run}:../out"):
        with pytest.raises(ValueError, match="--copy"):
            offline.copy_resolved(bad, tmp_path / "bundle")
    with pytest.raises(FileNotFoundError, match="--copy"):
        offline.copy_resolved(f"{tmp_path / 'absent'}:x", tmp_path / "bundle")


def test_wheels_are_pinned_to_the_versions_installed_here():
    assert offline.pinned("numpy") == f"numpy=={importlib.metadata.version('numpy')}"
    assert offline.pinned("datasets==5.2.0") == "datasets==5.2.0"
    with pytest.raises(ValueError, match="--wheels"):
        offline.pinned("surely-not-an-installed-package")
    assert offline.install_wheels(offline.Path("/nonexistent-bundle")) is None


def test_jobs_run_in_their_own_session_and_record_their_exit(tmp_path):
    out = tmp_path / "result"
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(f"# a comment\n\nmkdir -p {out} && echo $HF_HUB_OFFLINE {{data_dir}} > {out}/ran.txt && sleep 1\n"
                    "echo failing; exit 3\n"
                    f"mkdir -p {out} && python -c 'import sys, research.offline_gpu; print(sys.prefix)'"
                    f" > {out}/python.txt\n")
    log_dir = tmp_path / "logs"
    started = offline.start_jobs(offline.read_jobs(jobs), log_dir, tmp_path / "bundle", tmp_path / "D", None)
    assert len(started) == 3 and os.getsid(started[0]["pid"]) == started[0]["pid"]  # a session of its own
    states = offline.wait_for_jobs(log_dir, seconds=60, poll=0.1)
    assert [s["exit"] for s in states] == [0, 3, 0] and states[1]["last_line"] == "failing"
    assert (out / "ran.txt").read_text() == f"1 {tmp_path / 'D'}\n"
    assert (out / "python.txt").read_text().strip() == sys.prefix  # `python` is the starter's environment
    # a later start adds jobs after the earlier ones
    jobs.write_text("true\n")
    offline.start_jobs(offline.read_jobs(jobs), log_dir, tmp_path / "bundle", tmp_path / "D", None)
    assert [s["exit"] for s in offline.wait_for_jobs(log_dir, seconds=60, poll=0.1)] == [0, 3, 0, 0]
    jobs.write_text("# nothing\n")
    with pytest.raises(ValueError, match="--jobs"):
        offline.read_jobs(jobs)


def test_wait_returns_at_its_deadline_while_a_job_runs(tmp_path):
    (tmp_path / "jobs.txt").write_text("sleep 30\n")
    started = offline.start_jobs(offline.read_jobs(tmp_path / "jobs.txt"), tmp_path, tmp_path, tmp_path, None)
    begin = time.monotonic()
    states = offline.wait_for_jobs(tmp_path, seconds=0.5, poll=0.1)
    assert states[0]["exit"] is None and time.monotonic() - begin < 5
    os.killpg(started[0]["pid"], 9)


def _untar(parts):
    data = b"".join(p.read_bytes() for p in parts)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_results_come_back_without_weights_in_small_enough_parts(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-10").mkdir(parents=True)
    (run / "checkpoint-10" / "optimizer.pt").write_bytes(b"x" * 1000)
    (run / "model.safetensors").write_bytes(b"w" * 1000)
    (run / "all_results.json").write_text('{"test_accuracy": 0.9}')
    (run / "noise.bin.txt").write_bytes(os.urandom(300_000))  # incompressible, so the archive needs parts
    files = _untar(offline.collect([run], tmp_path / "out"))
    assert sorted(files) == ["run/all_results.json", "run/noise.bin.txt"]
    parts = offline.collect([run], tmp_path / "out_parts", part_bytes=100_000)
    assert [p.name for p in parts] == [f"results.tar.gz.part{i:02d}" for i in range(len(parts))] and len(parts) >= 3
    assert all(p.stat().st_size <= 100_000 for p in parts) and _untar(parts) == files
    kept = _untar(offline.collect([run], tmp_path / "out_all", keep_weights=True))
    assert "run/model.safetensors" in kept and "run/checkpoint-10/optimizer.pt" in kept
    with pytest.raises(FileNotFoundError, match="collect"):
        offline.collect([tmp_path / "absent"], tmp_path / "out")


def test_the_command_line_starts_the_bundles_jobs_and_collects(tmp_path, capsys):
    bundle, logs, result = tmp_path / "bundle", tmp_path / "logs", tmp_path / "result"
    offline.main(["--bundle", str(bundle), "pack", "--data_dir", str(_dataset(tmp_path)), "--datasets", "toy"])
    (bundle / "jobs.txt").write_text(f"mkdir -p {result} && zcat {{data_dir}}/toy/train.jsonl.gz | wc -l"
                                     f" > {result}/n\n")
    offline.main(["--bundle", str(bundle), "--log_dir", str(logs), "start", "--wait", "60"])
    assert "job0 [exit 0]" in capsys.readouterr().out and (result / "n").read_text().strip() == "500"
    offline.main(["--bundle", str(bundle), "--log_dir", str(logs), "collect", "--out", str(tmp_path / "out"),
                  str(result)])
    assert sorted(_untar([tmp_path / "out" / "results.tar.gz"])) == ["logs/job0.log", "logs/job0.rc",
                                                                      "logs/jobs.json", "result/n"]
    with pytest.raises(FileNotFoundError, match="--jobs"):
        offline.main(["--bundle", str(tmp_path / "empty"), "--log_dir", str(logs), "start"])
