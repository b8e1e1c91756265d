# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Run the research drivers on a borrowed GPU machine that has no internet and keeps nothing.

Such a machine gets a copy of the repository and whatever folder travels with it, and is handed back soon after a
call returns, with every process on it. Four steps, each a subcommand; the first and the last run here, the other
two there:

    # here: the datasets (re-compressed with xz, about 35% smaller than gzip), extra folders copied with their
    # symbolic links resolved, and the wheels of packages the machine lacks, at the versions installed here; then
    # the jobs, one shell command per line, in the bundle's jobs.txt
    python -m research.offline_gpu pack --data_dir DATA --datasets imdb 20newsgroups --wheels transformers datasets

    # there: install the wheels and unpack the data inside the bundle, then start every line of jobs.txt
    # ("{data_dir}" stands for the unpacked data, "{bundle}" for the bundle) in its own process session, so that
    # it outlives the call that started it
    python -m research.offline_gpu start --wait 540

    # there, in the same call or a later one: wait for the jobs, then pack their folders for the trip back,
    # without checkpoints and weights, in parts small enough to come back (at most 15 MiB each)
    python -m research.offline_gpu wait --seconds 540
    python -m research.offline_gpu collect --out OUT outputs/gpu

    # here: unpack the parts
    cat OUT/results.tar.gz.part* | tar -xzf -

The bundle is `.offline_bundle/` at the repository root (ignored by git), logs and job records go to
`outputs/offline_gpu/`. Only the standard library is used, so `start` runs before the wheels are installed.
"""

from __future__ import annotations

import argparse
import fnmatch
import gzip
import importlib.metadata
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = REPO / ".offline_bundle"
DEFAULT_LOG_DIR = REPO / "outputs" / "offline_gpu"
# Platforms pip may pick binary wheels for, for a Linux x86-64 machine with CPython 3.12.
WHEEL_PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                   "manylinux1_x86_64"]
# What `collect` leaves behind unless --keep_weights: training checkpoints, weights, optimizer states.
HEAVY = ["checkpoint*", "*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt"]
PART_BYTES = 15 * 1024 * 1024


def _size_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def pack_data(data_dir: Path, datasets: list[str], bundle: Path) -> list[Path]:
    """Copy `data_dir/<dataset>/*` into `bundle/packed/<dataset>/`, gzipped files re-compressed as xz."""
    written = []
    for name in datasets:
        source = data_dir / name
        if not source.is_dir():
            raise FileNotFoundError(f"--datasets: {source} is not a folder; --data_dir must hold one folder per "
                                    f"dataset.")
        target = bundle / "packed" / name
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(p for p in source.iterdir() if p.is_file()):
            if path.suffix == ".gz":
                out = target / (path.name[: -len(".gz")] + ".xz")
                with gzip.open(path, "rb") as src, lzma.open(out, "wb", preset=6) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            else:
                out = target / path.name
                shutil.copyfile(path, out)
            written.append(out)
    return written


def unpack_data(bundle: Path) -> Path:
    """Undo `pack_data` into `bundle/data/` (xz back to gzip, which the drivers read); returns that folder."""
    data_dir = bundle / "data"
    for path in sorted((bundle / "packed").rglob("*")):
        if not path.is_file():
            continue
        relative = path.relative_to(bundle / "packed")
        if path.suffix == ".xz":
            out = data_dir / relative.parent / (path.name[: -len(".xz")] + ".gz")
            out.parent.mkdir(parents=True, exist_ok=True)
            with lzma.open(path, "rb") as src, gzip.open(out, "wb", compresslevel=1) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        else:
            out = data_dir / relative
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
    return data_dir


def copy_resolved(spec: str, bundle: Path) -> Path:
    """`SRC:DEST`: copy SRC (a file or folder) to `bundle/copies/DEST` with symbolic links replaced by what they
    point to (a link travels as a link and arrives dangling)."""
    if ":" not in spec:
        raise ValueError(f"--copy: expected SRC:DEST, got {spec!r}.")
    source, dest = (Path(part) for part in spec.split(":", 1))
    if dest.is_absolute() or ".." in dest.parts:
        raise ValueError(f"--copy: DEST must be a relative path inside the bundle, got {str(dest)!r}.")
    target = bundle / "copies" / dest
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, symlinks=False, dirs_exist_ok=True)
    elif source.is_file():
        shutil.copyfile(source, target)
    else:
        raise FileNotFoundError(f"--copy: {source} does not exist.")
    return target


def pinned(requirement: str) -> str:
    """`name` becomes `name==<the version installed here>`; `name==x` stays."""
    if "==" in requirement:
        return requirement
    try:
        return f"{requirement}=={importlib.metadata.version(requirement)}"
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(f"--wheels: {requirement} is not installed here; name its version "
                         f"({requirement}==X).") from None


def download_wheels(requirements: list[str], bundle: Path, python_version: str) -> None:
    """Binary wheels for the GPU machine (no dependencies: name each missing one)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
               python_version, "--implementation", "cp", "-d", str(bundle / "whl")]
    for platform in WHEEL_PLATFORMS:
        command += ["--platform", platform]
    subprocess.run(command + [pinned(r) for r in requirements], check=True)


