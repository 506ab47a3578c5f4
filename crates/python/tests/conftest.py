"""Fixtures: real recordings made with the vlbiflow binary (gen -> record over loopback, gather)."""

import os
import queue
import signal
import socket
import subprocess
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def vlbiflow_bin() -> str:
    exe = os.environ.get("VLBIFLOW_BIN") or str(ROOT / "target" / "release" / "vlbiflow")
    if not Path(exe).exists():
        pytest.fail(f"{exe} missing: build it with cargo build --release -p vlbiflow (or set VLBIFLOW_BIN)")
    return exe


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([vlbiflow_bin(), *args], check=True, capture_output=True, text=True, timeout=120)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record_scan(tmp: Path, scan: str, threads: int, frames: int, payload: str, disks: int = 4,
                layout: str = "mark6", gen_args: tuple = (), streams: tuple = ("a",)) -> Path:
    """Records `frames` frames sent by `vlbiflow gen` over loopback as a scan across `disks` disks
    (`gen_args`: more options of gen, e.g. ("--drop-every", "7")). With several `streams` (labels), each
    is a stream of the recording on its own port, sent to by its own gen at the same time (station ids
    "P0", "P1", ... so their frames differ)."""
    for i in range(disks):
        (tmp / "d" / str(i)).mkdir(parents=True)
    ports = {label: free_udp_port() for label in streams}
    stream_args = sum((["--stream", f"{label}=vdif@127.0.0.1:{port},psn,frame-size=1032"]
                       for label, port in ports.items()), [])
    rec = subprocess.Popen(
        [vlbiflow_bin(), "record", *stream_args, "--disk", str(tmp / "d" / "*"),
         "--scan", scan, "--duration", "120", "--block-size", "128KB", "--buffered", "--format", layout],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: "queue.Queue[str]" = queue.Queue()
    err: list = []

    def pump() -> None:
        for line in rec.stderr:
            err.append(line)
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    try:
        # The recorder names each stream once its socket is bound.
        waiting = set(streams)
        while waiting:
            line = lines.get(timeout=60)
            if line == "":
                raise RuntimeError("recorder exited: " + "".join(err))
            waiting = {label for label in waiting if f"stream {label}:" not in line}
        station = (lambda i: "Py") if len(streams) == 1 else (lambda i: f"P{i}")
        gens = [
            subprocess.Popen(
                [vlbiflow_bin(), "gen", "--dest", f"127.0.0.1:{port}", "--psn", "--threads", str(threads),
                 "--pps", "2000", "--count", str(frames), "--payload", payload, "--station", station(i),
                 "--frame-size", "1032", *gen_args],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )
            for i, port in enumerate(ports.values())
        ]
        for g in gens:
            _, gerr = g.communicate(timeout=120)
            if g.returncode != 0:
                raise RuntimeError(f"gen exited {g.returncode}: {gerr}")
    finally:
        rec.send_signal(signal.SIGTERM)
        rec.wait(timeout=60)
    return tmp / "d"


@pytest.fixture(scope="session")
def mark6_scan(tmp_path_factory):
    """A 2-thread 2-bit Mark6 scan on 4 disks, with its gathered file."""
    tmp = tmp_path_factory.mktemp("mark6")
    disks = record_scan(tmp, "t_py_001", threads=2, frames=2400, payload="tone:100kHz")
    gathered = tmp / "t_py_001.vdif"
    run("gather", "t_py_001", "--disk", str(disks / "*"), "-o", str(gathered))
    files = sorted(disks.glob("*/t_py_001.vdif"))
    assert len(files) == 4, files
    return {"scan": "t_py_001", "disks": str(disks / "*"), "gathered": gathered, "files": files}


@pytest.fixture(scope="session")
def flexbuff_scan(tmp_path_factory):
    """A 4-thread 2-bit FlexBuff scan on 4 disks, with its gathered file."""
    tmp = tmp_path_factory.mktemp("flexbuff")
    disks = record_scan(tmp, "t_py_002", threads=4, frames=2400, payload="noise", layout="flexbuff")
    gathered = tmp / "t_py_002.vdif"
    run("gather", "t_py_002", "--disk", str(disks / "*"), "-o", str(gathered))
    chunks = sorted(disks.glob("*/t_py_002/t_py_002.*"))
    assert len({c.parent.parent for c in chunks}) == 4, chunks
    return {"scan": "t_py_002", "disks": str(disks / "*"), "gathered": gathered}
