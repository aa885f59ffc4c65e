"""A real full file system for tests and benchmarks/fault_sweep.py: a small tmpfs (when this
process may mount one) filled to a few KB."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def mount_tmpfs(path: Path, size: str, *opts: str) -> tuple[bool, str]:
    """Mount a tmpfs of ``size`` (e.g. ``8m``) at ``path``: (mounted, why not)."""
    path.mkdir(parents=True, exist_ok=True)
    if sys.platform != "linux" or os.geteuid() != 0:
        return False, "mounting needs root on Linux"
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *opts]), "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if r.returncode:
        return False, r.stderr.strip() or f"mount exited {r.returncode}"
    return True, ""


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(filler: Path, leave_bytes: int) -> None:
    """Write ``filler`` until its file system is full, then give back ``leave_bytes``."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    os.truncate(filler, max(0, filler.stat().st_size - leave_bytes))