def install_wheels(bundle: Path) -> Path | None:
    """Install `bundle/whl/*.whl` into `bundle/site` (put on PYTHONPATH for the jobs); None when there are none."""
    wheels = sorted(str(p) for p in (bundle / "whl").glob("*.whl"))
    if not wheels:
        return None
    site = bundle / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(site)] + wheels, check=True)
    return site


def read_jobs(path: Path) -> list[str]:
    """One shell command per line; blank lines and lines starting with # are skipped."""
    if not path.is_file():
        raise FileNotFoundError(f"--jobs: {path} does not exist (write one shell command per line there).")
    jobs = [line.strip() for line in path.read_text().splitlines()]
    jobs = [job for job in jobs if job and not job.startswith("#")]
    if not jobs:
        raise ValueError(f"--jobs: {path} holds no command (one shell command per line).")
    return jobs


def start_jobs(jobs: list[str], log_dir: Path, bundle: Path, data_dir: Path, site: Path | None) -> list[dict]:
    """Start every job in its own process session from the repository root; record them in `log_dir/jobs.json`.
    In a job, "{data_dir}" stands for the unpacked data and "{bundle}" for the bundle (`--copy` puts its copies
    in "{bundle}/copies/DEST").

    A job's output goes to `log_dir/job<i>.log` and its exit status to `log_dir/job<i>.rc` when it ends.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    python_path = ([str(site)] if site is not None else []) + [str(REPO)]
    if env.get("PYTHONPATH"):
        python_path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(python_path)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # `python` is this one
    previous = json.loads((log_dir / "jobs.json").read_text()) if (log_dir / "jobs.json").is_file() else []
    records = list(previous)
    for command in jobs:
        index = len(records)
        command = command.replace("{data_dir}", str(data_dir)).replace("{bundle}", str(bundle))
        rc_file = log_dir / f"job{index}.rc"
        with open(log_dir / f"job{index}.log", "ab") as log:
            # the job in a shell of its own, so that its `exit` still lets the outer shell record the status
            process = subprocess.Popen(["bash", "-c", 'bash -c "$1"; echo $? > "$2"', "job", command, str(rc_file)],
                                       cwd=REPO, env=env,
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        records.append({"command": command, "pid": process.pid, "log": f"job{index}.log", "rc": rc_file.name,
                        "started": time.time()})
    (log_dir / "jobs.json").write_text(json.dumps(records, indent=1) + "\n")
    return records[len(previous):]


def job_states(log_dir: Path) -> list[dict]:
    """Each recorded job with its exit status (None while it runs) and the last line of its log."""
    path = log_dir / "jobs.json"
    if not path.is_file():
        raise FileNotFoundError(f"--log_dir: {path} does not exist; `start` writes it.")
    states = []
    for record in json.loads(path.read_text()):
        rc_path = log_dir / record["rc"]
        rc = int(rc_path.read_text().strip() or -1) if rc_path.is_file() else None
        lines = (log_dir / record["log"]).read_text(errors="replace").strip().splitlines()
        states.append(dict(record, exit=rc, last_line=lines[-1][-200:] if lines else ""))
    return states


def wait_for_jobs(log_dir: Path, seconds: float, poll: float = 10.0) -> list[dict]:
    """Wait until every job has ended or `seconds` have passed; returns `job_states`."""
    deadline = time.monotonic() + seconds
    while True:
        states = job_states(log_dir)
        if all(state["exit"] is not None for state in states) or time.monotonic() >= deadline:
            return states
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


def _heavy(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in HEAVY)


def collect(paths: list[Path], out: Path, keep_weights: bool = False, part_bytes: int = PART_BYTES) -> list[Path]:
    """Pack `paths` (relative to the repository root) into `out/results.tar.gz`, cut into parts of at most
    `part_bytes` (`results.tar.gz.part00`, ...) when it is larger. Checkpoints and weights stay behind unless
    `keep_weights`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in paths:
            path = path if path.is_absolute() else REPO / path
            if not path.exists():
                raise FileNotFoundError(f"collect: {path} does not exist.")
            arcname = path.relative_to(REPO) if path.is_relative_to(REPO) else Path(path.name)
            tar.add(path, arcname=str(arcname),
                    filter=lambda info: None if not keep_weights and _heavy(Path(info.name).name) else info)
    data = buffer.getvalue()
    out.mkdir(parents=True, exist_ok=True)
    if len(data) <= part_bytes:
        (out / "results.tar.gz").write_bytes(data)
        return [out / "results.tar.gz"]
    parts = []
    for index, offset in enumerate(range(0, len(data), part_bytes)):
        parts.append(out / f"results.tar.gz.part{index:02d}")
        parts[-1].write_bytes(data[offset: offset + part_bytes])
    return parts


def _print_states(states: list[dict]) -> None:
    for index, state in enumerate(states):
        status = "running" if state["exit"] is None else f"exit {state['exit']}"
        print(f"job{index} [{status}] {state['command']}\n    {state['last_line']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m research.offline_gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    parser.add_argument("--log_dir", type=Path, default=DEFAULT_LOG_DIR)
    commands = parser.add_subparsers(dest="command", required=True)
    pack = commands.add_parser("pack", help="here: data, resolved copies and wheels into the bundle")
    pack.add_argument("--data_dir", type=Path, default=None, help="the folder holding one folder per dataset")
    pack.add_argument("--datasets", nargs="+", default=[], help="folders of --data_dir to take")
    pack.add_argument("--copy", nargs="+", default=[], metavar="SRC:DEST", help="files or folders to take as well")
    pack.add_argument("--wheels", nargs="+", default=[],
                      help="packages to take as wheels: NAME (the version installed here) or NAME==VERSION")
    pack.add_argument("--python_version", default="3.12", help="of the GPU machine's Python, for the wheels")
    start = commands.add_parser("start", help="there: install, unpack and start the jobs")
    start.add_argument("--jobs", type=Path, default=None,
                       help="a file of shell commands, one per line (default: the bundle's jobs.txt, which travels "
                            "with it)")
    start.add_argument("--wait", type=float, default=0.0, help="then wait this many seconds for them")
    wait = commands.add_parser("wait", help="there: wait for the jobs and print their state")
    wait.add_argument("--seconds", type=float, default=0.0)
    gather = commands.add_parser("collect", help="there: pack result folders for the trip back")
    gather.add_argument("--out", type=Path, required=True, help="the folder that comes back")
    gather.add_argument("--keep_weights", action="store_true", help="take checkpoints and weights too")
    gather.add_argument("paths", nargs="*", type=Path, help="folders to take besides the job logs")
    args = parser.parse_args(argv)

    if args.command == "pack":
        if args.datasets and args.data_dir is None:
            parser.error("pack --datasets needs --data_dir")
        args.bundle.mkdir(parents=True, exist_ok=True)
        pack_data(args.data_dir, args.datasets, args.bundle) if args.datasets else None
        for spec in args.copy:
            copy_resolved(spec, args.bundle)
        if args.wheels:
            download_wheels(args.wheels, args.bundle, args.python_version)
        print(f"{args.bundle}: {_size_mib(args.bundle):.1f} MiB (the repository travels too; the limit is on both)")
    elif args.command == "start":
        jobs = read_jobs(args.jobs if args.jobs is not None else args.bundle / "jobs.txt")
        site = install_wheels(args.bundle)
        data_dir = unpack_data(args.bundle) if (args.bundle / "packed").is_dir() else args.bundle / "data"
        for record in start_jobs(jobs, args.log_dir, args.bundle, data_dir, site):
            print(f"started pid {record['pid']}: {record['command']} (log {args.log_dir / record['log']})")
        if args.wait > 0:
            _print_states(wait_for_jobs(args.log_dir, args.wait))
    elif args.command == "wait":
        _print_states(wait_for_jobs(args.log_dir, args.seconds))
    else:
        for part in collect([args.log_dir] + args.paths, args.out, keep_weights=args.keep_weights):
            print(f"{part}: {part.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
